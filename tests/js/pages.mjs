// Page data for the viewer's unit tests, in the layout gradexport/formats/html.py writes (_encode): nodes as
// [schema, values...] with the strings of INTERNED keys stored once, edges as five numbers each.

/** The keys whose string values the writer stores in the string table. */
const INTERNED = new Set(["kind", "op", "module", "torch_name"]);

/**
 * The embedded data of a graph. `nodes`: each node's attributes, node i gets id "n<i>" unless `ids` names them;
 * `edges`: [source, target, next_index, input_nr, extra attributes?] (sources and targets as node positions).
 * @param {{nodes: Record<string, unknown>[], edges?: Array<[number, number, number, number, Record<string, unknown>?]>,
 *   graph?: Record<string, unknown>, ids?: string[] | null, options?: Record<string, unknown>}} graph
 * @returns {import("../../gradexport/viewer/src/model.js").PageData}
 */
export function pageData({ nodes, edges = [], graph = {}, ids = null, options = {} }) {
  /** @type {string[]} */
  const strings = [];
  /** @type {Map<string, number>} */
  const schemaIndex = new Map();
  /** @type {[string[], string][]} */
  const schemas = [];
  const records = nodes.map((attributes) => {
    const keys = Object.keys(attributes);
    const values = Object.values(attributes);
    const flags = keys.map((key, j) => (INTERNED.has(key) && typeof values[j] === "string" ? "1" : "0")).join("");
    const signature = JSON.stringify([keys, flags]);
    if (!schemaIndex.has(signature)) {
      schemaIndex.set(signature, schemas.length);
      schemas.push([keys, flags]);
    }
    const stored = values.map((value, j) => {
      if (flags[j] !== "1") return value;
      if (!strings.includes(/** @type {string} */ (value))) strings.push(/** @type {string} */ (value));
      return strings.indexOf(/** @type {string} */ (value));
    });
    return /** @type {[number, ...unknown[]]} */ ([schemaIndex.get(signature), ...stored]);
  });
  /** @type {number[]} */
  const flat = [];
  /** @type {Record<string, Record<string, unknown>>} */
  const edgeExtra = {};
  edges.forEach(([source, target, nextIndex, inputNr, extra], e) => {
    flat.push(source, target, 0, nextIndex, inputNr);
    if (extra) edgeExtra[String(e)] = { next_index: nextIndex, input_nr: inputNr, ...extra };
  });
  return { graph, options, styles: {}, grad_colors: [], grad_bad_color: "", strings, schemas, ids, nodes: records, edges: flat, edge_extra: edgeExtra };
}

/** A backward node. */
export const op = (name, more = {}) => ({ kind: "backward", op: name, ...more });
/** A leaf (AccumulateGrad) for the parameters `names`. */
export const leaf = (names, more = {}) => ({ kind: "leaf", names, shape: [2], dtype: "float32", ...more });
/** A root: the tensor backward starts from. */
export const root = (name = "loss", more = {}) => ({ kind: "root", root: name, shape: [], dtype: "float32", ...more });

/** [source, target, 0, 0] for each consecutive pair of `path`: a chain of single edges. */
export function chainEdges(path) {
  return path.slice(1).map((target, j) => /** @type {[number, number, number, number]} */ ([path[j], target, 0, 0]));
}

/**
 * The item of the node or group `id` in `folds`; an Error where there is none, so a test reads a number.
 * @param {import("../../gradexport/viewer/src/model.js").Folds} folds
 * @param {string} id
 */
export function itemOf(folds, id) {
  const item = folds.item(id);
  if (item === undefined) throw new Error(`itemOf: no node or group ${JSON.stringify(id)} in the folds`);
  return item;
}
