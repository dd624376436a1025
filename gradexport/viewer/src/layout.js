// Layered layout of what is visible, with dagre. Runs in the Web Worker (worker.js)
// and, where no worker can start, on the page itself.
//
// Each opened box is laid out on its own, innermost first, and then stands as one
// node of the size it needs in the layout of the box around it: dagre's own compound
// layout does the same job several times slower (docs/guides/viewer.md has the figures).
// An edge between two boxes is routed in the box that holds both ends, and joined to
// its ends inside the boxes by straight segments.
// Writes: no viewer field.
// Changes: nothing (pure: no DOM).
import dagre from "@dagrejs/dagre";

const PAD = 10;
const PAD_TOP = 26;
/**
 * Up to this many items in a box, its layout keeps each node's children in next_functions order, left to right
 * (top to bottom across), as Graphviz draws them: dagre re-checks every such constraint on every rank at every
 * sweep, a cost that grows with ranks times constraints (docs/performance.md has the figures).
 */
const ORDERED_UP_TO = 400;

/**
 * What to lay out (made by layout-input.js): a node's and a box's `box` is the id of the opened group it sits in,
 * or null; a box's w and h are its title's; an edge's w and h its label's.
 * @typedef {object} LayoutRequest
 * @property {string} direction "TB", "LR", "BT" or "RL"
 * @property {{id: string, box: string | null, w: number, h: number}[]} nodes
 * @property {{id: string, box: string | null, w: number, h: number, compound: boolean}[]} boxes
 * @property {{id: string, from: string, to: string, w: number, h: number, next: number}[]} edges `next`: the edge's
 *   position in its source's next_functions (its order among the source's edges)
 *
 * @typedef {{x: number, y: number, w: number, h: number}} Rect a rectangle by its centre and size
 *
 * The layout: positions by id, x and y the centres.
 * @typedef {object} LayoutResult
 * @property {number} width
 * @property {number} height
 * @property {Record<string, Rect>} nodes
 * @property {Record<string, Rect>} boxes
 * @property {Record<string, {points: [number, number][], x: number, y: number}>} edges the route and the label's centre
 * @property {string} [warning] set where the layout had to approximate
 */

/**
 * @param {LayoutRequest} request
 * @returns {LayoutResult}
 */
export function layout(request) {
  /** @type {Map<string, string | null>} */
  const parentOf = new Map();
  /** @type {Map<string | null, string[]>} */
  const members = new Map([[null, []]]);
  for (const box of request.boxes) members.set(box.id, []);
  for (const box of request.boxes) {
    parentOf.set(box.id, box.box);
    at(members, box.box).push(box.id);
  }
  /** @type {Map<string, {w: number, h: number}>} */
  const size = new Map();
  for (const node of request.nodes) {
    parentOf.set(node.id, node.box);
    at(members, node.box).push(node.id);
    size.set(node.id, { w: node.w, h: node.h });
  }
  /** @param {string} id @returns {string[]} the id and the boxes around it, innermost first */
  const chain = (id) => {
    const out = [id];
    for (let up = parentOf.get(id); up !== null && up !== undefined; up = parentOf.get(up)) out.push(up);
    return out;
  };
  // Each edge goes to the box holding both ends, between the items there that contain them.
  /** @type {Map<string | null, {edge: LayoutRequest["edges"][number], from: string, to: string, direct: boolean}[]>} */
  const local = new Map([...members.keys()].map((key) => [key, []]));
  for (const edge of request.edges) {
    const a = chain(edge.from);
    const b = chain(edge.to);
    /** @type {Set<string | null>} */
    const inB = new Set(b);
    let i = 0;
    while (i < a.length && !inB.has(parentOf.get(a[i]) ?? null) && parentOf.get(a[i]) !== null) i++;
    const container = parentOf.get(a[i]) ?? null;
    const j = b.findIndex((id) => (parentOf.get(id) ?? null) === container);
    at(local, container).push({ edge, from: a[i], to: b[j], direct: a[i] === edge.from && b[j] === edge.to });
  }
  // Innermost boxes first.
  const depth = (/** @type {string} */ id) => chain(id).length;
  const order = [...request.boxes].sort((x, y) => depth(y.id) - depth(x.id)).map((box) => box.id);
  /** @type {Map<string | null, Placed>} */
  const inner = new Map();
  const titles = new Map(request.boxes.map((box) => [box.id, box.w]));
  for (const container of [...order, null]) {
    const placed = place(request.direction || "TB", at(members, container), size, at(local, container));
    inner.set(container, placed);
    if (container !== null) {
      size.set(container, { w: Math.max(placed.width, at(titles, container)) + 2 * PAD, h: placed.height + PAD + PAD_TOP });
    }
  }
  // Absolute positions, outermost first.
  const top = at(inner, null);
  /** @type {LayoutResult} */
  const result = { width: top.width, height: top.height, nodes: {}, boxes: {}, edges: {} };
  /** @type {Map<string | null, [number, number]>} */
  const origin = new Map([[null, [0, 0]]]);
  for (const container of [null, ...[...order].reverse()]) {
    const [ox, oy] = at(origin, container);
    const placed = at(inner, container);
    for (const id of at(members, container)) {
      const p = at(placed.positions, id);
      const s = at(size, id);
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
    const [ox, oy] = at(origin, container);
    const placed = at(inner, container);
    for (const item of at(local, container)) {
      const route = at(placed.routes, item.edge.id);
      let points = route.points.map(([x, y]) => /** @type {[number, number]} */ ([x + ox, y + oy]));
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

/**
 * @typedef {object} Placed one box's layout, relative to its content's origin
 * @property {Map<string, {x: number, y: number}>} positions
 * @property {Map<string, {points: [number, number][], x: number, y: number}>} routes
 * @property {number} width
 * @property {number} height
 */

/**
 * One flat dagre layout of the items of a box, positions relative to the box's content origin.
 * @param {string} direction
 * @param {string[]} items
 * @param {Map<string, {w: number, h: number}>} size
 * @param {{edge: LayoutRequest["edges"][number], from: string, to: string}[]} edges
 * @returns {Placed}
 */
function place(direction, items, size, edges) {
  const g = new dagre.graphlib.Graph({ multigraph: true });
  g.setGraph({ rankdir: direction, nodesep: 24, ranksep: 40, edgesep: 12, marginx: 0, marginy: 0 });
  g.setDefaultEdgeLabel(() => ({}));
  for (const id of items) g.setNode(id, { width: at(size, id).w, height: at(size, id).h });
  for (const { edge, from, to } of edges) g.setEdge(from, to, { width: edge.w, height: edge.h, labelpos: "c" }, edge.id);
  dagre.layout(g, { constraints: siblingOrder(items, edges) });
  const positions = new Map(items.map((id) => [id, g.node(id)]));
  const routes = new Map();
  for (const { edge, from, to } of edges) {
    const p = g.edge({ v: from, w: to, name: edge.id });
    routes.set(edge.id, { points: p.points.map((/** @type {{x: number, y: number}} */ q) => /** @type {[number, number]} */ ([q.x, q.y])), x: p.x, y: p.y });
  }
  const graph = g.graph();
  return { positions, routes, width: items.length ? graph.width : 0, height: items.length ? graph.height : 0 };
}

/**
 * Constraints that keep each item's children in next_functions order, left of one another (dagre's `constraints`
 * option: `left` is placed before `right` where both share a rank). Each pair follows one depth-first order of the
 * box (children visited in next_functions order, as Graphviz's initial order does), so they never contradict.
 * @param {string[]} items
 * @param {{edge: {next: number}, from: string, to: string}[]} edges
 * @returns {{left: string, right: string}[]}
 * @example
 * // A node a with next_functions [b, c]:
 * // siblingOrder(["a", "b", "c"], [{edge: {next: 1}, from: "a", to: "c"}, {edge: {next: 0}, from: "a", to: "b"}])
 * // → [{left: "b", right: "c"}]
 */
export function siblingOrder(items, edges) {
  if (items.length > ORDERED_UP_TO) return [];
  /** @type {Map<string, {to: string, next: number}[]>} */
  const children = new Map();
  const pointedTo = new Set();
  for (const { edge, from, to } of edges) {
    if (from === to) continue;
    const list = children.get(from);
    if (list) list.push({ to, next: edge.next });
    else children.set(from, [{ to, next: edge.next }]);
    pointedTo.add(to);
  }
  /** @type {Map<string, string[]>} */
  const ordered = new Map();
  for (const [from, list] of children) ordered.set(from, list.sort((a, b) => a.next - b.next).map((child) => child.to));
  /** @type {Map<string, number>} */
  const visited = new Map();
  for (const start of [...items.filter((id) => !pointedTo.has(id)), ...items]) {
    const stack = [start];
    while (stack.length) {
      const id = /** @type {string} */ (stack.pop());
      if (visited.has(id)) continue;
      visited.set(id, visited.size);
      const next = ordered.get(id) || [];
      for (let j = next.length - 1; j >= 0; j--) if (!visited.has(next[j])) stack.push(next[j]);
    }
  }
  const constraints = [];
  for (const next of ordered.values()) {
    for (let j = 0; j + 1 < next.length; j++) {
      const left = next[j];
      const right = next[j + 1];
      if (left !== right && at(visited, left) < at(visited, right)) constraints.push({ left, right });
    }
  }
  return constraints;
}

/**
 * map.get(key), there whenever the request is whole; an Error naming the key where it is not.
 * @template K, V
 * @param {Map<K, V>} map
 * @param {K} key
 * @returns {V}
 */
function at(map, key) {
  const value = map.get(key);
  if (value === undefined) throw new Error(`layout: the request names ${JSON.stringify(key)} but does not define it`);
  return value;
}

/**
 * Where the segment from the centre of `rect` towards `point` leaves the rectangle.
 * @param {Rect} rect
 * @param {[number, number]} point
 * @returns {[number, number]}
 */
function clip(rect, point) {
  const dx = point[0] - rect.x;
  const dy = point[1] - rect.y;
  if (dx === 0 && dy === 0) return [rect.x, rect.y];
  const scale = Math.min(dx ? rect.w / 2 / Math.abs(dx) : Infinity, dy ? rect.h / 2 / Math.abs(dy) : Infinity, 1);
  return [rect.x + dx * scale, rect.y + dy * scale];
}
