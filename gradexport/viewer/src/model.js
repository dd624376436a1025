// The graph as the viewer holds it: decoded data, the fold tree (modules, then
// linear runs and fans of leaves), and what is visible for a set of expanded groups.
// No DOM here: the page (main.js) and the layout worker read what this computes.
// Writes: no viewer field.
// Changes: its own Graph and Folds (pure: no DOM).

import { REGION_OP } from "./regions.js";

/**
 * The page data the Python writer embeds (gradexport/formats/html.py, _encode).
 * @typedef {object} PageData
 * @property {string[]} strings the string table
 * @property {[string[], string][]} schemas per schema its keys and a flag per key, "1": the value is a string-table index
 * @property {Array<[number, ...any[]]>} nodes per node [schema, values...]
 * @property {string[] | null} [ids] the node ids, where they are not "n<position>"
 * @property {number[]} edges five numbers per edge: source, target, key, next_index, input_nr
 * @property {Record<string, EdgeAttributes>} edge_extra the attributes of the edges with more than their indices, by edge number
 * @property {Record<string, any>} graph the graph's attributes (module_classes, diff, nonfinite, watch_steps, ...)
 * @property {Record<string, any>} [options] the diagram options the page honours (direction, group_modules, ...)
 * @property {Record<string, NodeStyle>} styles the node styles by class (gradexport.formats.styles)
 * @property {Record<string, string>} [mark_words] the words of each mark ("+ added", ...)
 * @property {Record<string, string>} [mark_colors] the colour of each edge mark
 * @property {string[]} grad_colors the gradient scale's colours, light theme
 * @property {string[]} [grad_colors_dark] and dark theme
 * @property {number[]} [grad_bounds] the norms where the scale's steps start
 * @property {string[]} [grad_legend] each step's legend text
 * @property {string} grad_bad_color the colour of a non-finite gradient
 * @property {string | null} [title] the page's title
 * @property {import("./steps.js").StepData} [steps] a replay's steps
 *
 * @typedef {{fill: string, stroke: string, text: string, shape: string, dashed?: boolean}} NodeStyle
 * @typedef {{norm?: number | string, has_nan?: boolean, has_inf?: boolean, [key: string]: unknown}} GradRecord
 * @typedef {{next_index?: number, input_nr?: number, grad?: GradRecord | unknown, diff?: string, nonfinite?: string, [key: string]: any}} EdgeAttributes
 *
 * A group of the fold tree: a module, a linear run ("chain"), a fan of leaves, a part of a long module, or the top.
 * @typedef {object} Group
 * @property {string} id "module:<path>", "region:<node id>" (the ops inside a compiled region, regions.js), "chain:<first>..<last>", "fan:<node>:<first>..<last>", "part:<group>:<start>" or ""
 * @property {"top" | "module" | "region" | "chain" | "fan" | "part"} kind
 * @property {number} parent the item of the group around it; -1 for the top
 * @property {string[]} label its first line is its title
 * @property {number[]} children the items directly inside, in tree order
 * @property {number} size how many model nodes it holds
 * @property {Record<string, number> | null} [marks] its marked nodes counted per mark (countMarks)
 * @property {string} [path] a module's path
 * @property {string} [moduleClass] a module's class name
 * @property {number} [level] a module's depth
 *
 * An edge between visible items: one or more edges of the graph.
 * @typedef {object} VisibleEdge
 * @property {number} from the visible item the edges leave
 * @property {number} to the visible item they enter
 * @property {number | string} next next_index, or the range "a…b" of a bundle
 * @property {number | string} input input_nr, or its range
 * @property {number} count how many graph edges it stands for
 * @property {number[]} edges the first 64 of them
 * @property {boolean} [more] whether it stands for more than `edges` lists
 * @property {number} [bundled] how many merged edges a bundle replaced
 * @property {string[]} [lines] its label's lines (set by layout-input.js)
 * @property {{mark: string, color: string, sign: string} | null} [mark] its mark (set by looks.js edgeLines)
 * @property {SVGGElement} [element] where it is drawn (set by draw.js)
 *
 * What is visible for the folds' expanded groups, and the edges between the visible items.
 * @typedef {object} View
 * @property {number[]} items the visible items in tree order
 * @property {number[]} boxes the expanded groups, drawn as boxes around their items
 * @property {Map<number, number>} box the box each item and box sits in, -1 for none
 * @property {Int32Array} rep per model node, the visible item standing for it
 * @property {VisibleEdge[]} edges
 */

/** Linear runs shorter than this stay as they are. */
const CHAIN_MIN = 4;
/** A node with at least this many leaf children gets them folded into one fan. */
const FAN_MIN = 4;
/** A folded run or fan with more members than this is cut into at most SPLIT pieces. */
const PIECE_MAX = 24;
const SPLIT = 16;
/** A module with more items than this directly inside shows them in at most SPLIT parts. */
const PART_MAX = 48;

/**
 * Decode the data the Python writer embeds (see gradexport/formats/html.py).
 * Nodes are [schema, values...]; a schema is [keys, flags] where flag "1" marks
 * a value given as an index into the string table.
 */
export class Graph {
  /** @param {PageData} data */
  constructor(data) {
    this.data = data;
    this.strings = data.strings;
    this.schemas = data.schemas.map(([keys, flags]) => ({ keys, interned: [...flags].map((f) => f === "1") }));
    this.records = data.nodes;
    this.n = this.records.length;
    this.ids = data.ids || null;
    // As gradexport.core.source.Source.marked: a diff's or a non-finite report's graph.
    const attributes = data.graph || {};
    this.marked = "diff" in attributes || "nonfinite" in attributes;
    this.index = new Map();
    for (let i = 0; i < this.n; i++) this.index.set(this.id(i), i);
    const flat = data.edges;
    const m = flat.length / 5;
    this.m = m;
    this.src = new Int32Array(m);
    this.tgt = new Int32Array(m);
    for (let e = 0; e < m; e++) {
      this.src[e] = flat[5 * e];
      this.tgt[e] = flat[5 * e + 1];
    }
    this.outDeg = new Int32Array(this.n);
    this.inDeg = new Int32Array(this.n);
    for (let e = 0; e < m; e++) {
      this.outDeg[this.src[e]]++;
      this.inDeg[this.tgt[e]]++;
    }
    this.outStart = csr(this.n, this.outDeg);
    this.inStart = csr(this.n, this.inDeg);
    this.outEdges = new Int32Array(m);
    this.inEdges = new Int32Array(m);
    const o = this.outStart.slice(0, this.n);
    const p = this.inStart.slice(0, this.n);
    for (let e = 0; e < m; e++) {
      this.outEdges[o[this.src[e]]++] = e;
      this.inEdges[p[this.tgt[e]]++] = e;
    }
  }

  /**
   * @param {number} i a node
   * @returns {string}
   */
  id(i) {
    return this.ids ? this.ids[i] : "n" + i;
  }

  /**
   * One attribute of node i, or undefined.
   * @param {number} i
   * @param {string} key
   * @returns {any}
   */
  field(i, key) {
    const record = this.records[i];
    const schema = this.schemas[record[0]];
    const j = schema.keys.indexOf(key);
    if (j < 0) return undefined;
    return schema.interned[j] ? this.strings[record[j + 1]] : record[j + 1];
  }

  /**
   * Every attribute of node i, as the graph model holds it.
   * @param {number} i
   * @returns {Record<string, any>}
   */
  attributes(i) {
    const record = this.records[i];
    const schema = this.schemas[record[0]];
    const out = Object.create(null); // an attribute named "__proto__" is an attribute, not the prototype
    schema.keys.forEach((key, j) => {
      out[key] = schema.interned[j] ? this.strings[record[j + 1]] : record[j + 1];
    });
    return out;
  }

  /**
   * The edge's attributes: {next_index, input_nr} plus what else the model holds.
   * @param {number} e an edge
   * @returns {EdgeAttributes}
   */
  edgeAttributes(e) {
    const extra = this.data.edge_extra[e];
    if (extra) return extra;
    return { next_index: this.data.edges[5 * e + 3], input_nr: this.data.edges[5 * e + 4] };
  }

  /**
   * @param {number} e
   * @returns {number}
   */
  edgeKey(e) {
    return this.data.edges[5 * e + 2];
  }

  /**
   * @param {number} e
   * @returns {[number | string, number | string]}
   */
  edgeIndices(e) {
    const extra = this.data.edge_extra[e];
    if (extra) return [extra.next_index ?? "?", extra.input_nr ?? "?"];
    return [this.data.edges[5 * e + 3], this.data.edges[5 * e + 4]];
  }

  /**
   * @param {number} e
   * @returns {GradRecord | null}
   */
  edgeGrad(e) {
    const extra = this.data.edge_extra[e];
    return extra && extra.grad && typeof extra.grad === "object" ? /** @type {GradRecord} */ (extra.grad) : null;
  }
}

/**
 * @param {number} n
 * @param {Int32Array} degrees
 */
function csr(n, degrees) {
  const start = new Int32Array(n + 1);
  for (let i = 0; i < n; i++) start[i + 1] = start[i] + degrees[i];
  return start;
}

/**
 * @param {string} path
 * @returns {string | null}
 */
function parentPath(path) {
  if (path === "") return null;
  return path.includes(".") ? path.slice(0, path.lastIndexOf(".")) : "";
}

/**
 * @param {string} path
 */
function level(path) {
  return path === "" ? 0 : path.split(".").length;
}

/**
 * The fold tree. Items 0..n-1 are model nodes, n.. are groups. Group 0 (item n)
 * is the top, always expanded and never drawn.
 */
export class Folds {
  /**
   * @param {Graph} graph
   * @param {boolean} useModules whether the nodes sit in their modules' groups
   */
  constructor(graph, useModules = true) {
    this.graph = graph;
    /** @type {number[] | null} the groups in post-order, made by the first sums() */
    this.postOrder = null;
    const n = graph.n;
    this.parent = new Int32Array(n).fill(-1);
    /** @type {Group[]} */
    this.groups = [];
    this.byId = new Map();
    // A Map, so that a module named "constructor" or "__proto__" is looked up as data, never on Object.prototype.
    const classes = (graph.data.graph && graph.data.graph.module_classes) || {};
    this.classes = new Map(Object.entries(classes).filter(([, cls]) => typeof cls === "string"));
    const top = this.addGroup({ id: "", kind: "top", parent: -1, label: [] });
    /** @type {Map<string, number>} */
    const moduleGroups = new Map();
    /** @type {(path: string) => number} */
    const moduleOf = (path) => {
      let group = moduleGroups.get(path);
      if (group !== undefined) return group;
      const above = parentPath(path);
      const parent = above === null ? top : moduleOf(above);
      const cls = this.classes.get(path);
      const name = path === "" ? "(model)" : path;
      group = this.addGroup({
        id: "module:" + path,
        kind: "module",
        parent,
        path,
        moduleClass: cls,
        level: level(path),
        label: [cls ? `${name}: ${cls}` : name],
      });
      moduleGroups.set(path, group);
      return group;
    };
    /** @type {Map<string, number>} */
    const regionGroups = new Map();
    const home = new Int32Array(n);
    /** @type {(region: string) => number} */
    const regionOf = (region) => {
      let group = regionGroups.get(region);
      if (group !== undefined) return group;
      const node = /** @type {number} */ (graph.index.get(region));
      group = this.addGroup({ id: "region:" + region, kind: "region", parent: home[node], label: [nodeTitle(graph, node), "inside the compiled region"] });
      regionGroups.set(region, group);
      return group;
    };
    for (let i = 0; i < n; i++) {
      const region = graph.field(i, "kind") === REGION_OP ? graph.field(i, "region") : undefined;
      if (typeof region === "string" && graph.index.has(region)) {
        home[i] = regionOf(region); // after its region's node: regions.js appends the ops
        continue;
      }
      const path = useModules ? graph.field(i, "module") : undefined;
      // A node folded by gradexport.collapse ("module:<path>") sits in its parent module.
      if (typeof path !== "string") home[i] = top;
      else if (graph.field(i, "kind") !== "module") home[i] = moduleOf(path);
      else home[i] = path === "" ? top : moduleOf(/** @type {string} */ (parentPath(path))); // not the model's: it has a parent
    }
    this.home = home;
    this.foldStructure();
    for (let i = 0; i < n; i++) if (this.parent[i] < 0) this.attach(i, home[i]);
    for (const group of [...moduleGroups.values(), ...regionGroups.values(), top]) this.split(group);
    this.count();
    this.countMarks();
    this.expanded = new Set([top]);
  }

  /**
   * @param {Omit<Group, "children" | "size">} fields
   * @returns {number} the group's item
   */
  addGroup(fields) {
    const group = /** @type {Group} */ ({ ...fields, children: [], size: 0 });
    const index = this.graph.n + this.groups.length;
    this.groups.push(group);
    this.byId.set(group.id, index);
    if (group.parent >= 0) this.group(group.parent).children.push(index);
    return index;
  }

  /**
   * @param {number} item a group
   * @returns {Group}
   */
  group(item) {
    return this.groups[item - this.graph.n];
  }

  /**
   * @param {number} item
   */
  isGroup(item) {
    return item >= this.graph.n;
  }

  /**
   * @param {number} node
   * @param {number} group
   */
  attach(node, group) {
    this.parent[node] = group;
    this.group(group).children.push(node);
  }

  /**
   * @param {number} item
   * @returns {string}
   */
  itemId(item) {
    return this.isGroup(item) ? this.group(item).id : this.graph.id(item);
  }

  /**
   * @param {string} id
   * @returns {number | undefined}
   */
  item(id) {
    const node = this.graph.index.get(id);
    if (node !== undefined) return node;
    const group = this.byId.get(id);
    return group;
  }

  /**
   * What an item is called: a group's first label line, a node's title (nodeTitle).
   * @param {number} item
   * @returns {string}
   */
  title(item) {
    return this.isGroup(item) ? this.group(item).label[0] : nodeTitle(this.graph, item);
  }

  /**
   * @param {number} item
   * @returns {number}
   */
  parentOf(item) {
    return this.isGroup(item) ? this.group(item).parent : this.parent[item];
  }

  /** Linear runs and fans of leaves, inside one fold-tree home each, become groups. */
  foldStructure() {
    const g = this.graph;
    const home = this.home;
    const linear = (/** @type {number} */ v) => g.inDeg[v] === 1 && g.outDeg[v] === 1;
    const next = (/** @type {number} */ v) => g.tgt[g.outEdges[g.outStart[v]]];
    const prev = (/** @type {number} */ v) => g.src[g.inEdges[g.inStart[v]]];
    for (let v = 0; v < g.n; v++) {
      if (!linear(v)) continue;
      const p = prev(v);
      if (linear(p) && home[p] === home[v] && p !== v) continue; // not the start of its run
      const run = [v];
      let w = next(v);
      while (linear(w) && home[w] === home[v] && w !== v && run.length <= g.n) {
        run.push(w);
        w = next(w);
      }
      if (run.length >= CHAIN_MIN) this.fold(run, home[v], "chain");
    }
    for (let u = 0; u < g.n; u++) {
      if (g.outDeg[u] < FAN_MIN) continue;
      const leaves = [];
      for (let j = g.outStart[u]; j < g.outStart[u + 1]; j++) {
        const w = g.tgt[g.outEdges[j]];
        if (g.outDeg[w] === 0 && g.inDeg[w] === 1 && home[w] === home[u] && this.parent[w] < 0) leaves.push(w);
      }
      if (leaves.length >= FAN_MIN) this.fold(leaves, home[u], "fan", g.id(u));
    }
  }

  /**
   * @param {number[]} members
   * @param {number} parent
   * @param {"chain" | "fan"} kind
   * @param {string} [fanOf] the id of the node whose leaves a fan holds
   * @returns {number}
   */
  fold(members, parent, kind, fanOf) {
    const g = this.graph;
    const first = g.id(members[0]);
    const last = g.id(members[members.length - 1]);
    const id = kind === "chain" ? `chain:${first}..${last}` : `fan:${fanOf}:${first}..${last}`;
    const label = [];
    if (kind === "chain") {
      const a = nodeTitle(g, members[0]);
      const b = nodeTitle(g, members[members.length - 1]);
      label.push(a === b ? a : `${a} … ${b}`, `linear run ×${members.length}`);
    } else {
      label.push(`${members.length} leaves of ${fanOf}`, `×${members.length}`);
    }
    const group = this.addGroup({ id, kind, parent, label });
    if (members.length > PIECE_MAX) {
      const size = Math.ceil(members.length / SPLIT);
      for (let start = 0; start < members.length; start += size) {
        const piece = members.slice(start, start + size);
        if (piece.length >= CHAIN_MIN) this.fold(piece, group, kind, fanOf);
        else for (const v of piece) this.attach(v, group);
      }
    } else {
      for (const v of members) this.attach(v, group);
    }
    return group;
  }

  /**
   * A module (or the top) with more than PART_MAX items directly inside (a Sequential of
   * hundreds of layers) shows them in parts of consecutive items, each a group.
   * @param {number} group
   */
  split(group) {
    const info = this.group(group);
    if (info.children.length <= PART_MAX) return;
    const items = info.children;
    info.children = [];
    const size = Math.ceil(items.length / SPLIT);
    for (let start = 0; start < items.length; start += size) {
      const piece = items.slice(start, start + size);
      const part = this.addGroup({
        id: `part:${info.id}:${start}`,
        kind: "part",
        parent: group,
        label: [`${this.title(piece[0])} … ${this.title(piece[piece.length - 1])}`, `${piece.length} items`],
      });
      for (const item of piece) {
        if (this.isGroup(item)) this.group(item).parent = part;
        else this.parent[item] = part;
        this.group(part).children.push(item);
      }
      this.split(part);
    }
  }

  count() {
    const sizes = this.sums(() => 1);
    this.groups.forEach((group, g) => (group.size = sizes[g]));
  }

  /**
   * Per group (by position in this.groups), the sum of valueOf(node) over the model nodes inside it.
   * @param {(node: number) => number | boolean} valueOf
   */
  sums(valueOf) {
    const n = this.graph.n;
    if (!this.postOrder) {
      // Post-order over the tree: a group's total is known before its parent adds it.
      const order = [];
      const stack = [n];
      for (let group = stack.pop(); group !== undefined; group = stack.pop()) {
        order.push(group);
        for (const child of this.group(group).children) if (this.isGroup(child)) stack.push(child);
      }
      this.postOrder = order.reverse();
    }
    const totals = new Float64Array(this.groups.length);
    for (let i = 0; i < n; i++) {
      const value = valueOf(i);
      if (value) totals[this.parent[i] - n] += Number(value);
    }
    for (const group of this.postOrder) if (group > n) totals[this.group(group).parent - n] += totals[group - n];
    return totals;
  }

  /**
   * Each group's marked nodes (see nodeMark), counted per mark as {mark: count}, or null when
   * it holds none: what a folded group shows so that a mark inside it is seen without opening it.
   */
  countMarks() {
    const graph = this.graph;
    for (const group of this.groups) group.marks = null;
    if (!graph.marked) return;
    const marks = new Array(graph.n);
    let any = false;
    for (let i = 0; i < graph.n; i++) {
      marks[i] = nodeMark(graph.field(i, "nonfinite"), graph.field(i, "diff"));
      any = any || marks[i] !== null;
    }
    if (!any) return;
    for (const mark of MARKS) {
      const totals = this.sums((i) => marks[i] === mark);
      this.groups.forEach((group, g) => {
        if (totals[g]) (group.marks ??= {})[mark] = totals[g];
      });
    }
  }

  /**
   * Expand level by level while at most `budget` items are visible.
   * @param {number} budget
   */
  openWithin(budget) {
    let frontier = [this.graph.n];
    for (;;) {
      const candidates = [];
      // A compiled region's ops stay folded until asked for: its node already stands for them.
      for (const group of frontier) for (const child of this.group(group).children) if (this.isGroup(child) && this.group(child).kind !== "region") candidates.push(child);
      if (!candidates.length) return;
      for (const c of candidates) this.expanded.add(c);
      if (this.visibleItems().length > budget) {
        for (const c of candidates) this.expanded.delete(c);
        return;
      }
      frontier = candidates;
    }
  }

  /** Visible items in tree order, and expanded groups (drawn as boxes), each with its box. */
  view() {
    const items = [];
    const boxes = [];
    const box = new Map();
    const stack = [this.graph.n];
    for (let group = stack.pop(); group !== undefined; group = stack.pop()) {
      const children = this.group(group).children;
      for (let j = children.length - 1; j >= 0; j--) {
        const child = children[j];
        const inside = group === this.graph.n ? -1 : group;
        if (this.isGroup(child) && this.expanded.has(child)) {
          boxes.push(child);
          box.set(child, inside);
          stack.push(child);
        } else {
          items.push(child);
          box.set(child, inside);
        }
      }
    }
    items.reverse();
    return { items, boxes: boxes.reverse(), box };
  }

  visibleItems() {
    return this.view().items;
  }

  /** rep[node] = the visible item standing for the node. */
  representatives() {
    const n = this.graph.n;
    const rep = new Int32Array(n);
    /** @type {[number, number][]} */
    const stack = [[this.graph.n, -1]];
    for (let entry = stack.pop(); entry !== undefined; entry = stack.pop()) {
      const [group, collapsedAs] = entry;
      for (const child of this.group(group).children) {
        const as = collapsedAs >= 0 ? collapsedAs : child;
        if (this.isGroup(child)) stack.push([child, collapsedAs >= 0 || !this.expanded.has(child) ? as : -1]);
        else rep[child] = as;
      }
    }
    return rep;
  }

  /**
   * Make item visible: expand every group above it.
   * @param {number} item
   */
  reveal(item) {
    for (let p = this.parentOf(item); p > this.graph.n; p = this.group(p).parent) this.expanded.add(p);
  }

  /**
   * @param {number} item
   * @returns {number[]}
   */
  ancestors(item) {
    const out = [];
    for (let p = this.parentOf(item); p > this.graph.n; p = this.group(p).parent) out.push(p);
    return out.reverse();
  }
}

/** The marks a node can carry, strongest first: where a non-finite gradient started, then a diff's states. */
export const MARKS = ["nonfinite", "removed", "added", "changed"];

/**
 * A node's mark, as gradexport.formats.labels.node_class picks it, or null.
 * @param {unknown} nonfinite
 * @param {unknown} diff
 * @returns {string | null}
 */
export function nodeMark(nonfinite, diff) {
  if (nonfinite === "origin") return "nonfinite";
  return diff === "added" || diff === "removed" || diff === "changed" ? diff : null;
}

/**
 * An edge's mark: its diff state (not "same"), else its non-finite mark ("origin" or "path"), or null.
 * @param {EdgeAttributes} attributes
 * @returns {string | null}
 */
export function edgeMark(attributes) {
  const diff = attributes.diff;
  if (diff === "added" || diff === "removed" || diff === "changed") return diff;
  return attributes.nonfinite === "origin" || attributes.nonfinite === "path" ? attributes.nonfinite : null;
}

/**
 * @param {Graph} graph
 * @param {number} i
 * @returns {string}
 */
export function nodeTitle(graph, i) {
  const kind = graph.field(i, "kind");
  if (kind === "root") return String(graph.field(i, "root") ?? "root");
  if (kind === "leaf") {
    const names = graph.field(i, "names");
    return names && names.length ? names.join(", ") : "AccumulateGrad";
  }
  if (kind === "none") return "None";
  if (kind === "module") return String(graph.field(i, "module") || "(model)");
  return String(graph.field(i, "op") ?? "?");
}

/** Above this many merged edges between the same two visible items (one a folded group), they draw as one. */
export const BUNDLE_AT = 8;

/**
 * The edges between visible items. Edges between two model nodes stay distinct;
 * edges touching a folded group merge when they have the same ends and indices
 * (as gradexport.collapse merges them), counting how many they stand for. Where
 * more than BUNDLE_AT such merged edges join the same two items, they are bundled
 * into one, its indices the range they span: a stack of folded leaves otherwise sends
 * tens of thousands of parallel labelled edges among a few items to dagre (docs/performance.md).
 * @param {Graph} graph
 * @param {Int32Array} rep per node, the visible item standing for it (Folds.representatives)
 * @returns {VisibleEdge[]}
 */
export function visibleEdges(graph, rep) {
  /** @type {VisibleEdge[]} */
  const out = [];
  /** @type {Map<string, VisibleEdge>} */
  const merged = new Map();
  const n = graph.n;
  for (let e = 0; e < graph.m; e++) {
    const u = rep[graph.src[e]];
    const v = rep[graph.tgt[e]];
    if (u === v) continue;
    const [i, k] = graph.edgeIndices(e);
    if (u < n && v < n) {
      out.push({ from: u, to: v, next: i, input: k, count: 1, edges: [e] });
      continue;
    }
    const key = `${u}|${v}|${i}|${k}`;
    let edge = merged.get(key);
    if (!edge) {
      edge = { from: u, to: v, next: i, input: k, count: 0, edges: [] };
      merged.set(key, edge);
      out.push(edge);
    }
    edge.count++;
    if (edge.edges.length < 64) edge.edges.push(e);
    else edge.more = true;
  }
  return merged.size > BUNDLE_AT ? bundled(out, n) : out;
}

/**
 * `out` with each run of more than BUNDLE_AT merged edges between the same two items replaced by one.
 * @param {VisibleEdge[]} out
 * @param {number} n the number of model nodes: items from n on are groups
 */
function bundled(out, n) {
  /** @type {Map<string, VisibleEdge[]>} */
  const pairs = new Map();
  for (const edge of out) {
    if (edge.from < n && edge.to < n) continue;
    const key = `${edge.from}|${edge.to}`;
    const members = pairs.get(key);
    if (members) members.push(edge);
    else pairs.set(key, [edge]);
  }
  /** @type {Map<VisibleEdge, VisibleEdge | null>} */
  const replaced = new Map();
  for (const members of pairs.values()) {
    if (members.length <= BUNDLE_AT) continue;
    const span = (/** @type {(number | string)[]} */ values) => {
      let low = values[0];
      let high = values[0];
      for (const value of values) {
        if (value < low) low = value;
        if (value > high) high = value;
      }
      return low === high ? low : `${low}…${high}`;
    };
    /** @type {VisibleEdge} */
    const bundle = {
      from: members[0].from,
      to: members[0].to,
      next: span(members.map((edge) => edge.next)),
      input: span(members.map((edge) => edge.input)),
      count: 0,
      edges: [],
      bundled: members.length,
    };
    for (const edge of members) {
      bundle.count += edge.count;
      for (const e of edge.edges) {
        if (bundle.edges.length < 64) bundle.edges.push(e);
        else bundle.more = true;
      }
      if (edge.more) bundle.more = true;
      replaced.set(edge, null);
    }
    replaced.set(members[0], bundle);
  }
  const result = [];
  for (const edge of out) {
    const bundle = replaced.get(edge);
    if (!replaced.has(edge)) result.push(edge);
    else if (bundle) result.push(bundle);
  }
  return result;
}

/**
 * Every node on a path from a root to `target` (its ancestors and itself), as marks.
 * @param {Graph} graph
 * @param {number} target
 */
export function pathMarks(graph, target) {
  const marks = new Uint8Array(graph.n);
  marks[target] = 1;
  const stack = [target];
  for (let v = stack.pop(); v !== undefined; v = stack.pop()) {
    for (let j = graph.inStart[v]; j < graph.inStart[v + 1]; j++) {
      const u = graph.src[graph.inEdges[j]];
      if (!marks[u]) {
        marks[u] = 1;
        stack.push(u);
      }
    }
  }
  return marks;
}

const SEARCHED = ["op", "torch_name", "names", "module", "root", "special", "source", "source_function", "source_code"];

/**
 * Ids of the model nodes and module groups whose op, torch name, parameter names, module, root name or
 * source line (gradexport.capture_source: "model.py:12", a function name, the line's code) contain `text`;
 * on a watch page also the module groups whose flags do ("vanishing", "exploding").
 * @param {Graph} graph
 * @param {Folds} folds
 * @param {string} text
 * @returns {string[]}
 */
export function search(graph, folds, text) {
  const needle = String(text).toLowerCase();
  if (!needle) return [];
  const found = [];
  /** @type {(value: unknown) => boolean} */
  const hit = (value) =>
    typeof value === "string" ? value.toLowerCase().includes(needle) : Array.isArray(value) && value.some(hit);
  // A watch page's flags ("vanishing: ...", "exploding: ...") belong to the flagged layer's group, not to each of its nodes.
  const flags = new Map(Object.entries((graph.data.graph && graph.data.graph.watch_flags) || {}));
  for (const group of folds.groups) {
    if (group.kind === "module" && (hit(group.path) || hit(group.moduleClass) || hit(flags.get(group.path || "")))) found.push(group.id);
  }
  for (let i = 0; i < graph.n; i++) {
    for (const key of SEARCHED) {
      if (hit(graph.field(i, key))) {
        found.push(graph.id(i));
        break;
      }
    }
  }
  return found;
}

/** Gradient colour scale, as gradexport.formats.styles.GradScale: the fixed decades of `bounds`, the same in every graph. */
export class GradScale {
  /**
   * @param {Graph} graph
   * @param {string[]} colors one per step, light theme
   * @param {string} bad the colour of a non-finite gradient
   * @param {number[]} [bounds] the norms where the steps start
   * @param {string[]} [texts] each step's legend text
   * @param {string[] | null} [darkColors] one per step, dark theme (default: `colors`)
   */
  constructor(graph, colors, bad, bounds, texts, darkColors) {
    this.colors = colors;
    this.darkColors = darkColors || colors;
    this.bad = bad;
    this.bounds = bounds || [];
    this.texts = texts || [];
    this.any = false;
    for (const key of Object.keys(graph.data.edge_extra)) {
      const grad = graph.edgeGrad(Number(key));
      if (grad && "norm" in grad) {
        this.any = true;
        break;
      }
    }
  }

  /**
   * The colour step of a gradient: how many bounds its norm reaches; -1 for NaN or infinity.
   * @param {GradRecord} grad
   * @returns {number}
   */
  step(grad) {
    if (isBad(grad)) return -1;
    let step = 0;
    const norm = /** @type {number} */ (grad.norm); // isBad: a finite number
    while (step < this.bounds.length && norm >= this.bounds[step]) step++;
    return Math.min(step, this.colors.length - 1);
  }

  /**
   * @param {number} step
   */
  width(step) {
    return 1.5 + (2 * step) / (this.colors.length - 1);
  }

  /**
   * The colour of a step as a CSS variable, so that it follows the theme (see `cssRules`).
   * @param {number} step
   */
  color(step) {
    return `var(--gx-grad-${step})`;
  }

  /** CSS that defines the step colours: light theme, then dark (where the light steps would vanish). */
  cssRules() {
    const vars = (/** @type {string[]} */ colors) => colors.map((c, i) => `--gx-grad-${i}: ${c};`).join(" ");
    return `.gx { ${vars(this.colors)} } .gx[data-theme="dark"] { ${vars(this.darkColors)} }`;
  }

  /**
   * The colour and width of a visible edge: its largest gradient, red if any is not finite.
   * @param {Graph} graph
   * @param {{edges: number[]}} edge
   * @returns {{color: string, width: number, bad: boolean} | null}
   */
  style(graph, edge) {
    /** @type {number | null} */
    let worst = null;
    for (const e of edge.edges) {
      const grad = graph.edgeGrad(e);
      if (!grad || !("norm" in grad)) continue;
      const s = this.step(grad);
      if (s < 0) return { color: this.bad, width: 2.5, bad: true };
      worst = worst === null ? s : Math.max(worst, s);
    }
    if (worst === null) return null;
    return { color: this.color(worst), width: this.width(worst), bad: false };
  }
}

/**
 * @param {GradRecord} grad
 */
export function isBad(grad) {
  const norm = grad.norm;
  return Boolean(grad.has_nan || grad.has_inf) || typeof norm !== "number" || !Number.isFinite(norm);
}
