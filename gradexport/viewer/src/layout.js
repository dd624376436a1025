// Layered layout of what is visible, with dagre. Runs in the Web Worker (worker.js)
// and, where no worker can start, on the page itself.
import dagre from "@dagrejs/dagre";

/**
 * request: {direction, nodes: [{id, w, h, box}], boxes: [{id, box, w, h}], edges: [{id, from, to, w, h}]}
 * (box: the id of the expanded group the item sits in, or null).
 * Returns {width, height, nodes: {id: {x, y, w, h}}, boxes: {...}, edges: {id: {points, x, y}}}
 * with x, y the centres.
 */
export function layout(request) {
  try {
    return run(request, true);
  } catch (error) {
    // dagre's compound layout fails on some nestings; boxes are then drawn around their members.
    const flat = run(request, false);
    flat.warning = String(error && error.message ? error.message : error);
    return flat;
  }
}

function run(request, compound) {
  const g = new dagre.graphlib.Graph({ compound, multigraph: true });
  g.setGraph({ rankdir: request.direction || "TB", nodesep: 24, ranksep: 40, edgesep: 12, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  if (compound) {
    for (const box of request.boxes) g.setNode(box.id, { width: box.w, height: box.h, paddingTop: 20 });
    for (const box of request.boxes) if (box.box !== null) g.setParent(box.id, box.box);
  }
  for (const node of request.nodes) {
    g.setNode(node.id, { width: node.w, height: node.h });
    if (compound && node.box !== null) g.setParent(node.id, node.box);
  }
  for (const edge of request.edges) {
    g.setEdge(edge.from, edge.to, { width: edge.w, height: edge.h, labelpos: "c" }, edge.id);
  }
  dagre.layout(g);
  const result = { width: g.graph().width, height: g.graph().height, nodes: {}, boxes: {}, edges: {} };
  for (const node of request.nodes) {
    const p = g.node(node.id);
    result.nodes[node.id] = { x: p.x, y: p.y, w: p.width, h: p.height };
  }
  if (compound) {
    for (const box of request.boxes) {
      const p = g.node(box.id);
      result.boxes[box.id] = { x: p.x, y: p.y, w: p.width, h: p.height };
    }
  } else {
    boxesAround(request, result);
  }
  for (const edge of request.edges) {
    const p = g.edge({ v: edge.from, w: edge.to, name: edge.id });
    result.edges[edge.id] = { points: p.points.map((q) => [q.x, q.y]), x: p.x, y: p.y };
  }
  return result;
}

function boxesAround(request, result) {
  const bounds = new Map();
  const grow = (id, x0, y0, x1, y1) => {
    const b = bounds.get(id) || [Infinity, Infinity, -Infinity, -Infinity];
    bounds.set(id, [Math.min(b[0], x0), Math.min(b[1], y0), Math.max(b[2], x1), Math.max(b[3], y1)]);
  };
  const parentOf = new Map(request.boxes.map((box) => [box.id, box.box]));
  for (const node of request.nodes) {
    const p = result.nodes[node.id];
    for (let box = node.box; box !== null && box !== undefined; box = parentOf.get(box)) {
      grow(box, p.x - p.w / 2 - 8, p.y - p.h / 2 - 24, p.x + p.w / 2 + 8, p.y + p.h / 2 + 8);
    }
  }
  for (const box of request.boxes) {
    const b = bounds.get(box.id);
    if (b) result.boxes[box.id] = { x: (b[0] + b[2]) / 2, y: (b[1] + b[3]) / 2, w: b[2] - b[0], h: b[3] - b[1] };
  }
}
