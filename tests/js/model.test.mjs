// The viewer's model (gradexport/viewer/src/model.js): decoding the page data, the fold tree (modules, linear
// runs, fans of leaves, parts), what is visible, the edges between visible items, search and the gradient scale.
// Each expectation is worked out by hand from the graph the test builds.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { BUNDLE_AT, Folds, GradScale, Graph, edgeMark, nodeMark, pathMarks, search, visibleEdges } from "../../gradexport/viewer/src/model.js";
import { chainEdges, itemOf, leaf, op, pageData, root } from "./pages.mjs";

/** root → MulBackward0 → AddBackward0 → ExpBackward0 → SumBackward0 → leaf w: a run of four one-in one-out nodes. */
function runOfFour() {
  const nodes = [root(), op("MulBackward0"), op("AddBackward0"), op("ExpBackward0"), op("SumBackward0"), leaf(["w"])];
  return new Graph(pageData({ nodes, edges: chainEdges([0, 1, 2, 3, 4, 5]) }));
}

/** The ids of the folds' visible items, sorted (tree order puts the groups made first). */
const visibleIds = (folds) => folds.visibleItems().map((item) => folds.itemId(item)).sort();

describe("Graph", () => {
  test("decodes interned and plain attributes, ids and adjacency", () => {
    const data = pageData({
      nodes: [root("loss"), op("MulBackward0", { sequence_nr: 7 }), leaf(["a"]), leaf(["b"])],
      edges: [[0, 1, 0, 0], [1, 2, 0, 0], [1, 3, 1, 0]],
      ids: ["r", "m", "a", "b"],
    });
    const graph = new Graph(data);
    assert.equal(graph.n, 4);
    assert.equal(graph.m, 3);
    assert.deepEqual({ ...graph.attributes(1) }, { kind: "backward", op: "MulBackward0", sequence_nr: 7 });
    assert.equal(graph.field(1, "op"), "MulBackward0");
    assert.equal(graph.field(1, "names"), undefined);
    assert.deepEqual(graph.field(3, "names"), ["b"]);
    assert.equal(graph.id(2), "a");
    assert.equal(graph.index.get("m"), 1);
    assert.deepEqual([...graph.outDeg], [1, 2, 0, 0]);
    assert.deepEqual([...graph.inDeg], [0, 1, 1, 1]);
    const targets = (v) => Array.from(graph.outEdges.slice(graph.outStart[v], graph.outStart[v + 1]), (e) => graph.tgt[e]);
    assert.deepEqual(targets(1).sort(), [2, 3]);
    assert.deepEqual(graph.edgeIndices(2), [1, 0]);
  });

  test("an attribute named __proto__ is data", () => {
    const graph = new Graph(pageData({ nodes: [JSON.parse('{"kind": "backward", "op": "X", "__proto__": "p"}')] }));
    assert.equal(graph.attributes(0)["__proto__"], "p");
    assert.equal(Object.getPrototypeOf(graph.attributes(0)), null);
  });

  test("edges with more attributes than their indices keep them", () => {
    const graph = new Graph(pageData({ nodes: [op("A"), op("B")], edges: [[0, 1, 2, 1, { grad: { norm: 3 } }]] }));
    assert.deepEqual(graph.edgeAttributes(0), { next_index: 2, input_nr: 1, grad: { norm: 3 } });
    assert.deepEqual(graph.edgeGrad(0), { norm: 3 });
    assert.deepEqual(graph.edgeIndices(0), [2, 1]);
  });
});

describe("Folds: linear runs", () => {
  test("four one-in one-out nodes in a row fold into one chain", () => {
    const folds = new Folds(runOfFour());
    assert.deepEqual(visibleIds(folds), ["chain:n1..n4", "n0", "n5"]);
    const chain = folds.group(itemOf(folds, "chain:n1..n4"));
    assert.deepEqual(chain.children, [1, 2, 3, 4]);
    assert.deepEqual(chain.label, ["MulBackward0 … SumBackward0", "linear run ×4"]);
    assert.equal(chain.size, 4);
  });

  test("three in a row stay as they are", () => {
    const nodes = [root(), op("MulBackward0"), op("AddBackward0"), op("ExpBackward0"), leaf(["w"])];
    const folds = new Folds(new Graph(pageData({ nodes, edges: chainEdges([0, 1, 2, 3, 4]) })));
    assert.deepEqual(visibleIds(folds), ["n0", "n1", "n2", "n3", "n4"]);
    assert.equal(folds.groups.length, 1); // the top alone
  });

  test("a node with two inputs ends a run", () => {
    // 0 → 1 → 2 → 3 → 4 → 5 and 6 → 3: node 3 has two inputs, so 1, 2 before it and 4, 5 after it are runs of two.
    const nodes = [root(), op("A"), op("B"), op("C"), op("D"), op("E"), root("other")];
    const edges = [...chainEdges([0, 1, 2, 3, 4, 5]), /** @type {[number, number, number, number]} */ ([6, 3, 0, 1])];
    const folds = new Folds(new Graph(pageData({ nodes, edges })));
    assert.equal(folds.groups.length, 1);
  });

  test("a run longer than 24 is cut into pieces of at most ceil(n / 16)", () => {
    const length = 40;
    const nodes = [root(), ...Array.from({ length }, (_, j) => op(`Op${j}`)), leaf(["w"])];
    const path = Array.from({ length: length + 2 }, (_, j) => j);
    const folds = new Folds(new Graph(pageData({ nodes, edges: chainEdges(path) })));
    const chain = folds.group(itemOf(folds, `chain:n1..n${length}`));
    // 40 nodes in pieces of 3: thirteen pieces of three (too short to fold: they stay loose) and one node.
    assert.equal(chain.children.length, length);
    assert.deepEqual(chain.children, path.slice(1, length + 1));
    const sixty = Array.from({ length: 62 }, (_, j) => j);
    const long = new Folds(new Graph(pageData({ nodes: [root(), ...sixty.slice(1, 61).map((j) => op(`Op${j}`)), leaf(["w"])], edges: chainEdges(sixty) })));
    // 60 nodes in pieces of ceil(60 / 16) = 4: fifteen chains of four.
    const pieces = long.group(itemOf(long, "chain:n1..n60")).children;
    assert.equal(pieces.length, 15);
    for (const [j, piece] of pieces.entries()) {
      assert.ok(long.isGroup(piece));
      assert.deepEqual(long.group(piece).children, [1 + 4 * j, 2 + 4 * j, 3 + 4 * j, 4 + 4 * j]);
    }
  });
});

describe("Folds: fans of leaves", () => {
  /** A node with `count` leaf children, under a root. */
  const fan = (count) =>
    new Graph(
      pageData({
        nodes: [root(), op("CatBackward0"), ...Array.from({ length: count }, (_, j) => leaf([`p${j}`]))],
        edges: [[0, 1, 0, 0], ...Array.from({ length: count }, (_, j) => /** @type {[number, number, number, number]} */ ([1, 2 + j, j, 0]))],
      }),
    );

  test("four leaves of one node fold into a fan", () => {
    const folds = new Folds(fan(4));
    assert.deepEqual(visibleIds(folds), ["fan:n1:n2..n5", "n0", "n1"]);
    assert.deepEqual(folds.group(itemOf(folds, "fan:n1:n2..n5")).label, ["4 leaves of n1", "×4"]);
  });

  test("three leaves stay apart", () => {
    assert.deepEqual(visibleIds(new Folds(fan(3))), ["n0", "n1", "n2", "n3", "n4"]);
  });
});

describe("Folds: modules and parts", () => {
  const moduleGraph = () =>
    new Graph(
      pageData({
        nodes: [
          root(),
          op("AddBackward0", { module: "encoder" }),
          op("MmBackward0", { module: "encoder.layer" }),
          op("ReluBackward0", { module: "encoder.layer" }),
          leaf(["encoder.layer.weight"], { module: "encoder.layer" }),
          op("MulBackward0", { module: "head" }),
        ],
        edges: [[0, 1, 0, 0], [1, 2, 0, 0], [1, 5, 1, 0], [2, 3, 0, 0], [3, 4, 0, 0]],
        graph: { module_classes: { encoder: "Encoder", "encoder.layer": "Linear", constructor: 5 } },
      }),
    );

  test("nodes sit in their module's group, nested by path under the model's", () => {
    const folds = new Folds(moduleGraph());
    assert.deepEqual(visibleIds(folds), ["module:", "n0"]);
    const model = itemOf(folds, "module:");
    const encoder = itemOf(folds, "module:encoder");
    const layer = itemOf(folds, "module:encoder.layer");
    const head = itemOf(folds, "module:head");
    assert.deepEqual(folds.group(model).children.sort(), [encoder, head].sort());
    assert.equal(folds.group(layer).parent, encoder);
    assert.deepEqual(folds.group(layer).children, [2, 3, 4]);
    assert.deepEqual(folds.group(encoder).children.sort(), [1, layer]);
    assert.deepEqual(folds.group(encoder).label, ["encoder: Encoder"]);
    assert.deepEqual(folds.group(model).label, ["(model)"]);
    assert.equal(folds.group(head).moduleClass, undefined);
    assert.equal(folds.group(encoder).size, 4);
    assert.equal(folds.group(model).size, 5);
    assert.deepEqual(folds.ancestors(3), [model, encoder, layer]);
  });

  test("without modules, every node sits at the top", () => {
    assert.deepEqual(visibleIds(new Folds(moduleGraph(), false)), ["n0", "n1", "n2", "n3", "n4", "n5"]);
  });

  test("reveal opens every group above an item; representatives follow", () => {
    const folds = new Folds(moduleGraph());
    const model = itemOf(folds, "module:");
    const encoder = itemOf(folds, "module:encoder");
    const layer = itemOf(folds, "module:encoder.layer");
    const head = itemOf(folds, "module:head");
    assert.deepEqual([...folds.representatives()], [0, model, model, model, model, model]);
    folds.reveal(3);
    assert.deepEqual(visibleIds(folds), ["module:head", "n0", "n1", "n2", "n3", "n4"]);
    assert.deepEqual(folds.view().boxes.sort(), [model, encoder, layer].sort());
    assert.equal(folds.view().box.get(3), layer);
    assert.equal(folds.view().box.get(layer), encoder);
    assert.equal(folds.view().box.get(model), -1);
    assert.deepEqual([...folds.representatives()], [0, 1, 2, 3, 4, head]);
  });

  test("openWithin opens level by level while the budget holds", () => {
    const folds = new Folds(moduleGraph());
    // Opening (model) shows n0, encoder, head: 3 items; opening those too shows n0, layer, n1, n5: 4; all: 6.
    folds.openWithin(3);
    assert.deepEqual(visibleIds(folds), ["module:encoder", "module:head", "n0"]);
    folds.openWithin(5);
    assert.deepEqual(visibleIds(folds), ["module:encoder.layer", "n0", "n1", "n5"]);
    folds.openWithin(6);
    assert.deepEqual(visibleIds(folds), ["n0", "n1", "n2", "n3", "n4", "n5"]);
  });

  test("more than 48 items at one level are shown in parts of ceil(n / 16)", () => {
    const count = 60;
    const folds = new Folds(new Graph(pageData({ nodes: Array.from({ length: count }, (_, j) => root(`r${j}`)) })));
    const parts = folds.group(count).children;
    assert.equal(parts.length, 15);
    assert.deepEqual(
      parts.map((part) => folds.group(part).children),
      Array.from({ length: 15 }, (_, j) => [4 * j, 4 * j + 1, 4 * j + 2, 4 * j + 3]),
    );
    assert.deepEqual(folds.group(parts[0]).label, ["r0 … r3", "4 items"]);
  });

  test("sums adds a value over the nodes inside each group", () => {
    const folds = new Folds(moduleGraph());
    const totals = folds.sums((i) => i); // node positions: encoder holds 1+2+3+4, its layer 2+3+4, head 5
    const at = (id) => totals[itemOf(folds, id) - folds.graph.n];
    assert.equal(at("module:encoder"), 10);
    assert.equal(at("module:encoder.layer"), 9);
    assert.equal(at("module:head"), 5);
    assert.equal(at("module:"), 15);
    assert.equal(at(""), 15);
  });
});

describe("marks", () => {
  test("a node's and an edge's mark, strongest first", () => {
    assert.equal(nodeMark("origin", "added"), "nonfinite");
    assert.equal(nodeMark("path", "removed"), "removed");
    assert.equal(nodeMark(undefined, "same"), null);
    assert.equal(edgeMark({ diff: "changed", nonfinite: "origin" }), "changed");
    assert.equal(edgeMark({ diff: "same", nonfinite: "path" }), "path");
    assert.equal(edgeMark({}), null);
  });

  test("a folded group counts the marked nodes inside it", () => {
    const nodes = [root(), op("A", { module: "m", diff: "added" }), op("B", { module: "m", diff: "removed" }), op("C", { module: "m", diff: "added" }), op("D", { diff: "changed" })];
    const folds = new Folds(new Graph(pageData({ nodes, edges: [[0, 1, 0, 0], [1, 2, 0, 0], [2, 3, 0, 0], [0, 4, 1, 0]], graph: { diff: {} } })));
    assert.deepEqual(folds.group(itemOf(folds, "module:m")).marks, { added: 2, removed: 1 });
    assert.deepEqual(folds.group(itemOf(folds, "")).marks, { added: 2, removed: 1, changed: 1 });
  });

  test("marks are counted only on a diff's or a non-finite report's page", () => {
    const nodes = [op("A", { module: "m", diff: "added" })];
    const folds = new Folds(new Graph(pageData({ nodes })));
    assert.equal(folds.group(itemOf(folds, "module:m")).marks, null);
  });
});

describe("visibleEdges", () => {
  test("edges into a folded group merge by ends and indices, and count", () => {
    // Two roots feed the same run: root0 → 2 (slot 0 each), root1 → 2, then 2 → 3 → 4 → 5 → leaf 6.
    const nodes = [root("a"), root("b"), op("A"), op("B"), op("C"), op("D"), leaf(["w"])];
    const graph = new Graph(pageData({ nodes, edges: [[0, 2, 0, 0], [1, 2, 0, 0], ...chainEdges([2, 3, 4, 5, 6])] }));
    const folds = new Folds(graph);
    // 2 has two inputs: the run is 3, 4, 5 — too short. Nothing folds, and every edge stays its own.
    assert.equal(folds.groups.length, 1);
    assert.equal(visibleEdges(graph, folds.representatives()).length, 6);
  });

  test("edges of a folded chain vanish inside it and keep their indices outside", () => {
    const graph = runOfFour();
    const folds = new Folds(graph);
    const chain = itemOf(folds, "chain:n1..n4");
    const edges = visibleEdges(graph, folds.representatives());
    assert.deepEqual(
      edges.map(({ from, to, count }) => [from, to, count]),
      [[0, chain, 1], [chain, 5, 1]],
    );
  });

  test("more than BUNDLE_AT merged edges between the same two items become one with the range of indices", () => {
    // Ten nodes of module "m", each fed from the root at next_index j: ten merged edges from the root to the
    // folded group of the model's modules.
    const count = BUNDLE_AT + 2;
    const nodes = [root(), ...Array.from({ length: count }, (_, j) => op(`Op${j}`, { module: "m" }))];
    const edges = Array.from({ length: count }, (_, j) => /** @type {[number, number, number, number]} */ ([0, 1 + j, j, 0]));
    const graph = new Graph(pageData({ nodes, edges }));
    const folds = new Folds(graph);
    const [bundle] = visibleEdges(graph, folds.representatives());
    assert.equal(bundle.from, 0);
    assert.equal(bundle.to, itemOf(folds, "module:"));
    assert.equal(bundle.count, count);
    assert.equal(bundle.bundled, count);
    assert.equal(bundle.next, `0…${count - 1}`);
    assert.equal(bundle.input, 0);
    const few = new Graph(pageData({ nodes: nodes.slice(0, BUNDLE_AT + 1), edges: edges.slice(0, BUNDLE_AT) }));
    assert.equal(visibleEdges(few, new Folds(few).representatives()).length, BUNDLE_AT);
  });
});

describe("pathMarks", () => {
  test("marks the target and every node above it", () => {
    // 0 → 1 → 3, 0 → 2, 4 → 3: above 3 are 1, 0 and 4; 2 is beside it.
    const graph = new Graph(pageData({ nodes: [root(), op("A"), op("B"), op("C"), root("b")], edges: [[0, 1, 0, 0], [1, 3, 0, 0], [0, 2, 1, 0], [4, 3, 0, 1]] }));
    assert.deepEqual([...pathMarks(graph, 3)], [1, 1, 0, 1, 1]);
  });
});

describe("search", () => {
  const graph = new Graph(
    pageData({
      nodes: [
        root("loss"),
        op("MulBackward0", { module: "encoder.attention", source: "model.py:12", source_code: "q * k" }),
        op("AddBackward0", { torch_name: "aten::add" }),
        leaf(["encoder.attention.weight", "bias"]),
      ],
      edges: [[0, 1, 0, 0], [1, 2, 0, 0], [2, 3, 0, 0]],
      graph: { module_classes: { encoder: "Encoder", "encoder.attention": "SelfAttention" } },
    }),
  );
  const folds = new Folds(graph);

  test("finds ops case-insensitively", () => assert.deepEqual(search(graph, folds, "mulback"), ["n1"]));
  test("finds modules by path and class, then the nodes inside", () => {
    assert.deepEqual(search(graph, folds, "attention"), ["module:encoder.attention", "n1", "n3"]);
    assert.deepEqual(search(graph, folds, "selfatt"), ["module:encoder.attention"]);
  });
  test("finds parameter names, torch names, roots and source lines", () => {
    assert.deepEqual(search(graph, folds, "BIAS"), ["n3"]);
    assert.deepEqual(search(graph, folds, "aten::"), ["n2"]);
    assert.deepEqual(search(graph, folds, "loss"), ["n0"]);
    assert.deepEqual(search(graph, folds, "model.py:12"), ["n1"]);
    assert.deepEqual(search(graph, folds, "q * k"), ["n1"]);
  });
  test("empty text and no match find nothing", () => {
    assert.deepEqual(search(graph, folds, ""), []);
    assert.deepEqual(search(graph, folds, "conv"), []);
  });
});

describe("GradScale", () => {
  const colors = ["#c0", "#c1", "#c2", "#c3"];
  const bounds = [1e-3, 1e-1, 10];
  const graphWith = (grads) =>
    new Graph(
      pageData({
        nodes: [root(), ...grads.map((_, j) => op(`Op${j}`))],
        edges: grads.map((grad, j) => /** @type {[number, number, number, number, Record<string, unknown>]} */ ([0, 1 + j, j, 0, { grad }])),
      }),
    );

  test("a norm's step is how many bounds it reaches", () => {
    const scale = new GradScale(graphWith([{ norm: 1 }]), colors, "#bad", bounds, [], null);
    assert.equal(scale.any, true);
    assert.equal(scale.step({ norm: 0 }), 0);
    assert.equal(scale.step({ norm: 1e-3 }), 1);
    assert.equal(scale.step({ norm: 0.5 }), 2);
    assert.equal(scale.step({ norm: 10 }), 3);
    assert.equal(scale.step({ norm: 1e9 }), 3);
  });

  test("NaN, infinity and a flagged tensor are step -1", () => {
    const scale = new GradScale(graphWith([]), colors, "#bad", bounds, [], null);
    assert.equal(scale.any, false);
    assert.equal(scale.step({ norm: NaN }), -1);
    assert.equal(scale.step({ norm: Infinity }), -1);
    assert.equal(scale.step({ norm: "NaN" }), -1);
    assert.equal(scale.step({ norm: 1, has_nan: true }), -1);
  });

  test("the widths run from 1.5 to 3.5 px over the steps", () => {
    const scale = new GradScale(graphWith([]), colors, "#bad", bounds, [], null);
    assert.deepEqual([0, 1, 2, 3].map((step) => scale.width(step)), [1.5, 1.5 + 2 / 3, 1.5 + 4 / 3, 3.5]);
  });

  test("a visible edge takes its largest gradient's step, and red for any non-finite one", () => {
    const graph = graphWith([{ norm: 0.5 }, { norm: 20 }, { norm: "Infinity" }, { shape: [2] }]);
    const scale = new GradScale(graph, colors, "#bad", bounds, [], null);
    assert.deepEqual(scale.style(graph, { edges: [0, 1] }), { color: "var(--gx-grad-3)", width: 3.5, bad: false });
    assert.deepEqual(scale.style(graph, { edges: [0] }), { color: "var(--gx-grad-2)", width: 1.5 + 4 / 3, bad: false });
    assert.deepEqual(scale.style(graph, { edges: [0, 2] }), { color: "#bad", width: 2.5, bad: true });
    assert.equal(scale.style(graph, { edges: [3] }), null);
  });

  test("the CSS defines every step for the light and the dark theme", () => {
    const scale = new GradScale(graphWith([]), ["#a", "#b"], "#bad", [1], [], ["#c", "#d"]);
    assert.equal(scale.cssRules(), '.gx { --gx-grad-0: #a; --gx-grad-1: #b; } .gx[data-theme="dark"] { --gx-grad-0: #c; --gx-grad-1: #d; }');
  });
});
