/* A diagram a little wider than the column is shrunk until it fits, but never
   so far that its smallest text drops below 11 px on screen: a wider diagram
   stops at that floor and its box scrolls. Shrinking uses CSS `zoom`, which
   (unlike a transform) also shrinks the space the diagram takes in the page. */
(function () {
  "use strict";
  var MIN_TEXT_PX = 11;
  /* Material draws Mermaid inside a closed shadow root that no script of the
     page can read; the smallest text it draws there is an edge label at
     0.833 of the 16 px body text (tests/test_site_browser.py measures every
     label after this script ran and fails below 11 px). */
  var MERMAID_SMALLEST_TEXT_PX = 13.3;

  function smallestTextPx(drawing) {
    if (drawing.localName !== "svg") return MERMAID_SMALLEST_TEXT_PX;
    var sizes = Array.prototype.map.call(drawing.querySelectorAll("text"), function (text) {
      var box = text.getBoundingClientRect();
      return box.height > 0 ? parseFloat(getComputedStyle(text).fontSize) * Math.hypot(text.getScreenCTM().a, text.getScreenCTM().b) : Infinity;
    });
    return Math.min.apply(null, sizes.concat([MERMAID_SMALLEST_TEXT_PX]));
  }

  function fit(box) {
    var drawing = box.firstElementChild;
    if (!drawing) return;
    drawing.style.zoom = "";
    var natural = drawing.getBoundingClientRect().width;
    var room = box.clientWidth;
    if (natural === 0 || natural <= room) return;
    var zoom = Math.max(room / natural, MIN_TEXT_PX / smallestTextPx(drawing));
    if (zoom < 1) drawing.style.zoom = String(zoom);
    /* A Mermaid drawing still wider than the box opens at its middle: its top-down
       layout centres the root over the nodes that follow, and the closed shadow root
       hides where exactly. (Graphviz may put the root left, over a module's box: an
       SVG opens at its left edge.) */
    if (drawing.localName !== "svg") box.scrollLeft = (box.scrollWidth - box.clientWidth) / 2;
  }

  function watch(box) {
    var widths = new WeakMap();
    var observer = new ResizeObserver(function (entries) {
      entries.forEach(function (entry) {
        var width = Math.round(entry.contentRect.width);
        if (widths.get(entry.target) === width) return;
        widths.set(entry.target, width);
        fit(box);
      });
    });
    var follow = function () {
      observer.disconnect();
      observer.observe(box);
      if (box.firstElementChild) observer.observe(box.firstElementChild);
      fit(box);
    };
    /* Material replaces the <pre class="mermaid"> by its drawing once mermaid.js ran. */
    new MutationObserver(follow).observe(box, {childList: true});
    follow();
  }

  function start() {
    document.querySelectorAll(".gradexport-diagram:not(.gradexport-viewer):not(.gradexport-text)").forEach(watch);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
