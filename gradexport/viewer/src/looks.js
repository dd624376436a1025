// What each drawn thing looks like, worked out before the layout (which needs the sizes): a node's or a
// folded group's class, lines and mark outline; an edge's label lines and mark; a box's title; the outline
// of each node shape. No DOM here (draw.js measures the texts). Node fills come from the page data (gradexport.formats.styles).
// Writes: no viewer field.
// Changes: the mark of each visible edge it is given (pure: no DOM).
import { MARKS, edgeMark, nodeMark } from "./model.js";
import { byteText, nodeLines, normText, printable, shorten, tensorText } from "./text.js";

export const LINE = 16;
export const PAD_X = 10;
export const PAD_Y = 6;
/** The bar under a node that shows its saved bytes (option saved_bytes). */
export const BAR = 4;
export const BAR_COLOR = "#5e35b1";

/**
 * What the looks depend on: the graph and its folds, the page's options and words. The Viewer is one; so is a
 * plain object in the unit tests (tests/js).
 * @typedef {object} LookContext
 * @property {import("./model.js").Graph} graph
 * @property {import("./model.js").Folds} folds
 * @property {Record<string, any>} options the page's diagram options (edge_shapes, exec_order, saved_bytes, direction)
 * @property {Float64Array | null} saved per group, the saved bytes inside it; null without option saved_bytes
 * @property {object | null} scale the gradient scale; null where no edge carries a gradient's norm
 * @property {Record<string, string>} words the words of each mark ("+ added", ...)
 * @property {Record<string, string>} markColors the colour of each edge mark
 *
 * A visible item's look.
 * @typedef {object} Look
 * @property {string} cls the node style it takes: a node's kind or mark, "fold" or "module" for a folded group
 * @property {string[]} lines its text, printable
 * @property {string | null} mark the mark its outline shows
 * @property {number | undefined} bytes its saved bytes, where shown
 * @property {import("./model.js").Group} [group] a folded group's
 */

/**
 * @param {Record<string, any>} attributes
 * @returns {string}
 */
function nodeClass(attributes) {
  const mark = nodeMark(attributes.nonfinite, attributes.diff);
  if (mark) return mark;
  const kind = attributes.kind ?? "backward";
  if (kind === "backward" && attributes.special) return "special";
  return ["root", "backward", "leaf", "none", "module"].includes(kind) ? kind : "backward";
}

/**
 * The outline a group (folded, or the box of an opened one) takes for the marks inside: non-finite first, else a diff's.
 * @param {import("./model.js").Group} group
 * @returns {string | null}
 */
export function groupMark(group) {
  const marks = group.marks;
  if (!marks) return null;
  if (marks.nonfinite) return "nonfinite";
  const diffs = ["removed", "added", "changed"].filter((mark) => marks[mark]);
  // A group that holds added and removed nodes has changed.
  return diffs.length === 1 ? diffs[0] : diffs.length ? "changed" : null;
}

/**
 * The line a folded group shows for the marked nodes inside it: "non-finite gradient starts inside", "+2 added · −1 removed".
 * @param {import("./model.js").Group} group
 * @param {Record<string, string>} words
 */
function marksInside(group, words) {
  const marks = group.marks;
  if (!marks) return null;
  const parts = [];
  if (marks.nonfinite) parts.push(`${words.nonfinite.replace(/ here$/, "")} inside`);
  for (const mark of ["added", "removed", "changed"]) {
    const word = words[mark];
    if (marks[mark]) parts.push(`${word[0]}${marks[mark]} ${word.slice(2)}`);
  }
  return parts.join(" · ");
}

/**
 * A visible item's look: {cls, lines, mark, bytes}, and its group if it is a folded one.
 * @param {LookContext} viewer
 * @param {number} item
 * @returns {Look}
 */
export function itemLook(viewer, item) {
  const { folds, graph } = viewer;
  if (folds.isGroup(item)) {
    const group = folds.group(item);
    const lines = [...group.label];
    if (group.kind === "module") lines.push(group.size === 1 ? "1 node" : `${group.size} nodes`);
    const inside = marksInside(group, viewer.words);
    if (inside) lines.push(inside);
    const bytes = viewer.saved ? viewer.saved[item - graph.n] : undefined;
    if (bytes !== undefined) lines.push(`saved ${byteText(bytes)}`);
    return { cls: group.kind === "module" ? "module" : "fold", lines: lines.map(printable), group, mark: groupMark(group), bytes };
  }
  const attributes = graph.attributes(item);
  const cls = nodeClass(attributes);
  const bytes = viewer.saved && typeof attributes.saved_bytes === "number" ? attributes.saved_bytes : undefined;
  return { cls, lines: nodeLines(attributes, viewer.options, viewer.words, viewer.folds.classes), mark: MARKS.includes(cls) ? cls : null, bytes };
}

/**
 * The mark of a visible edge: the strongest mark among the graph's edges it stands for, and the sign to write.
 * @param {LookContext} viewer
 * @param {import("./model.js").VisibleEdge} edge
 */
function edgeLook(viewer, edge) {
  const { graph, words } = viewer;
  if (!graph.marked) return null;
  const found = new Set(edge.edges.map((e) => edgeMark(graph.edgeAttributes(e))).filter((mark) => mark !== null));
  if (!found.size) return null;
  // edgeMark gives one of these five, so one is found.
  const mark = /** @type {string} */ (["origin", "path", "removed", "added", "changed"].find((m) => found.has(m)));
  const diffs = [...found].filter((m) => words[m]);
  const sign = diffs.length === 1 ? words[diffs[0]][0] : diffs.length ? "±" : "";
  return { mark, color: viewer.markColors[mark], sign };
}

/**
 * The label lines of a visible edge ("i→k ×count", its tensor, its gradient's norm); sets edge.mark.
 * @param {LookContext} viewer
 * @param {import("./model.js").VisibleEdge} edge
 * @returns {string[]}
 */
export function edgeLines(viewer, edge) {
  // An edge inside a compiled region (regions.js) carries a value of its backward graph, not next_functions indices.
  const carried = edge.edges.map((e) => viewer.graph.edgeAttributes(e).carries).filter((value) => typeof value === "string");
  let first = carried.length ? printable(shorten([...new Set(carried)].join(", "))) : `${edge.next}→${edge.input}`;
  if (edge.count > 1) first += ` ×${edge.count}`;
  edge.mark = edgeLook(viewer, edge);
  if (edge.mark && edge.mark.sign) first += ` ${edge.mark.sign}`;
  const lines = [first];
  if (edge.edges.length === 1) {
    const attributes = viewer.graph.edgeAttributes(edge.edges[0]);
    if (viewer.options.edge_shapes && "shape" in attributes) lines.push(printable(tensorText(attributes)));
    const grad = viewer.scale ? attributes.grad : null;
    if (grad && typeof grad === "object" && "norm" in grad) {
      const norm = typeof grad.norm === "number" ? normText(grad.norm) : String(grad.norm);
      lines.push(`‖g‖ ${norm}`);
    }
  }
  return lines;
}

/**
 * The title of the box an opened group `b` draws around its items.
 * @param {import("./model.js").Folds} folds
 * @param {number} b an opened group
 */
export function boxTitle(folds, b) {
  const group = folds.group(b);
  return printable(group.kind === "module" ? `${group.label[0]} ▾` : `${group.label[0]} · ${group.label[1]} ▾`);
}

/**
 * The SVG path of a node shape (a style's `shape`) in the rectangle x, y, w, h.
 * @param {string} shape
 * @param {number} x
 * @param {number} y
 * @param {number} w
 * @param {number} h
 */
export function shapePath(shape, x, y, w, h) {
  const r = (/** @type {number} */ radius) =>
    `M${x + radius},${y} H${x + w - radius} A${radius},${radius} 0 0 1 ${x + w},${y + radius} V${y + h - radius} ` +
    `A${radius},${radius} 0 0 1 ${x + w - radius},${y + h} H${x + radius} A${radius},${radius} 0 0 1 ${x},${y + h - radius} ` +
    `V${y + radius} A${radius},${radius} 0 0 1 ${x + radius},${y} Z`;
  if (shape === "stadium") return r(h / 2);
  if (shape === "rounded") return r(6);
  if (shape === "hexagon") {
    const c = Math.min(10, w / 4);
    return `M${x + c},${y} H${x + w - c} L${x + w},${y + h / 2} L${x + w - c},${y + h} H${x + c} L${x},${y + h / 2} Z`;
  }
  if (shape === "note") return `M${x},${y} H${x + w - 8} L${x + w},${y + 8} V${y + h} H${x} Z`;
  if (shape === "subroutine") return `M${x},${y} H${x + w} V${y + h} H${x} Z M${x + 6},${y} V${y + h} M${x + w - 6},${y} V${y + h}`;
  return `M${x},${y} H${x + w} V${y + h} H${x} Z`;
}
