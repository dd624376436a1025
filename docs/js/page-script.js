/* A page whose code blocks build on each other says so in a note of type
   `one-script` (`!!! one-script "..."` in Markdown); this adds a button to the
   note that copies every Python block of the page, in order, as one script. */
(function () {
  "use strict";

  /** Blocks titled so do not run in one process: a server never returns, a DDP rank needs its job. */
  var NOT_IN_SCRIPT = ["Serves until you press Ctrl+C", "Runs on every rank of a DDP job", "Runs on every rank of an FSDP2 job"];

  /** The page's Python blocks joined in order: what the button copies. An API reference's
      signatures and attribute values (mkdocstrings' `.doc` elements) are not code to run. */
  window.gradexportPageScript = function () {
    var blocks = Array.prototype.filter.call(document.querySelectorAll(".md-content .language-python"), function (block) {
      var title = block.querySelector(".filename");
      return !(title && NOT_IN_SCRIPT.indexOf(title.textContent) >= 0) && !block.closest(".doc");
    });
    return blocks.map(function (block) { return block.querySelector("code").textContent.replace(/\s+$/, ""); }).join("\n\n") + "\n";
  };

  function start() {
    document.querySelectorAll(".md-content .admonition.one-script").forEach(function (note) {
      var button = document.createElement("button");
      button.type = "button";
      button.className = "md-button gradexport-copy-script";
      button.textContent = "Copy the page's code as one script";
      button.addEventListener("click", function () {
        navigator.clipboard.writeText(window.gradexportPageScript()).then(function () {
          button.textContent = "Copied";
        }, function () {
          button.textContent = "Copying failed: select the blocks by hand";
        });
      });
      note.append(button);
    });
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
