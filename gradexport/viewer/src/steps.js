// A replay's steps as the viewer holds them (no DOM here): decoded from the page's "steps" block
// (gradexport/backward/steps.py), with, per node, when it runs and when its inputs arrive, so that the state
// of every node at step k is O(1), and the step as data for the panel and the script API.
// Writes: no viewer field.
// Changes: its own Steps (pure: no DOM).

/**
 * A tensor as data: torch's own printing of its values, or its statistics (a large tensor); all null for None.
 * @typedef {{shape: number[] | null, dtype: string | null, values?: string | null,
 *   stats?: {norm: number, min: number, max: number, mean: number, nonfinite: number}}} TensorRecord
 *
 * A step as data (Steps.step): the node called, its inputs per slot (with the edges that brought them) and its
 * outputs per next_functions position (with the edge that takes each on), and a leaf's .grad after it.
 * @typedef {object} StepRecord
 * @property {number} index
 * @property {string} node the node's id
 * @property {string} op
 * @property {(TensorRecord & {slot: number, edges: (TensorRecord & {edge: number, from: string, position: number | string})[]})[]} inputs
 * @property {(TensorRecord & {position: number, to: string | null, input_nr: number | string | null, edge: number | null})[]} outputs
 * @property {string} [module]
 * @property {TensorRecord} [grad]
 * @property {StepMath} [math] the formula the node computed, where the page holds one
 * @property {string[]} [variables] the page's own names for the node
 *
 * What a node's call computes (gradexport/backward/vjp.py): the forward operation, its local derivative and, per
 * next_functions position, the vector–Jacobian product with the values it uses and its value; or only a note.
 * @typedef {{forward: string, local: string, note: string, products: {position: number, text: string,
 *   terms: (TensorRecord & {symbol: string})[], value: TensorRecord}[]}} StepMath
 */

/**
 * A tensor of the table as data: {shape, dtype, values} (torch's own printing) or {shape, dtype, stats}.
 * @param {StepData} steps
 * @param {number | null | undefined} index
 * @returns {TensorRecord}
 */
function tensorRecord(steps, index) {
  if (index === null || index === undefined) return { shape: null, dtype: null, values: null };
  const row = steps.tensors[index];
  const [shape, dtype] = steps.metas[row[0]];
  if (row.length === 2) return { shape, dtype, values: row[1] };
  const [norm, min, max, mean, nonfinite] = row.slice(1);
  return { shape, dtype, stats: { norm, min, max, mean, nonfinite } };
}

const AGAINST = 2 ** 64 - 1;

/**
 * The "steps" block of a replay page (gradexport/backward/steps.py); nodes by id ("n<k>", or k).
 * @typedef {object} StepData
 * @property {[number[], string][]} metas [shape, dtype] pairs
 * @property {Array<[number, string] | [number, number, number, number, number, number]>} tensors [meta, torch's printing] or [meta, norm, min, max, mean, non-finite count]
 * @property {[string | number, number, number][]} starts [node, slot, tensor] per root gradient
 * @property {[string | number, number][]} [before] [leaf node, tensor] per .grad set before the replay
 * @property {Array<[string | number, (number | null)[], (number | null)[], number?]>} steps [node, input tensors per slot, output tensors per position, the leaf's .grad after]
 * @property {Array<[number, number, [number, number, [number, number][], number][], number] | null>} [math] per step: [forward,
 *   local derivative, products ([position, formula, [symbol, tensor] per term, its value]), note], the words as indices into texts
 * @property {string[]} [texts] the words of math, each once
 */

export class Steps {
  /**
   * @param {import("./model.js").Graph} graph
   * @param {StepData} data
   */
  constructor(graph, data) {
    this.graph = graph;
    this.data = data;
    const n = graph.n;
    // Every node a step names is in the graph.
    const nodeIndex = (/** @type {string | number} */ id) => /** @type {number} */ (graph.index.get(typeof id === "number" ? "n" + id : id));
    this.count = data.steps.length;
    this.nodes = new Int32Array(this.count);
    /** The step each node runs at (-1: never), the first and the last step that delivered to it (-1: a root's start). */
    this.runAt = new Int32Array(n).fill(-1);
    this.firstIn = new Int32Array(n).fill(2 ** 31 - 1);
    this.lastIn = new Int32Array(n).fill(-2);
    data.steps.forEach((row, k) => {
      const v = nodeIndex(row[0]);
      this.nodes[k] = v;
      this.runAt[v] = k;
    });
    /** Leaves whose .grad was set before the replay: node → tensor index. */
    this.before = new Map((data.before || []).map(([id, tensor]) => [nodeIndex(id), tensor]));
    this.starts = new Map();
    for (const [id, slot, tensor] of data.starts) {
      const v = nodeIndex(id);
      this.starts.set(`${v}|${slot}`, tensor);
      this.firstIn[v] = Math.min(this.firstIn[v], -1);
      this.lastIn[v] = Math.max(this.lastIn[v], -1);
    }
    for (let e = 0; e < graph.m; e++) {
      const u = graph.src[e];
      const v = graph.tgt[e];
      const k = this.runAt[u];
      if (k < 0) continue;
      if (k < this.firstIn[v]) this.firstIn[v] = k;
      if (k > this.lastIn[v]) this.lastIn[v] = k;
    }
  }

  /**
   * "done" | "waiting" | "pending" of node v at step k: run (k included), some input arrived, nothing yet.
   * @param {number} v
   * @param {number} k
   * @returns {"done" | "waiting" | "pending"}
   */
  state(v, k) {
    if (this.runAt[v] >= 0 && this.runAt[v] <= k) return "done";
    if (this.runAt[v] < 0 && this.graph.field(v, "kind") === "root") return "done";
    if (this.firstIn[v] <= k) return "waiting";
    return "pending";
  }

  /**
   * Whether every input of node v has arrived by step k (it sits in the engine's ready queue).
   * @param {number} v
   * @param {number} k
   */
  ready(v, k) {
    return this.lastIn[v] <= k && this.lastIn[v] > -2;
  }

  /**
   * The tensor (table index or null) that graph edge e carries: its source step's output, or a root's start.
   * @param {number} e
   * @returns {number | null}
   */
  edgeTensor(e) {
    const graph = this.graph;
    const u = graph.src[e];
    const [position, slot] = graph.edgeIndices(e);
    const k = this.runAt[u];
    if (k >= 0) return (typeof position === "number" ? this.data.steps[k][2][position] : undefined) ?? null;
    return this.starts.get(`${graph.tgt[e]}|${slot}`) ?? null;
  }

  /**
   * @param {number | null | undefined} index
   */
  tensor(index) {
    return tensorRecord(this.data, index);
  }

  /**
   * Step k as data: {index, node, op, inputs: [{slot, edges, ...tensor}], outputs: [{position, to, input_nr, ...tensor}], grad?}.
   * @param {number} k
   * @returns {StepRecord}
   */
  step(k) {
    const graph = this.graph;
    const row = this.data.steps[k];
    const v = this.nodes[k];
    /** @type {Map<number | string, StepRecord["inputs"][number]["edges"]>} */
    const feeding = new Map();
    for (let j = graph.inStart[v]; j < graph.inStart[v + 1]; j++) {
      const e = graph.inEdges[j];
      const [position, slot] = graph.edgeIndices(e);
      const arrivals = feeding.get(slot) ?? [];
      feeding.set(slot, arrivals);
      arrivals.push({ edge: e, from: graph.id(graph.src[e]), position, ...this.tensor(this.edgeTensor(e)) });
    }
    const inputs = row[1].map((tensor, slot) => ({ slot, edges: feeding.get(slot) || [], ...this.tensor(tensor) }));
    const targets = new Map();
    for (let j = graph.outStart[v]; j < graph.outStart[v + 1]; j++) {
      const e = graph.outEdges[j];
      const [position, slot] = graph.edgeIndices(e);
      if (graph.field(graph.tgt[e], "kind") !== "none") targets.set(position, { edge: e, to: graph.id(graph.tgt[e]), input_nr: slot });
    }
    const outputs = row[2].map((tensor, position) => {
      const target = targets.get(position);
      return { position, to: target ? target.to : null, input_nr: target ? target.input_nr : null, edge: target ? target.edge : null, ...this.tensor(tensor) };
    });
    /** @type {StepRecord} */
    const record = { index: k, node: graph.id(v), op: String(graph.field(v, "op") ?? graph.field(v, "kind")), inputs, outputs };
    const module = graph.field(v, "module");
    if (typeof module === "string") record.module = module;
    if (row.length > 3) record.grad = this.tensor(row[3]);
    const variables = graph.field(v, "variables");
    if (Array.isArray(variables) && variables.length) record.variables = variables.map(String);
    const math = this.data.math && this.data.math[k];
    const texts = this.data.texts || [];
    if (math) {
      const [forward, local, products, note] = math;
      record.math = {
        forward: texts[forward],
        local: texts[local],
        note: texts[note],
        products: products.map(([position, text, terms, value]) => ({
          position,
          text: texts[text],
          terms: terms.map(([symbol, tensor]) => ({ symbol: texts[symbol], ...this.tensor(tensor) })),
          value: this.tensor(value),
        })),
      };
    }
    return record;
  }

  /**
   * What the page calls node `id` ("back_mul", from its own code), else its id.
   * @param {string} id
   * @returns {string}
   */
  label(id) {
    const v = this.graph.index.get(id);
    const variables = v === undefined ? undefined : this.graph.field(v, "variables");
    return Array.isArray(variables) && variables.length ? variables.map(String).join(", ") : id;
  }

  /**
   * The .grad of leaf v at step k: after its AccumulateGrad step, what the replay left there; before, what it held.
   * @param {number} v
   * @param {number} k
   * @returns {TensorRecord | null}
   */
  leafGrad(v, k) {
    const at = this.runAt[v];
    if (at < 0 || at > k) return this.before.has(v) ? this.tensor(this.before.get(v)) : null;
    const row = this.data.steps[at];
    return row.length > 3 ? this.tensor(row[3]) : null;
  }

  /**
   * Why the engine runs step k's node now: its inputs are all there; among the ready nodes, the rule that picks it.
   * @param {number} k
   * @returns {string}
   */
  reason(k) {
    const graph = this.graph;
    const v = this.nodes[k];
    const others = [];
    for (let u = 0; u < graph.n; u++) {
      if (u !== v && this.runAt[u] > k && this.lastIn[u] < k && this.lastIn[u] > -2) others.push(u);
    }
    const arrived = this.lastIn[v] === -1 ? "It gets a root's starting gradient." : `All its inputs have arrived (the last at step ${this.lastIn[v] + 1}).`;
    if (!others.length) return `${arrived} It is the only node ready.`;
    const listed = others.slice(0, 4).map((u) => `${this.label(graph.id(u))} ${graph.field(u, "op")}`).join(", ") + (others.length > 4 ? ", …" : "");
    const ready = `${others.length} other node${others.length > 1 ? "s are" : " is"} ready too (${listed})`;
    const seq = (/** @type {number} */ u) => {
      const s = Number(graph.field(u, "sequence_nr"));
      return s < 0 ? AGAINST : s;
    };
    if (graph.field(v, "kind") === "leaf") {
      return `${arrived} ${ready}; a leaf's AccumulateGrad has sequence_nr 2**64 - 1, the highest, so it runs before any other ready node (leaves ready together leave in the order of the engine's heap).`;
    }
    const best = Math.max(...others.map(seq));
    if (best === seq(v)) return `${arrived} ${ready}; its sequence_nr (${seq(v)}) ties with another's, and the engine's heap has it on top.`;
    return `${arrived} ${ready}; the engine's ready queue takes the node created last in the forward pass, the highest sequence_nr: ${seq(v)} > ${best}.`;
  }
}
