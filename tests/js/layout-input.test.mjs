// The layout request (gradexport/viewer/src/layout-input.js) made from what the folds leave visible, and the
// layout (layout.js, dagre) it gets back. Text widths come from a stand-in measure of 7 px a character, so
// each size below is worked out from the lines the test knows the viewer shows.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { layout } from "../../gradexport/viewer/src/layout.js";
import { layoutRequest } from "../../gradexport/viewer/src/layout-input.js";
import { itemLook } from "../../gradexport/viewer/src/looks.js";
import { Folds, Graph, visibleEdges } from "../../gradexport/viewer/src/model.js";
import { itemOf, leaf, op, pageData, root } from "./pages.mjs";

const measure = (text) => 7 * text.length;
/** A node's width: its longest line at 7 px a character (at least 24), plus 10 px padding each side. */
const width = (...lines) => Math.max(24, ...lines.map(measure)) + 20;
/** A node's height: 16 px a line, 6 px padding above and below, and 6 more for the saved-bytes bar. */
const height = (lines, bar = false) => 16 * lines + 12 + (bar ? 6 : 0);
const WORDS = { added: "+ added", removed: "− removed", changed: "~ changed", nonfinite: "non-finite gradient starts here" };

/**
 * loss → MulBackward0 → leaf w, Mul and w in module "fc" (inside the model's group, "module:", opened here);
 * the edge Mul → w has the attributes `edgeExtra` besides its indices.
 */
function page(/** @type {{options?: Record<string, unknown>, graph?: Record<string, unknown>, edgeExtra?: Record<string, unknown>, mul?: Record<string, unknown>}} */ { options = {}, graph = {}, edgeExtra, mul = {} } = {}) {
  const data = pageData({
    nodes: [root("loss"), op("MulBackward0", { module: "fc", ...mul }), leaf(["w"], { module: "fc" })],
    edges: [[0, 1, 0, 0], [1, 2, 0, 1, edgeExtra]],
    graph,
    options,
  });
  const pageGraph = new Graph(data);
  const folds = new Folds(pageGraph);
  folds.expanded.add(itemOf(folds, "module:"));
  return { graph: pageGraph, folds, options, saved: null, scale: null, words: WORDS, markColors: { added: "#0a0" } };
}

const byId = (a, b) => a.id.localeCompare(b.id);

/** The request for what `context.folds` shows now, its nodes and boxes in the order of their ids. */
function requestFor(context) {
  const { items, boxes, box } = context.folds.view();
  const rep = context.folds.representatives();
  const view = { items, boxes, box, rep, edges: visibleEdges(context.graph, rep) };
  const looks = new Map(items.map((item) => [item, itemLook(context, item)]));
  const request = layoutRequest(context, view, looks, measure);
  request.nodes.sort(byId);
  request.boxes.sort(byId);
  return { request, view };
}

describe("layoutRequest", () => {
  test("a folded module is one node sized for its label and its count, in the box of the model", () => {
    const context = page();
    const model = itemOf(context.folds, "module:");
    const fc = itemOf(context.folds, "module:fc");
    const { request } = requestFor(context);
    assert.equal(request.direction, "TB");
    assert.deepEqual(request.boxes, [{ id: `b${model}`, box: null, w: measure("(model) ▾") + 20, h: 16, compound: true }]);
    assert.deepEqual(request.nodes, [
      { id: "i0", box: null, w: width("loss", "()"), h: height(2) },
      { id: `i${fc}`, box: `b${model}`, w: width("fc", "2 nodes"), h: height(2) },
    ]);
    assert.deepEqual(request.edges, [{ id: "e0", from: "i0", to: `i${fc}`, next: 0, w: measure("0→0") + 6, h: 16 }]);
  });

  test("an opened module is a box inside its parent's, its nodes inside it", () => {
    const context = page({ options: { direction: "LR" } });
    const model = itemOf(context.folds, "module:");
    const fc = itemOf(context.folds, "module:fc");
    context.folds.expanded.add(fc);
    const { request, view } = requestFor(context);
    assert.equal(request.direction, "LR");
    assert.deepEqual(request.boxes, [
      { id: `b${model}`, box: null, w: measure("(model) ▾") + 20, h: 16, compound: true },
      { id: `b${fc}`, box: `b${model}`, w: measure("fc ▾") + 20, h: 16, compound: true },
    ]);
    assert.deepEqual(request.nodes, [
      { id: "i0", box: null, w: width("loss", "()"), h: height(2) },
      { id: "i1", box: `b${fc}`, w: width("MulBackward0"), h: height(1) },
      { id: "i2", box: `b${fc}`, w: width("w", "(2,)"), h: height(2) },
    ]);
    assert.deepEqual(request.edges.map(({ from, to }) => [from, to]), [["i0", "i1"], ["i1", "i2"]]);
    assert.deepEqual(view.edges[1].lines, ["0→1"]);
  });

  test("with saved bytes, every node leaves room for the bar, and a group says what it holds", () => {
    const base = page();
    const fc = itemOf(base.folds, "module:fc");
    const saved = new Float64Array(base.folds.groups.length);
    saved[fc - base.graph.n] = 2048;
    const { request } = requestFor({ ...base, saved });
    assert.deepEqual(request.nodes, [
      { id: "i0", box: null, w: width("loss", "()"), h: height(2, true) },
      { id: `i${fc}`, box: `b${itemOf(base.folds, "module:")}`, w: width("fc", "2 nodes", "saved 2.0 KiB"), h: height(3, true) },
    ]);
  });

  test("an edge's label carries its shape, its gradient's norm and a diff's sign", () => {
    const extra = { shape: [3, 4], dtype: "float16", grad: { norm: 0.012345 }, diff: "added" };
    const context = page({ options: { edge_shapes: true }, graph: { diff: {} }, edgeExtra: extra });
    context.scale = /** @type {any} */ ({});
    context.folds.expanded.add(itemOf(context.folds, "module:fc"));
    const { request, view } = requestFor(context);
    const lines = ["0→1 +", "(3, 4) float16", "‖g‖ 0.0123"];
    assert.deepEqual(view.edges[1].lines, lines);
    assert.deepEqual(request.edges[1], { id: "e1", from: "i1", to: "i2", next: 0, w: Math.max(...lines.map(measure)) + 6, h: 14 * 3 + 2 });
  });

  test("a node's diff mark is its first line", () => {
    const context = page({ graph: { diff: {} }, mul: { diff: "changed", changes: { op: ["A", "B"] } } });
    context.folds.expanded.add(itemOf(context.folds, "module:fc"));
    const look = itemLook(context, 1);
    assert.deepEqual(look.lines, ["~ changed: op", "MulBackward0"]);
    assert.equal(look.mark, "changed");
    const folded = page({ graph: { diff: {} }, mul: { diff: "added" } });
    assert.deepEqual(itemLook(folded, itemOf(folded.folds, "module:fc")).lines, ["fc", "2 nodes", "+1 added"]);
  });
});

describe("layout", () => {
  test("each node lies inside its box, each box inside the drawing", () => {
    const context = page();
    const fc = itemOf(context.folds, "module:fc");
    context.folds.expanded.add(fc);
    const { request } = requestFor(context);
    const result = layout(request);
    const inside = (inner, outer) =>
      inner.x - inner.w / 2 >= outer.x - outer.w / 2 &&
      inner.x + inner.w / 2 <= outer.x + outer.w / 2 &&
      inner.y - inner.h / 2 >= outer.y - outer.h / 2 &&
      inner.y + inner.h / 2 <= outer.y + outer.h / 2;
    const box = result.boxes[`b${fc}`];
    const modelBox = result.boxes[`b${itemOf(context.folds, "module:")}`];
    const drawing = { x: result.width / 2, y: result.height / 2, w: result.width, h: result.height };
    assert.ok(inside(result.nodes.i1, box));
    assert.ok(inside(result.nodes.i2, box));
    assert.ok(!inside(result.nodes.i0, box));
    assert.ok(inside(box, modelBox));
    assert.ok(inside(modelBox, drawing));
    for (const node of request.nodes) assert.deepEqual([result.nodes[node.id].w, result.nodes[node.id].h], [node.w, node.h]);
  });

  test("top to bottom, an edge runs down from its source to its target", () => {
    const context = page();
    context.folds.expanded.add(itemOf(context.folds, "module:fc"));
    const result = layout(requestFor(context).request);
    for (const [id, from, to] of [["e0", "i0", "i1"], ["e1", "i1", "i2"]]) {
      const points = result.edges[id].points;
      assert.ok(result.nodes[from].y < result.nodes[to].y);
      assert.ok(points[0][1] <= points[points.length - 1][1]);
    }
  });

  test("a node's children keep their next_functions order, left to right, whichever order the edges come in", () => {
    // MulBackward0 (n1) with next_functions [x, y], its edges listed y first; then the other way round.
    for (const [first, second] of [[3, 2], [2, 3]]) {
      const data = pageData({
        nodes: [root("loss"), op("MulBackward0"), leaf(["x"]), leaf(["y"])],
        edges: [[0, 1, 0, 0], [1, first, first - 2, 0], [1, second, second - 2, 0]],
      });
      const graph = new Graph(data);
      const context = { graph, folds: new Folds(graph), options: {}, saved: null, scale: null, words: WORDS, markColors: {} };
      const result = layout(requestFor(context).request);
      assert.ok(result.nodes.i2.x < result.nodes.i3.x, `x at ${result.nodes.i2.x}, y at ${result.nodes.i3.x}`);
    }
  });
});
