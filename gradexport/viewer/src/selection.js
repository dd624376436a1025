// Writes: no viewer field.
// Changes: the classes of the drawn elements, and the folds (it opens the groups around an origin), and the camera (centerOn).


/** @typedef {import("./viewer.js").Viewer} Viewer */// How the selection shows on the drawing: the selected item, the paths from the loss to it and the search
// matches as classes (paintMarks); centring on an item; and on opening, the nodes where a non-finite gradient
// started, revealed and the first of them selected. Viewer.selectItem (viewer.js) changes the selection.

/** The page opens with at most this many non-finite origins revealed (the folded groups show the others). */
const REVEAL_ORIGINS = 8;

/**
 * Mark the drawn items and edges: selected, on a path to the selected node, matching the search. It paints
 * what is on the canvas (viewer.drawn), which lags viewer.current while a layout is on its way; draw() paints
 * again when the new drawing is there.
 * @param {Viewer} viewer
 */
export function paintMarks(viewer) {
  if (!viewer.drawn) return;
  const { graph, folds, selected, marks } = viewer;
  const { items, rep, edges, elements } = viewer.drawn;
  const onPath = new Set();
  if (marks) for (let v = 0; v < graph.n; v++) if (marks[v]) onPath.add(rep[v]);
  for (const item of items) {
    const g = elements.get(item);
    if (!g) continue;
    g.classList.toggle("gx-selected", item === selected || (selected !== null && rep[selected] === item && !folds.isGroup(selected)));
    g.classList.toggle("gx-on-path", onPath.has(item));
    g.classList.toggle("gx-match", viewer.matches.has(item));
  }
  for (const edge of edges) {
    if (!edge.element) continue;
    edge.element.classList.toggle("gx-on-path", marks !== null && edge.edges.some((e) => marks[graph.tgt[e]]));
  }
}

/**
 * Bring the drawn item that shows `item` (itself, or the folded group it is in) to the middle; `zoomIn`: at 1:1 at least.
 * @param {Viewer} viewer
 */
export function centerOn(viewer, item, zoomIn = false) {
  const drawn = viewer.drawn;
  if (!drawn) return;
  viewer.camera.centerOn(drawn.elements.get(viewer.folds.isGroup(item) ? item : drawn.rep[item]), zoomIn);
}

/**
 * The ids of the nodes where a non-finite gradient started (graph attribute nonfinite), in the order the engine ran them.
 * @param {Viewer} viewer
 */
function origins(viewer) {
  const found = viewer.graph.data.graph && viewer.graph.data.graph.nonfinite;
  return Array.isArray(found) ? found : [];
}

/**
 * Open the groups around the first REVEAL_ORIGINS origins, so they show at once; to keep the page small, no more.
 * @param {Viewer} viewer
 */
export function revealOrigins(viewer) {
  for (const id of origins(viewer).slice(0, REVEAL_ORIGINS)) {
    const item = viewer.folds.item(String(id));
    if (item !== undefined) viewer.folds.reveal(item);
  }
}

/**
 * On first render, select the first origin and bring it to the middle; passes `visible` on.
 * @param {Viewer} viewer
 */
export function showOrigin(viewer, visible) {
  const [first] = origins(viewer);
  const item = first === undefined ? undefined : viewer.folds.item(String(first));
  if (item === undefined || viewer.folds.isGroup(item)) return visible;
  viewer.selectItem(item);
  centerOn(viewer, item);
  return visible;
}
