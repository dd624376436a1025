// Making elements. Names are data: every text goes through textContent or an attribute, never through markup.
import { formatValue, printable } from "./text.js";

const SVG = "http://www.w3.org/2000/svg";

/** An element (`svg:` in front of the tag for an SVG one) with these attributes and this text. */
export function el(tag, attributes = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/** A record as a list of its keys and values, printable. */
export function table(record) {
  const dl = el("dl", { class: "gx-attributes" });
  for (const [key, value] of Object.entries(record)) {
    dl.append(el("dt", {}, printable(key)), el("dd", {}, formatValue(value)));
  }
  return dl;
}
