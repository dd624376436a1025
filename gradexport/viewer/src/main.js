// The page's script: reads the graph embedded in the page (#gradexport-data), starts the viewer in
// #gradexport-viewer (viewer.js) and offers window.gradexportViewer (api.js); on a flight-recorder bundle's page
// (#gradexport-bundle) it mounts the two steps side by side instead (bundle.js).
// Writes: no viewer field.
// Changes: window.gradexportViewer.
import { scriptApi } from "./api.js";
import { mountBundle } from "./bundle.js";
import { Viewer } from "./viewer.js";

// The script's own text, read while it runs: a bundle's page writes each step's viewer page with it.
const ownScript = document.currentScript ? document.currentScript.textContent || "" : "";

function start() {
  const host = document.getElementById("gradexport-viewer");
  const bundle = document.getElementById("gradexport-bundle");
  if (bundle && host) {
    mountBundle(host, JSON.parse(bundle.textContent || "{}"), ownScript);
    return;
  }
  const source = document.getElementById("gradexport-data");
  if (!source || !host) return;
  const viewer = new Viewer(host, JSON.parse(source.textContent));
  window.gradexportViewer = scriptApi(viewer);
  if (window.parent === window) host.focus({ preventScroll: true });
  else followParentTheme();
}

/** Embedded in a page (the MkDocs plugin's iframe): take the page's theme on load and on every change.
 * The page's script posts {gradexportTheme: "light" | "dark"}; the viewer says when it can listen. */
function followParentTheme() {
  window.addEventListener("message", (event) => {
    const theme = event.source === window.parent && event.data ? event.data.gradexportTheme : undefined;
    if (theme === "light" || theme === "dark") window.gradexportViewer.theme(theme);
  });
  window.parent.postMessage({ gradexportReady: true }, "*");
}

start();
