// The request the layout (layout.js) answers, made from what the folds leave visible: each visible item as a
// node of the size its lines need, each opened group as a box around its items, each visible edge with the
// size of its label. No DOM here: the width of a text comes in as a function (draw.js measures it on a canvas).
// Writes: no viewer field.
// Changes: the lines of each visible edge it is given (pure: no DOM).
import { BAR, LINE, PAD_X, PAD_Y, boxTitle, edgeLines } from "./looks.js";

/** Below this width (px, before padding) no node is drawn, however short its text. */
const MIN_TEXT_WIDTH = 24;
/** An edge label's line height and its padding. */
const EDGE_LINE = 14;

/**
 * @typedef {import("./looks.js").LookContext} LookContext
 * @typedef {import("./looks.js").Look} Look
 * @typedef {import("./model.js").View} View
 * @typedef {import("./layout.js").LayoutRequest} LayoutRequest
 */

/**
 * The size of a node showing `lines` (and the saved-bytes bar below them when `bar`).
 * @param {string[]} lines
 * @param {boolean} bar
 * @param {(text: string) => number} measure
 */
function nodeSize(lines, bar, measure) {
  return {
    w: Math.ceil(Math.max(MIN_TEXT_WIDTH, ...lines.map((line) => measure(line))) + 2 * PAD_X),
    h: lines.length * LINE + 2 * PAD_Y + (bar ? BAR + 2 : 0),
  };
}

/**
 * The size of an edge label of `lines`, as draw.js draws it.
 * @param {string[]} lines
 * @param {(text: string) => number} measure
 */
export function edgeLabelSize(lines, measure) {
  return { w: Math.max(...lines.map((line) => measure(line))) + 6, h: lines.length * EDGE_LINE + 2 };
}

/**
 * The layout request for `view` (Folds.view plus the edges and representatives): node ids "i<item>", box ids
 * "b<group>", edge ids "e<position in view.edges>"; sets each edge's `lines` (edgeLines) on the way.
 * @param {LookContext} page what the looks depend on (the Viewer is one)
 * @param {View} view what is visible
 * @param {Map<number, Look>} looks itemLook of each visible item
 * @param {(text: string) => number} measure the width of a text in px
 * @returns {LayoutRequest}
 * @example
 * // With 7 px a character, a visible node 0 outside any box whose look has the one line "MulBackward0":
 * // layoutRequest(page, view, looks, (text) => 7 * text.length).nodes[0] → {id: "i0", box: null, w: 104, h: 28}
 */
export function layoutRequest(page, view, looks, measure) {
  const { folds } = page;
  const { items, boxes, box, edges } = view;
  // `looks` holds every visible item.
  const lookOf = (/** @type {number} */ item) => /** @type {Look} */ (looks.get(item));
  const boxId = (/** @type {number | undefined} */ b) => (b === undefined || b < 0 ? null : "b" + b);
  return {
    direction: page.options.direction || "TB",
    nodes: items.map((item) => ({ id: "i" + item, box: boxId(box.get(item)), ...nodeSize(lookOf(item).lines, Boolean(page.saved), measure) })),
    boxes: boxes.map((b) => ({
      id: "b" + b,
      box: boxId(box.get(b)),
      w: measure(boxTitle(folds, b)) + 2 * PAD_X,
      h: LINE,
      compound: folds.group(b).kind === "module",
    })),
    edges: edges.map((edge, j) => {
      edge.lines = edgeLines(page, edge);
      // A bundle's position is a range ("0…9"): it sorts as its first.
      const next = typeof edge.next === "number" ? edge.next : parseInt(String(edge.next), 10) || 0;
      return { id: "e" + j, from: "i" + edge.from, to: "i" + edge.to, next, ...edgeLabelSize(edge.lines, measure) };
    }),
  };
}
