// Finding one's way on a large drawing: a diff's changes one after the other (the page opens at the first),
// the minimap (the whole drawing small, the part on screen framed; a click there goes there), and the
// direction the layout runs in (top to bottom or left to right).
// Writes: viewer.change, viewer.changeCount, viewer.minimap, viewer.options.
// Changes: the change buttons in the toolbar, the minimap in viewer.stage (hidden while the whole drawing is in view), viewer.directionButton's text, viewer.camera.fitted and viewer.camera.moved.
import { el } from "./dom.js";
import { refresh } from "./draw.js";
import { revealAndSelect } from "./search.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

const DIFF_CHANGES = new Set(["added", "removed", "changed"]);

/** The nodes a diff marks added, removed or changed, in the graph's order (from the loss down); [] on other pages. */
export function diffChanges(graph) {
  const attributes = graph.data.graph || {};
  if (!("diff" in attributes)) return [];
  const changes = [];
  for (let i = 0; i < graph.n; i++) if (DIFF_CHANGES.has(graph.field(i, "diff"))) changes.push(i);
  return changes;
}

/**
 * Go to change `index` of viewer.changes (wrapping around): open its groups, select it, centre and zoom on it.
 * @param {Viewer} viewer
 */
export function goToChange(viewer, index) {
  const changes = viewer.changes;
  if (!changes.length) return Promise.resolve(viewer.visible());
  viewer.change = ((index % changes.length) + changes.length) % changes.length;
  showChangeCount(viewer);
  return revealAndSelect(viewer, changes[viewer.change]).then(() => viewer.visible());
}

/**
 * "change k of N" in the toolbar.
 * @param {Viewer} viewer
 */
export function showChangeCount(viewer) {
  if (viewer.changeCount) viewer.changeCount.textContent = `change ${viewer.change + 1} of ${viewer.changes.length}`;
}

/**
 * The toolbar's previous and next change buttons and their count, on a diff's page.
 * @param {Viewer} viewer
 */
export function addChangeButtons(viewer, button, bar) {
  if (!viewer.changes.length) return;
  button("‹ Change", "Previous change (p)", () => goToChange(viewer, viewer.change - 1));
  viewer.changeCount = el("span", { class: "gx-change-count", role: "status" });
  bar.appendChild(viewer.changeCount);
  button("Change ›", "Next change (n)", () => goToChange(viewer, viewer.change + 1));
  showChangeCount(viewer);
}

/** The direction across the current one: TB and LR, BT and RL. */
const ACROSS = { TB: "LR", LR: "TB", BT: "RL", RL: "BT" };

/**
 * Lay the drawing out the other way (top to bottom or left to right), fitted anew.
 * @param {Viewer} viewer
 */
export function flipDirection(viewer) {
  const now = viewer.options.direction || "TB";
  viewer.options = { ...viewer.options, direction: ACROSS[now] || "LR" };
  if (viewer.directionButton) viewer.directionButton.textContent = directionLabel(viewer);
  viewer.camera.fitted = false;
  return refresh(viewer);
}

/** @param {Viewer} viewer */
export function directionLabel(viewer) {
  const direction = viewer.options.direction || "TB";
  return direction === "TB" || direction === "BT" ? "↓ Top-down" : "→ Left-right";
}

const MINIMAP_SIZE = 150;

/**
 * The minimap in the stage's top right corner; it follows the camera.
 * @param {Viewer} viewer
 */
export function buildMinimap(viewer, stage) {
  const frame = el("div", { class: "gx-minimap", "aria-label": "Minimap: click to go there" });
  const svg = el("svg:svg", { class: "gx-minimap-svg", preserveAspectRatio: "xMidYMid meet" });
  const content = el("svg:g", { class: "gx-minimap-content" });
  const view = el("svg:rect", { class: "gx-minimap-view" });
  svg.append(content, view);
  frame.appendChild(svg);
  stage.appendChild(frame);
  viewer.minimap = { frame, svg, content, view };
  const go = (event) => {
    const matrix = svg.getScreenCTM();
    if (!matrix) return;
    const point = new DOMPoint(event.clientX, event.clientY).matrixTransform(matrix.inverse());
    viewer.camera.centerAt(point.x, point.y);
  };
  let pressed = false;
  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    pressed = true;
    go(event);
    event.stopPropagation();
  });
  svg.addEventListener("pointermove", (event) => pressed && go(event));
  window.addEventListener("pointerup", () => (pressed = false));
  viewer.camera.moved = () => frameView(viewer);
}

/**
 * Draw what is on the canvas (result: the layout) small in the minimap: boxes and nodes as rectangles.
 * @param {Viewer} viewer
 */
export function drawMinimap(viewer, result, looks) {
  const map = viewer.minimap;
  if (!map) return;
  const width = result.width || 1;
  const height = result.height || 1;
  const scale = MINIMAP_SIZE / Math.max(width, height);
  map.svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  // At least 30 px across, so that a deep net's thin minimap can still be clicked.
  map.svg.setAttribute("width", String(Math.max(30, Math.round(width * scale))));
  map.svg.setAttribute("height", String(Math.max(30, Math.round(height * scale))));
  map.content.replaceChildren();
  for (const p of Object.values(result.boxes || {})) {
    map.content.appendChild(el("svg:rect", { class: "gx-minimap-box", x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h }));
  }
  for (const [id, p] of Object.entries(result.nodes || {})) {
    const look = looks.get(Number(id.slice(1)));
    const style = viewer.styles[look && look.cls !== "fold" ? look.cls : "backward"];
    map.content.appendChild(el("svg:rect", { x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, fill: style ? style.stroke : "#616161" }));
  }
  map.bounds = { width, height };
  frameView(viewer);
}

/**
 * Frame, on the minimap, the part of the drawing the canvas shows now.
 * @param {Viewer} viewer
 */
function frameView(viewer) {
  const map = viewer.minimap;
  if (!map || !map.bounds) return;
  const { x, y, k } = viewer.camera.transform;
  const { width, height } = viewer.camera.screen();
  const view = { x: -x / k, y: -y / k, width: width / k, height: height / k };
  for (const [key, value] of Object.entries(view)) map.view.setAttribute(key, value.toFixed(1));
  // Where the canvas shows the whole drawing the minimap would only cover part of it: it steps aside.
  const whole = view.x <= 0 && view.y <= 0 && view.x + view.width >= map.bounds.width && view.y + view.height >= map.bounds.height;
  map.frame.classList.toggle("gx-minimap-idle", whole);
  const strokeWidth = Math.max(map.bounds.width, map.bounds.height) / MINIMAP_SIZE;
  map.view.setAttribute("stroke-width", (2 * strokeWidth).toFixed(2));
}
