// The page's script: reads the graph embedded in the page (#gradexport-data), starts the viewer in
// #gradexport-viewer (viewer.js) and offers window.gradexportViewer (api.js).
import { scriptApi } from "./api.js";
import { Viewer } from "./viewer.js";

function start() {
  const source = document.getElementById("gradexport-data");
  const host = document.getElementById("gradexport-viewer");
  if (!source || !host) return;
  const viewer = new Viewer(host, JSON.parse(source.textContent));
  window.gradexportViewer = scriptApi(viewer);
  host.focus({ preventScroll: true });
}

start();
