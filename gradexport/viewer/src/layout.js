// Layered layout of what is visible, with dagre. Runs in the Web Worker (worker.js)
// and, where no worker can start, on the page itself.
//
// Only module boxes are dagre compound nodes: nested compound nodes cost dagre far
// more than plain ones (a 1,000-node chain in 270 nested boxes took minutes), so the
// boxes of opened linear runs and fans are drawn around their members afterwards.
import dagre from "@dagrejs/dagre";

/**
 * request: {direction, nodes: [{id, w, h, box}], boxes: [{id, box, w, h, compound}], edges: [{id, from, to, w, h}]}
 * (box: the id of the opened group the item sits in, or null).
 * Returns {width, height, nodes: {id: {x, y, w, h}}, boxes: {...}, edges: {id: {points, x, y}}}
 * with x, y the centres.
 */
export function layout(request) {
  try {
    return run(request, true);
  } catch (error) {
    // dagre's compound layout fails on some nestings; every box is then drawn around its members.
    const flat = run(request, false);
    flat.warning = String(error && error.message ? error.message : error);
    return flat;
  }
}

/** The innermost compound box around `box` (itself included), or null. */
export function compoundBox(request, box) {
  const boxes = new Map(request.boxes.map((b) => [b.id, b]));
  const memo = new Map();
  const find = (id) => {
    if (id === null || id === undefined) return null;
    if (memo.has(id)) return memo.get(id);
    const b = boxes.get(id);
    const found = b.compound ? id : find(b.box);
    memo.set(id, found);
    return found;
  };
  return find;
}

function run(request, compound) {
  const g = new dagre.graphlib.Graph({ compound, multigraph: true });
  g.setGraph({ rankdir: request.direction || "TB", nodesep: 24, ranksep: 40, edgesep: 12, marginx: 16, marginy: 16 });
  g.setDefaultEdgeLabel(() => ({}));
  const outer = compoundBox(request);
  const drawn = compound ? request.boxes.filter((box) => box.compound) : [];
  for (const box of drawn) g.setNode(box.id, { width: box.w, height: box.h });
  for (const box of drawn) {
    const parent = outer(box.box);
    if (parent !== null) g.setParent(box.id, parent);
  }
  for (const node of request.nodes) {
    g.setNode(node.id, { width: node.w, height: node.h });
    const parent = compound ? outer(node.box) : null;
    if (parent !== null) g.setParent(node.id, parent);
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
  for (const box of drawn) {
    const p = g.node(box.id);
    result.boxes[box.id] = { x: p.x, y: p.y, w: p.width, h: p.height };
  }
  boxesAround(request, result);
  for (const edge of request.edges) {
    const p = g.edge({ v: edge.from, w: edge.to, name: edge.id });
    result.edges[edge.id] = { points: p.points.map((q) => [q.x, q.y]), x: p.x, y: p.y };
  }
  return result;
}

/** Boxes that were not laid out: drawn around their nodes and inner boxes, innermost first. */
function boxesAround(request, result) {
  const members = new Map(request.boxes.map((box) => [box.id, []]));
  for (const node of request.nodes) if (node.box !== null) members.get(node.box).push(result.nodes[node.id]);
  const depth = new Map();
  const depthOf = (box) => {
    if (box.box === null) return 0;
    if (!depth.has(box.id)) depth.set(box.id, 1 + depthOf(request.boxes.find((b) => b.id === box.box)));
    return depth.get(box.id);
  };
  const order = [...request.boxes].sort((a, b) => depthOf(b) - depthOf(a));
  for (const box of order) {
    let rect = result.boxes[box.id];
    if (!rect) {
      let [x0, y0, x1, y1] = [Infinity, Infinity, -Infinity, -Infinity];
      for (const p of members.get(box.id)) {
        x0 = Math.min(x0, p.x - p.w / 2);
        y0 = Math.min(y0, p.y - p.h / 2);
        x1 = Math.max(x1, p.x + p.w / 2);
        y1 = Math.max(y1, p.y + p.h / 2);
      }
      if (x0 === Infinity) continue;
      x0 -= 8;
      x1 += 8;
      y0 -= 22;
      y1 += 6;
      rect = result.boxes[box.id] = { x: (x0 + x1) / 2, y: (y0 + y1) / 2, w: x1 - x0, h: y1 - y0 };
    }
    if (box.box !== null) members.get(box.box).push(rect);
  }
}
