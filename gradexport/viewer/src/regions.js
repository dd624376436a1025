// Inside a compiled region: the ops of each CompiledFunctionBackward's `compiled_graph` (gradexport.tracing.compiled)
// become nodes of the page data, which model.js folds into one group per region, closed at first.
// No DOM here.
// Writes: no viewer field.
// Changes: nothing: it returns new page data, the given data left as it was.

/**
 * A compiled region's backward graph, as the graph model holds it on the region's node.
 * @typedef {{id: string, op: string, inputs: string[], seq_nr?: number, forward_op?: string, source?: string, source_code?: string, source_function?: string}} RegionOp
 * @typedef {{ops: RegionOp[], inputs: {id: string, role: string}[], outputs: {id: string, next_index: number}[], metadata_kept: boolean}} CompiledGraph
 */

/** The kind of an op node made here (model.js folds the nodes of this kind into their region's group). */
export const REGION_OP = "compiled_op";

/**
 * The page data with every compiled region's ops as nodes: kind REGION_OP, id "<region node id>/<op id>",
 * `region` (the region node's id), `returns` (the next_functions index its result flows along, for an output);
 * an edge from each op to each op that reads its result, and from the region's node to each op that reads no
 * other op (labelled with what it reads). Data without regions comes back as it is.
 * @param {import("./model.js").PageData} data
 * @returns {import("./model.js").PageData}
 */
export function openRegions(data) {
  const regionKey = data.schemas.map(([keys]) => keys.indexOf("compiled_graph"));
  if (regionKey.every((j) => j < 0)) return data;
  const ids = data.ids ? [...data.ids] : data.nodes.map((_, i) => "n" + i);
  const schemas = [...data.schemas];
  const nodes = [...data.nodes];
  const edges = [...data.edges];
  const extra = { ...data.edge_extra };
  /** @type {Map<string, number>} */
  const schemaOf = new Map();
  /** @param {Record<string, unknown>} record */
  const addNode = (record) => {
    const keys = Object.keys(record);
    const signature = keys.join("\u0000");
    let schema = schemaOf.get(signature);
    if (schema === undefined) {
      schema = schemas.length;
      schemas.push([keys, "0".repeat(keys.length)]);
      schemaOf.set(signature, schema);
    }
    nodes.push([schema, ...keys.map((key) => record[key])]);
    ids.push(String(record.id_));
    return nodes.length - 1;
  };
  /** @param {number} from @param {number} to @param {string} carries */
  const addEdge = (from, to, carries) => {
    const e = edges.length / 5;
    edges.push(from, to, e, -1, -1);
    extra[e] = { carries };
  };
  data.nodes.forEach((record, node) => {
    const j = regionKey[record[0]];
    const region = j < 0 ? undefined : /** @type {CompiledGraph | undefined} */ (record[j + 1]);
    if (!region || typeof region !== "object" || !Array.isArray(region.ops)) return;
    const regionId = ids[node];
    const returns = new Map((region.outputs || []).map((output) => [output.id, output.next_index]));
    /** @type {Map<string, number>} */
    const made = new Map();
    for (const op of region.ops) {
      /** @type {Record<string, unknown>} */
      const fields = { id_: `${regionId}/${op.id}`, kind: REGION_OP, op: op.op, region: regionId, value: op.id };
      for (const key of /** @type {(keyof RegionOp)[]} */ (["forward_op", "seq_nr", "source", "source_code", "source_function"])) {
        if (op[key] !== undefined) fields[key] = op[key];
      }
      fields.inputs = op.inputs;
      if (returns.has(op.id)) fields.returns = returns.get(op.id);
      made.set(op.id, addNode(fields));
    }
    for (const op of region.ops) {
      const target = /** @type {number} */ (made.get(op.id));
      const fromOps = op.inputs.filter((value) => made.has(value));
      for (const value of fromOps) addEdge(/** @type {number} */ (made.get(value)), target, value);
      if (!fromOps.length) addEdge(node, target, op.inputs.join(", "));
    }
  });
  // id_ stood in for the id while the schemas were made: drop it from each new schema and record.
  for (let s = data.schemas.length; s < schemas.length; s++) schemas[s] = [schemas[s][0].slice(1), schemas[s][1].slice(1)];
  for (let i = data.nodes.length; i < nodes.length; i++) nodes[i] = [nodes[i][0], ...nodes[i].slice(2)];
  return { ...data, schemas, nodes, ids, edges, edge_extra: extra };
}
