// Drawing what is visible: refresh() works out the items, boxes and edges the folds leave visible, asks the
// layout worker for their positions and, when the latest answer comes, draw() puts them on the canvas as SVG.
// Writes: viewer.current, viewer.drawn, viewer.lastRequest, viewer.waiting.
// Changes: the children of viewer.viewport, viewer.status, viewer.timings, data-rendered on viewer.svg, and each drawn edge's element.
import { el, textWidth } from "./dom.js";
import { edgeLabelSize, layoutRequest } from "./layout-input.js";
import { BAR, BAR_COLOR, LINE, PAD_X, PAD_Y, boxTitle, groupMark, itemLook, shapePath } from "./looks.js";
import { visibleEdges } from "./model.js";
import { paintMarks } from "./selection.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/**
 * Lay out and draw what the folds show now: a Promise of the visible ids once drawn.
 * @param {Viewer} viewer
 */
export function refresh(viewer) {
  const { folds, graph, timings } = viewer;
  const started = performance.now();
  const { items, boxes, box } = folds.view();
  const rep = folds.representatives();
  const edges = visibleEdges(graph, rep);
  const view = { items, boxes, box, rep, edges };
  viewer.current = view;
  const looks = new Map(items.map((item) => [item, itemLook(viewer, item)]));
  const request = layoutRequest(viewer, view, looks, textWidth);
  // layoutRequest gave each edge its label's lines.
  const laid = /** @type {import("./viewer.js").LaidView} */ (view);
  viewer.lastRequest = request;
  viewer.status.textContent = `laying out ${items.length} nodes, ${edges.length} edges…`;
  return viewer.layouts.request(request).then(({ serial, result }) => {
    if (serial !== viewer.layouts.serial) return idle(viewer);
    draw(viewer, laid, result, looks);
    timings.layout = performance.now() - started;
    if (!timings.firstRender) timings.firstRender = performance.now() - timings.start;
    const folded = items.filter((item) => folds.isGroup(item)).length;
    viewer.status.textContent =
      `${items.length} visible (${folded} folded) of ${graph.n} nodes` + (result.warning ? " · boxes approximated" : "");
    const waiting = viewer.waiting;
    viewer.waiting = [];
    for (const resolve of waiting) resolve();
    return viewer.visible();
  });
}

/**
 * A Promise of the visible ids, resolved once the latest layout is drawn.
 * @param {Viewer} viewer
 */
export function idle(viewer) {
  return new Promise((resolve) => viewer.waiting.push(() => resolve(undefined))).then(() => viewer.visible());
}

/**
 * Replace the drawing with `view` laid out as `result` (`looks` as itemLook gave them); it becomes viewer.drawn.
 * @param {Viewer} viewer
 * @param {import("./viewer.js").LaidView} view
 * @param {import("./layout.js").LayoutResult} result
 * @param {Map<number, import("./looks.js").Look>} looks
 */
function draw(viewer, view, result, looks) {
  const { folds, graph, styles } = viewer;
  const { items, boxes, edges } = view;
  /** @type {Map<number, SVGGElement>} */
  const elements = new Map();
  // `looks` holds every visible item.
  const lookOf = (/** @type {number} */ item) => /** @type {import("./looks.js").Look} */ (looks.get(item));
  const viewport = viewer.viewport;
  viewport.replaceChildren();
  const boxLayer = el("svg:g", { class: "gx-boxes" });
  const edgeLayer = el("svg:g", { class: "gx-edges" });
  const nodeLayer = el("svg:g", { class: "gx-nodes" });
  viewport.append(boxLayer, edgeLayer, nodeLayer);
  const depth = (b) => {
    let d = 0;
    for (let outer = view.box.get(b) ?? -1; outer >= 0; outer = view.box.get(outer) ?? -1) d++;
    return d;
  };
  for (const b of [...boxes].sort((a, c) => depth(a) - depth(c))) {
    const p = result.boxes["b" + b];
    if (!p) continue;
    const g = el("svg:g", { class: `gx-box gx-box-${folds.group(b).kind}`, "data-id": folds.itemId(b) });
    const frame = el("svg:rect", { class: "bg", x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, rx: 6 });
    const mark = groupMark(folds.group(b));
    if (mark) {
      frame.style.stroke = styles[mark].stroke;
      g.dataset.mark = mark;
    }
    g.appendChild(frame);
    const title = el("svg:g", { class: "gx-box-title", "data-box": b });
    const text = boxTitle(folds, b);
    const tw = textWidth(text) + 8;
    title.appendChild(el("svg:rect", { class: "bg", x: p.x - p.w / 2 + 4, y: p.y - p.h / 2 + 2, width: tw, height: LINE + 2, rx: 3 }));
    title.appendChild(el("svg:text", { x: p.x - p.w / 2 + 8, y: p.y - p.h / 2 + 2 + LINE - 3 }, text));
    title.appendChild(el("svg:title", {}, "collapse"));
    g.appendChild(title);
    boxLayer.appendChild(g);
    elements.set(b, g);
  }
  edges.forEach((edge, j) => {
    const p = result.edges["e" + j];
    if (!p) return;
    const g = el("svg:g", { class: "gx-edge", "data-edge": j });
    const d = "M" + p.points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" L");
    const path = el("svg:path", { d, class: "gx-edge-line", "marker-end": "url(#gx-arrow)" });
    const look = (viewer.scale ? viewer.scale.style(graph, edge) : null) || (edge.mark && { color: edge.mark.color, width: 2, bad: false });
    if (look) {
      path.style.stroke = look.color;
      path.style.strokeWidth = String(look.width);
      if (look.bad) g.classList.add("gx-bad");
    }
    if (edge.mark) g.dataset.mark = edge.mark.mark;
    g.appendChild(path);
    const label = el("svg:g", { class: "gx-edge-label" });
    const { w, h } = edgeLabelSize(edge.lines, textWidth);
    label.appendChild(el("svg:rect", { class: "bg", x: p.x - w / 2, y: p.y - h / 2, width: w, height: h, rx: 2 }));
    edge.lines.forEach((line, k) => {
      label.appendChild(el("svg:text", { x: p.x, y: p.y - h / 2 + 12 + 14 * k, "text-anchor": "middle" }, line));
    });
    g.appendChild(label);
    edgeLayer.appendChild(g);
    edge.element = g;
  });
  let most = 0;
  for (const item of items) most = Math.max(most, lookOf(item).bytes || 0);
  for (const item of items) {
    const p = result.nodes["i" + item];
    const look = lookOf(item);
    const style = styles[look.cls === "fold" ? "backward" : look.cls];
    const g = el("svg:g", { class: `gx-node gx-${look.cls}`, "data-item": item, "data-id": folds.itemId(item) });
    const x0 = p.x - p.w / 2;
    const y0 = p.y - p.h / 2;
    if (look.cls === "fold" || look.cls === "module") {
      g.appendChild(el("svg:rect", { class: "gx-stack", x: x0 + 4, y: y0 + 4, width: p.w, height: p.h, rx: 4, fill: style.fill, stroke: style.stroke }));
    }
    const shape = el("svg:path", { class: "bg gx-shape", d: shapePath(style.shape, x0, y0, p.w, p.h), fill: style.fill, stroke: style.stroke });
    if (style.dashed || look.cls === "fold") shape.setAttribute("stroke-dasharray", "4 3");
    if (look.mark) {
      // A marked node, or a folded group holding one: the outline in the mark's colour.
      shape.setAttribute("stroke", styles[look.mark].stroke);
      g.classList.add("gx-marked");
      g.dataset.mark = look.mark;
    }
    g.appendChild(shape);
    if (viewer.saved && look.bytes !== undefined) {
      const width = p.w - 2 * PAD_X;
      const fraction = most > 0 ? (look.bytes || 0) / most : 0;
      const y = y0 + p.h - PAD_Y - BAR;
      g.appendChild(el("svg:rect", { class: "gx-saved-track", x: x0 + PAD_X, y, width, height: BAR }));
      g.appendChild(el("svg:rect", { class: "gx-saved-bar", x: x0 + PAD_X, y, width: width * fraction, height: BAR, fill: BAR_COLOR, "data-fraction": fraction }));
    }
    look.lines.forEach((line, k) => {
      g.appendChild(el("svg:text", { x: p.x, y: y0 + PAD_Y + LINE * (k + 1) - 4, "text-anchor": "middle", fill: style.text }, line));
    });
    if (folds.isGroup(item)) g.appendChild(el("svg:title", {}, "click to expand"));
    nodeLayer.appendChild(g);
    elements.set(item, g);
  }
  viewer.drawn = { ...view, elements };
  viewer.svg.setAttribute("data-rendered", String(viewer.layouts.serial));
  paintMarks(viewer);
  viewer.camera.redrawn({ width: result.width || 1, height: result.height || 1 });
  if (viewer.stepper) viewer.stepper.paint();
  if (viewer.drawnHook) viewer.drawnHook(result, looks);
}
