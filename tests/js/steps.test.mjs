// A replay's steps as the viewer holds them (gradexport/viewer/src/steps.js): which node runs at step k, the
// state of every node then, the tensors on each edge, a leaf's .grad over the steps and why the engine runs a
// node when it does. The replays are written by hand in the layout of gradexport/backward/steps.py.
import assert from "node:assert/strict";
import { describe, test } from "node:test";

import { Graph } from "../../gradexport/viewer/src/model.js";
import { Steps } from "../../gradexport/viewer/src/steps.js";
import { leaf, op, pageData, root } from "./pages.mjs";

/**
 * loss = ((a * b) + b).sum(): loss → Sum → Add → Mul → a, Mul → b, Add → b. The engine runs Sum, Add, Mul,
 * then the two leaves; b waits for Add and Mul. b held a .grad before the replay.
 */
function sumOfProduct() {
  const graph = new Graph(
    pageData({
      nodes: [root("loss"), op("SumBackward0", { sequence_nr: 4 }), op("AddBackward0", { sequence_nr: 3 }), op("MulBackward0", { sequence_nr: 2 }), leaf(["a"]), leaf(["b"])],
      edges: [[0, 1, 0, 0], [1, 2, 0, 0], [2, 3, 0, 0], [2, 5, 1, 0], [3, 4, 0, 0], [3, 5, 1, 0]],
    }),
  );
  /** @type {import("../../gradexport/viewer/src/steps.js").StepData} */
  const data = {
    metas: [[[], "float32"], [[2], "float32"]],
    tensors: [[0, "tensor(1.)"], [1, "tensor([1., 1.])"], [1, 2.0, -1.0, 3.0, 0.5, 0]],
    starts: [["n1", 0, 0]],
    before: [["n5", 2]],
    steps: [
      ["n1", [0], [1]],
      ["n2", [1], [1, 1]],
      ["n3", [1], [1, 1]],
      ["n4", [1], [], 2],
      ["n5", [1], [], 1],
    ],
  };
  return new Steps(graph, data);
}

const VALUES = { shape: [2], dtype: "float32", values: "tensor([1., 1.])" };
const STATS = { shape: [2], dtype: "float32", stats: { norm: 2, min: -1, max: 3, mean: 0.5, nonfinite: 0 } };

describe("Steps", () => {
  test("each step's node, and when each node runs", () => {
    const steps = sumOfProduct();
    assert.equal(steps.count, 5);
    assert.deepEqual([...steps.nodes], [1, 2, 3, 4, 5]);
    assert.deepEqual([...steps.runAt], [-1, 0, 1, 2, 3, 4]);
  });

  test("a node is done from its step on, waiting once an input arrived, pending before", () => {
    const steps = sumOfProduct();
    const states = (k) => Array.from({ length: 6 }, (_, v) => steps.state(v, k));
    // The root is done from the start; at step 0 Sum runs and hands its output to Add.
    assert.deepEqual(states(0), ["done", "done", "waiting", "pending", "pending", "pending"]);
    // Add gives to Mul and to b.
    assert.deepEqual(states(1), ["done", "done", "done", "waiting", "pending", "waiting"]);
    assert.deepEqual(states(2), ["done", "done", "done", "done", "waiting", "waiting"]);
    assert.deepEqual(states(4), ["done", "done", "done", "done", "done", "done"]);
  });

  test("a node is ready once its last input has arrived", () => {
    const steps = sumOfProduct();
    assert.equal(steps.ready(1, 0), true); // the root's start
    assert.equal(steps.ready(5, 1), false); // b has Add's gradient, not yet Mul's
    assert.equal(steps.ready(5, 2), true);
    assert.equal(steps.ready(0, 4), false); // nothing flows into the root
  });

  test("an edge carries its source step's output, or a root's start", () => {
    const steps = sumOfProduct();
    assert.equal(steps.edgeTensor(0), 0);
    assert.equal(steps.edgeTensor(1), 1);
    assert.deepEqual(steps.tensor(0), { shape: [], dtype: "float32", values: "tensor(1.)" });
    assert.deepEqual(steps.tensor(2), STATS);
    assert.deepEqual(steps.tensor(null), { shape: null, dtype: null, values: null });
  });

  test("a step as data: its inputs per slot with the edges into it, its outputs per position", () => {
    const steps = sumOfProduct();
    assert.deepEqual(steps.step(1), {
      index: 1,
      node: "n2",
      op: "AddBackward0",
      inputs: [{ slot: 0, edges: [{ edge: 1, from: "n1", position: 0, ...VALUES }], ...VALUES }],
      outputs: [
        { position: 0, to: "n3", input_nr: 0, edge: 2, ...VALUES },
        { position: 1, to: "n5", input_nr: 0, edge: 3, ...VALUES },
      ],
    });
    const bStep = steps.step(4);
    assert.deepEqual(bStep.inputs[0].edges.map((arrival) => arrival.from), ["n2", "n3"]);
    assert.deepEqual(bStep.grad, VALUES);
    assert.equal(steps.step(0).inputs[0].edges[0].values, "tensor(1.)");
  });

  test("a leaf's .grad: what it held before its step, what the step left after", () => {
    const steps = sumOfProduct();
    assert.deepEqual(steps.leafGrad(5, 3), STATS);
    assert.deepEqual(steps.leafGrad(5, 4), VALUES);
    assert.equal(steps.leafGrad(4, 2), null);
    assert.deepEqual(steps.leafGrad(4, 3), STATS);
  });

  test("why a node runs when it is the only one ready", () => {
    const steps = sumOfProduct();
    assert.equal(steps.reason(0), "It gets a root's starting gradient. It is the only node ready.");
    assert.equal(steps.reason(2), "All its inputs have arrived (the last at step 2). It is the only node ready.");
  });
});

describe("Steps.reason among several ready nodes", () => {
  /** loss → Cat → A (sequence_nr 5) and B (7), B → leaf w; A and B are ready together after Cat. */
  /** @param {string[]} order the nodes in the order the engine ran them */
  function twoReady(order) {
    const graph = new Graph(
      pageData({
        nodes: [root(), op("CatBackward0", { sequence_nr: 9 }), op("ABackward0", { sequence_nr: 5 }), op("BBackward0", { sequence_nr: 7 }), leaf(["w"])],
        edges: [[0, 1, 0, 0], [1, 2, 0, 0], [1, 3, 1, 0], [3, 4, 0, 0]],
      }),
    );
    /** @type {import("../../gradexport/viewer/src/steps.js").StepData} */
    const data = { metas: [[[], "float32"]], tensors: [[0, "tensor(1.)"]], starts: [["n1", 0, 0]], steps: order.map((id) => [id, [0], [0]]) };
    return new Steps(graph, data);
  }

  test("the engine takes the highest sequence_nr", () => {
    const steps = twoReady(["n1", "n3", "n2", "n4"]);
    assert.equal(
      steps.reason(1),
      "All its inputs have arrived (the last at step 1). 1 other node is ready too (n2 ABackward0); " +
        "the engine's ready queue takes the node created last in the forward pass, the highest sequence_nr: 7 > 5.",
    );
  });

  test("a leaf goes first: its sequence_nr is the highest there is", () => {
    // After B, both A and the leaf w are ready; w runs first.
    const steps = twoReady(["n1", "n3", "n4", "n2"]);
    assert.match(steps.reason(2), /^All its inputs have arrived \(the last at step 2\)\. 1 other node is ready too \(n2 ABackward0\); a leaf's AccumulateGrad has sequence_nr 2\*\*64 - 1/);
  });
});

describe("Steps: what the page's code calls a node, and the formula of a step", () => {
  /** loss → MulBackward0 (named back_mul by the page) → leaves x and y; the Mul step carries its formula. */
  function named() {
    const graph = new Graph(
      pageData({
        nodes: [root("loss"), op("MulBackward0", { sequence_nr: 0, variables: ["back_mul"] }), leaf(["x"]), leaf(["y"])],
        edges: [[0, 1, 0, 0], [1, 2, 0, 0], [1, 3, 1, 0]],
      }),
    );
    /** @type {import("../../gradexport/viewer/src/steps.js").StepData} */
    const data = {
      metas: [[[], "float32"], [[2], "float32"]],
      tensors: [[0, "tensor(1.)"], [1, "tensor([3., 4.])"], [1, "tensor([1., 2.])"]],
      starts: [["n1", 0, 0]],
      steps: [["n1", [0], [1, 2]], ["n2", [1], [], 1], ["n3", [2], [], 2]],
      texts: ["z = x · y", "∂z/∂x = y,  ∂z/∂y = x", "dx = dz · y", "dz", "y", "dy = dz · x", "x", ""],
      math: [[0, 1, [[0, 2, [[3, 0], [4, 1]], 1], [1, 5, [[3, 0], [6, 2]], 2]], 7], null, null],
    };
    return new Steps(graph, data);
  }

  test("a node the page named goes by that name, any other by its id", () => {
    const steps = named();
    assert.equal(steps.label("n1"), "back_mul");
    assert.equal(steps.label("n2"), "n2");
    assert.deepEqual(steps.step(0).variables, ["back_mul"]);
    assert.equal(steps.step(1).variables, undefined);
  });

  test("a step's formula: its words from the text table, each term and the product's value as tensors", () => {
    const { math } = named().step(0);
    const scalar = { shape: [], dtype: "float32", values: "tensor(1.)" };
    assert.deepEqual(math, {
      forward: "z = x · y",
      local: "∂z/∂x = y,  ∂z/∂y = x",
      note: "",
      products: [
        {
          position: 0,
          text: "dx = dz · y",
          terms: [{ symbol: "dz", ...scalar }, { symbol: "y", shape: [2], dtype: "float32", values: "tensor([3., 4.])" }],
          value: { shape: [2], dtype: "float32", values: "tensor([3., 4.])" },
        },
        {
          position: 1,
          text: "dy = dz · x",
          terms: [{ symbol: "dz", ...scalar }, { symbol: "x", shape: [2], dtype: "float32", values: "tensor([1., 2.])" }],
          value: { shape: [2], dtype: "float32", values: "tensor([1., 2.])" },
        },
      ],
    });
    assert.equal(named().step(1).math, undefined);
  });
});
