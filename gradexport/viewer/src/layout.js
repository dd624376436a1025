// Layered layout of what is visible, with dagre. Runs in the Web Worker (worker.js)
// and, where no worker can start, on the page itself.
//
// Each opened box is laid out on its own, innermost first, and then stands as one
// node of the size it needs in the layout of the box around it. dagre's own compound
// layout does the same job 8 times slower (3.8 s against 0.45 s for the opening view
// of a 12-layer encoder) and minutes for a 1,000-node chain in nested boxes.
// An edge between two boxes is routed in the box that holds both ends, and joined to
// its ends inside the boxes by straight segments.
import dagre from "@dagrejs/dagre";

const PAD = 10;
const PAD_TOP = 26;

/**
 * request: {direction, nodes: [{id, w, h, box}], boxes: [{id, box, w, h}], edges: [{id, from, to, w, h}]}
 * (box: the id of the opened group the item sits in, or null; a box's w and h are its title's).
 * Returns {width, height, nodes: {id: {x, y, w, h}}, boxes: {...}, edges: {id: {points, x, y}}}
 * with x, y the centres.
 */
export function layout(request) {
  const parentOf = new Map();
  const members = new Map([[null, []]]);
  for (const box of request.boxes) members.set(box.id, []);
  for (const box of request.boxes) {
    parentOf.set(box.id, box.box);
    members.get(box.box).push(box.id);
  }
  const size = new Map();
  for (const node of request.nodes) {
    parentOf.set(node.id, node.box);
    members.get(node.box).push(node.id);
    size.set(node.id, { w: node.w, h: node.h });
  }
  const chain = (id) => {
    const out = [id];
    for (let up = parentOf.get(id); up !== null && up !== undefined; up = parentOf.get(up)) out.push(up);
    return out;
  };
  // Each edge goes to the box holding both ends, between the items there that contain them.
  const local = new Map([...members.keys()].map((key) => [key, []]));
  for (const edge of request.edges) {
    const a = chain(edge.from);
    const b = chain(edge.to);
    const inB = new Set(b);
    let i = 0;
    while (i < a.length && !inB.has(parentOf.get(a[i]) ?? null) && parentOf.get(a[i]) !== null) i++;
    const container = parentOf.get(a[i]) ?? null;
    const j = b.findIndex((id) => (parentOf.get(id) ?? null) === container);
    local.get(container).push({ edge, from: a[i], to: b[j], direct: a[i] === edge.from && b[j] === edge.to });
  }
  // Innermost boxes first.
  const depth = (id) => chain(id).length;
  const order = [...request.boxes].sort((x, y) => depth(y.id) - depth(x.id)).map((box) => box.id);
  const inner = new Map();
  const titles = new Map(request.boxes.map((box) => [box.id, box.w]));
  for (const container of [...order, null]) {
    const placed = place(request.direction || "TB", members.get(container), size, local.get(container));
    inner.set(container, placed);
    if (container !== null) {
      size.set(container, { w: Math.max(placed.width, titles.get(container)) + 2 * PAD, h: placed.height + PAD + PAD_TOP });
    }
  }
  // Absolute positions, outermost first.
  const result = { width: inner.get(null).width, height: inner.get(null).height, nodes: {}, boxes: {}, edges: {} };
  const origin = new Map([[null, [0, 0]]]);
  for (const container of [null, ...[...order].reverse()]) {
    const [ox, oy] = origin.get(container);
    const placed = inner.get(container);
    for (const id of members.get(container)) {
      const p = placed.positions.get(id);
      const s = size.get(id);
      const rect = { x: ox + p.x, y: oy + p.y, w: s.w, h: s.h };
      if (members.has(id)) {
        result.boxes[id] = rect;
        origin.set(id, [rect.x - s.w / 2 + PAD, rect.y - s.h / 2 + PAD_TOP]);
      } else {
        result.nodes[id] = rect;
      }
    }
  }
  for (const container of [null, ...order]) {
    const [ox, oy] = origin.get(container);
    const placed = inner.get(container);
    for (const item of local.get(container)) {
      const route = placed.routes.get(item.edge.id);
      let points = route.points.map(([x, y]) => [x + ox, y + oy]);
      if (!item.direct) {
        const from = result.nodes[item.edge.from] || result.boxes[item.edge.from];
        const to = result.nodes[item.edge.to] || result.boxes[item.edge.to];
        points = [clip(from, points[0]), ...points, clip(to, points[points.length - 1])];
      }
      result.edges[item.edge.id] = { points, x: route.x + ox, y: route.y + oy };
    }
  }
  return result;
}

/** One flat dagre layout of the items of a box, positions relative to the box's content origin. */
function place(direction, items, size, edges) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: direction, nodesep: 24, ranksep: 40, edgesep: 12, marginx: 0, marginy: 0 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const id of items) g.setNode(id, { width: size.get(id).w, height: size.get(id).h });
  for (const { edge, from, to } of edges) g.setEdge(from, to, { width: edge.w, height: edge.h, labelpos: "c" }, edge.id);
  dagre.layout(g);
  const positions = new Map(items.map((id) => [id, g.node(id)]));
  const routes = new Map();
  for (const { edge, from, to } of edges) {
    const p = g.edge({ v: from, w: to, name: edge.id });
    routes.set(edge.id, { points: p.points.map((q) => [q.x, q.y]), x: p.x, y: p.y });
  }
  const graph = g.graph();
  return { positions, routes, width: items.length ? graph.width : 0, height: items.length ? graph.height : 0 };
}

/** Where the segment from the centre of `rect` towards `point` leaves the rectangle. */
function clip(rect, point) {
  const dx = point[0] - rect.x;
  const dy = point[1] - rect.y;
  if (dx === 0 && dy === 0) return [rect.x, rect.y];
  const scale = Math.min(dx ? rect.w / 2 / Math.abs(dx) : Infinity, dy ? rect.h / 2 / Math.abs(dy) : Infinity, 1);
  return [rect.x + dx * scale, rect.y + dy * scale];
}
