// What drawn things look like (gradexport/viewer/src/looks.js): the outline a group takes for the marks inside
// it, a folded group's lines, an edge's label, a box's title and the node shapes' outlines.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { boxTitle, edgeLines, groupMark, itemLook, shapePath } from "../../gradexport/viewer/src/looks.js";
import { Folds, Graph, visibleEdges } from "../../gradexport/viewer/src/model.js";
import { normText } from "../../gradexport/viewer/src/text.js";
import { chainEdges, itemOf, op, pageData, root } from "./pages.mjs";

const WORDS = { added: "+ added", removed: "− removed", changed: "~ changed", nonfinite: "non-finite gradient starts here" };

/** A group whose marked nodes are counted as `marks`. */
const groupWith = (marks) => /** @type {import("../../gradexport/viewer/src/model.js").Group} */ ({ id: "g", kind: "module", parent: -1, label: ["g"], children: [], size: 0, marks });

describe("groupMark", () => {
  test("a non-finite origin inside outweighs any diff", () => assert.equal(groupMark(groupWith({ nonfinite: 1, added: 3 })), "nonfinite"));
  test("one kind of diff mark inside is the group's", () => assert.equal(groupMark(groupWith({ removed: 2 })), "removed"));
  test("added and removed nodes inside make a changed group", () => assert.equal(groupMark(groupWith({ added: 1, removed: 1 })), "changed"));
  test("no marks, no outline", () => assert.equal(groupMark(groupWith(null)), null));
});

/** A diff's page: root → a run of four marked nodes (folded into a chain) → E. */
function diffPage() {
  const nodes = [root(), op("A", { diff: "added" }), op("B", { diff: "added" }), op("C", { diff: "removed" }), op("D", { nonfinite: "origin" }), op("E")];
  const graph = new Graph(pageData({ nodes, edges: chainEdges([0, 1, 2, 3, 4, 5]), graph: { diff: {}, nonfinite: [] } }));
  const folds = new Folds(graph);
  return { graph, folds, options: {}, saved: null, scale: null, words: WORDS, markColors: { added: "#0a0", removed: "#a00", changed: "#f80", origin: "#b00", path: "#b00" } };
}

describe("itemLook", () => {
  test("a folded run says what is inside it, and takes the strongest outline", () => {
    const context = diffPage();
    const chain = itemOf(context.folds, "chain:n1..n4");
    const look = itemLook(context, chain);
    assert.equal(look.cls, "fold");
    assert.equal(look.mark, "nonfinite");
    assert.deepEqual(look.lines, ["A … D", "linear run ×4", "non-finite gradient starts inside · +2 added · −1 removed"]);
  });

  test("a node takes its mark's class and outline", () => {
    const context = diffPage();
    assert.deepEqual(itemLook(context, 3), { cls: "removed", lines: ["− removed", "C"], mark: "removed", bytes: undefined });
    assert.deepEqual(itemLook(context, 5), { cls: "backward", lines: ["E"], mark: null, bytes: undefined });
  });
});

describe("edgeLines and boxTitle", () => {
  test("an edge into a folded group counts the edges it stands for and signs their diff", () => {
    // The root feeds A and B of module "m", both at next_index 0, one edge added and one removed: folded, the
    // two merge into one edge to the model's group.
    const nodes = [root("a"), op("A", { module: "m" }), op("B", { module: "m" })];
    const graph = new Graph(pageData({ nodes, edges: [[0, 1, 0, 0, { diff: "added" }], [0, 2, 0, 0, { diff: "removed" }]], graph: { diff: {} } }));
    const folds = new Folds(graph);
    const context = { graph, folds, options: {}, saved: null, scale: null, words: WORDS, markColors: { removed: "#a00" } };
    const [edge] = visibleEdges(graph, folds.representatives());
    assert.deepEqual(edgeLines(context, edge), ["0→0 ×2 ±"]);
    assert.deepEqual(edge.mark, { mark: "removed", color: "#a00", sign: "±" });
  });

  test("an opened chain's box is titled by its two label lines, a module's by its name", () => {
    const context = diffPage();
    const chain = itemOf(context.folds, "chain:n1..n4");
    assert.equal(boxTitle(context.folds, chain), "A … D · linear run ×4 ▾");
  });
});

describe("shapePath", () => {
  test("a box is the rectangle, a hexagon cuts its corners by at most 10 px", () => {
    assert.equal(shapePath("box", 0, 0, 40, 20), "M0,0 H40 V20 H0 Z");
    assert.equal(shapePath("hexagon", 0, 0, 100, 20), "M10,0 H90 L100,10 L90,20 H10 L0,10 Z");
    assert.equal(shapePath("hexagon", 0, 0, 20, 20), "M5,0 H15 L20,10 L15,20 H5 L0,10 Z");
  });

  test("a stadium's ends are half circles of half its height", () => {
    assert.match(shapePath("stadium", 0, 0, 60, 20), /^M10,0 H50 A10,10 0 0 1 60,10 /);
  });
});

describe("normText", () => {
  test("trailing zeros of the mantissa go", () => assert.deepEqual([0.5, 0.0292, 1e-5, 2.5e-7].map(normText), ["0.5", "0.0292", "0.00001", "2.5e-7"]));
  test("an exponent or a whole number keeps its zeros", () => assert.deepEqual([3.65e-10, 1e-20, 100, 120, 1e30].map(normText), ["3.65e-10", "1e-20", "100", "120", "1e+30"]));
});
