// Inside a compiled region (gradexport/viewer/src/regions.js): a region node's compiled_graph becomes op nodes,
// folded by model.js into one group per region that stays closed until opened.
// Each expectation is worked out by hand from the region the test builds.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Folds, Graph } from "../../gradexport/viewer/src/model.js";
import { REGION_OP, openRegions } from "../../gradexport/viewer/src/regions.js";
import { nodeLines } from "../../gradexport/viewer/src/text.js";
import { leaf, op, pageData, root } from "./pages.mjs";

/** root → CompiledFunctionBackward → leaf w, its region: tangents_1 → expand → mm (→ next_functions[0]), mm also reads primals_1. */
function compiledPage() {
  const compiledGraph = {
    ops: [
      { id: "expand", op: "aten.expand.default", inputs: ["tangents_1"], seq_nr: 3, forward_op: "sum", source: "src/model.py:9", source_code: "return h.sum()" },
      { id: "mm", op: "aten.mm.default", inputs: ["expand", "primals_1"], seq_nr: 2, forward_op: "Linear", source: "src/model.py:8" },
    ],
    inputs: [{ id: "primals_1", role: "saved" }, { id: "tangents_1", role: "gradient" }],
    outputs: [{ id: "mm", next_index: 0 }],
    metadata_kept: true,
  };
  const nodes = [root(), op("CompiledFunctionBackward", { special: "compiled", compiled_graph: compiledGraph }), leaf(["w"])];
  return pageData({ nodes, edges: [[0, 1, 0, 0], [1, 2, 0, 0]] });
}

describe("openRegions", () => {
  test("leaves data without regions as it is", () => {
    const data = pageData({ nodes: [root(), op("SumBackward0")], edges: [[0, 1, 0, 0]] });
    assert.equal(openRegions(data), data);
  });

  test("adds one node per op and edges along the values they read", () => {
    const data = compiledPage();
    const graph = new Graph(openRegions(data));
    assert.equal(graph.n, 5);
    assert.deepEqual([graph.id(3), graph.id(4)], ["n1/expand", "n1/mm"]);
    assert.deepEqual({ ...graph.attributes(4) }, {
      kind: REGION_OP, op: "aten.mm.default", region: "n1", value: "mm", forward_op: "Linear", seq_nr: 2, source: "src/model.py:8",
      inputs: ["expand", "primals_1"], returns: 0,
    });
    // The graph's own edges, then the region node to expand (which reads no op), then expand to mm.
    assert.deepEqual([...graph.src], [0, 1, 1, 3]);
    assert.deepEqual([...graph.tgt], [1, 2, 3, 4]);
    assert.equal(graph.edgeAttributes(2).carries, "tangents_1");
    assert.equal(graph.edgeAttributes(3).carries, "expand");
    assert.equal(data.nodes.length, 3, "the given data is left as it was");
  });

  test("an op's lines name its forward op, its file's line and where its result leaves", () => {
    const graph = new Graph(openRegions(compiledPage()));
    assert.deepEqual(nodeLines(graph.attributes(4), {}, {}, new Map()), ["aten.mm.default", "Linear model.py:8", "→ next_functions[0]"]);
  });
});

describe("Folds of a compiled region", () => {
  test("the ops sit in one region group, closed after openWithin, opened on request", () => {
    const folds = new Folds(new Graph(openRegions(compiledPage())));
    const region = /** @type {number} */ (folds.item("region:n1"));
    assert.equal(folds.group(region).kind, "region");
    assert.deepEqual(folds.group(region).children, [3, 4]);
    folds.openWithin(100);
    assert.ok(!folds.expanded.has(region));
    assert.deepEqual(folds.visibleItems().map((item) => folds.itemId(item)).sort(), ["n0", "n1", "n2", "region:n1"]);
    folds.expanded.add(region);
    assert.deepEqual(folds.visibleItems().map((item) => folds.itemId(item)).sort(), ["n0", "n1", "n1/expand", "n1/mm", "n2"]);
  });
});
