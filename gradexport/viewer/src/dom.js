// Making elements. Names are data: every text goes through textContent or an attribute, never through markup.
// Writes: no viewer field.
// Changes: nothing: it makes elements.
import { formatValue, printable } from "./text.js";

const SVG = "http://www.w3.org/2000/svg";
const FONT = "12px Helvetica, Arial, sans-serif";

/** @type {CanvasRenderingContext2D | null} */
let measure = null;

/**
 * The width of `text` in the drawing's font, in px.
 * @param {string} text
 */
export function textWidth(text) {
  if (!measure) {
    measure = /** @type {CanvasRenderingContext2D} */ (document.createElement("canvas").getContext("2d"));
    measure.font = FONT;
  }
  return measure.measureText(text).width;
}

/**
 * An element (`svg:` in front of the tag for an SVG one) with these attributes and this text.
 * @template {string} Tag
 * @param {Tag} tag
 * @param {Record<string, unknown>} [attributes]
 * @param {string} [text]
 * @returns {Tag extends `svg:${infer Name extends keyof SVGElementTagNameMap}` ? SVGElementTagNameMap[Name] : Tag extends keyof HTMLElementTagNameMap ? HTMLElementTagNameMap[Tag] : HTMLElement}
 */
export function el(tag, attributes = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  // The element createElement(NS) made for this tag: the type above names it.
  return /** @type {any} */ (node);
}

/** A record as a list of its keys and values, printable. */
export function table(record) {
  const dl = el("dl", { class: "gx-attributes" });
  for (const [key, value] of Object.entries(record)) {
    dl.append(el("dt", {}, printable(key)), el("dd", {}, formatValue(value)));
  }
  return dl;
}
