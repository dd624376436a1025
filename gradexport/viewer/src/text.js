// Texts as the Python writers make them (gradexport.formats.labels): tensor shapes, byte counts,
// a node's lines and attribute values, each printable (control characters as escapes).
// Writes: no viewer field.
// Changes: nothing (pure: no DOM).
import { REGION_OP } from "./regions.js";

/**
 * @param {unknown} shape
 */
function pyTuple(shape) {
  if (!Array.isArray(shape)) return String(shape);
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
}

// As gradexport.formats.labels.tensor_text.
/**
 * @param {Record<string, any>} record
 */
export function tensorText(record) {
  const parts = "shape" in record ? [pyTuple(record.shape)] : [];
  if (record.dtype !== undefined && record.dtype !== "float32") parts.push(String(record.dtype));
  if (record.device !== undefined && record.device !== "cpu") parts.push(String(record.device));
  return parts.join(" ");
}

// As gradexport.formats.labels.printable: control characters as escapes.
/**
 * @param {unknown} text
 * @returns {string}
 */
export function printable(text) {
  // Matching control characters is what this does: the rule guards against them in a pattern by mistake.
  // The u flag makes a character beyond U+FFFF (an emoji) one character, not two surrogates to escape.
  // eslint-disable-next-line no-control-regex
  return String(text).replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]/gu, (c) => {
    /** @type {Record<string, string>} */
    const escapes = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };
    const code = c.charCodeAt(0);
    return escapes[c] || (code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0"));
  });
}

/** A label line's most characters (gradexport.formats.labels.MAX_LINE_CHARS). */
const MAX_LINE_CHARS = 200;

/**
 * As gradexport.formats.labels.shorten: `line` cut to MAX_LINE_CHARS characters (code points, as Python
 * counts them) with a visible "…" when longer.
 * @param {string} line
 */
export function shorten(line) {
  const characters = [...line];
  return characters.length <= MAX_LINE_CHARS ? line : characters.slice(0, MAX_LINE_CHARS - 1).join("") + "…";
}

/**
 * As gradexport.formats.labels.module_title: "layer1.0: BasicBlock", the model's class for "", "(model)" without one.
 * @param {string} path
 * @param {Map<string, string>} classes the graph's module_classes
 */
export function moduleTitle(path, classes) {
  const className = classes.get(path);
  const title = path === "" ? className || "(model)" : className ? `${path}: ${className}` : path;
  return shorten(printable(title));
}

/**
 * A gradient norm in 3 significant digits without trailing zeros: 0.5, 100, 0.00001, 3.65e-10 (a zero is
 * dropped from the mantissa only, never from an exponent or a whole number).
 * @param {number} norm
 */
export function normText(norm) {
  const [mantissa, exponent] = norm.toPrecision(3).split("e");
  const trimmed = mantissa.includes(".") ? mantissa.replace(/\.?0+$/, "") : mantissa;
  return exponent === undefined ? trimmed : `${trimmed}e${exponent}`;
}

// As gradexport.formats.labels.byte_text.
/**
 * @param {number} count
 */
export function byteText(count) {
  let size = Number(count);
  if (size < 1024) return `${Math.trunc(size)} B`;
  for (const unit of ["KiB", "MiB"]) {
    size /= 1024;
    if (size < 1024) return `${size.toFixed(1)} ${unit}`;
  }
  return `${(size / 1024).toFixed(1)} GiB`;
}

/**
 * As gradexport.formats.labels.node_lines, without saved tensors or module lines (the panel shows those): the
 * marks line ("#k", the mark's words), the node's own lines, then its saved bytes.
 * @param {Record<string, any>} attributes the node's
 * @param {Record<string, any>} options the page's (exec_order, saved_bytes)
 * @param {Record<string, string>} words each mark's words
 * @param {Map<string, string>} classes the graph's module_classes, for a folded module's title
 * @returns {string[]}
 */
export function nodeLines(attributes, options, words, classes) {
  const marks = [];
  if (options.exec_order && attributes.exec_order !== undefined) marks.push(`#${attributes.exec_order}`);
  if (attributes.nonfinite === "origin") marks.push(words.nonfinite);
  const diff = attributes.diff;
  if (diff === "added" || diff === "removed") marks.push(words[diff]);
  if (diff === "changed") {
    const changes = attributes.changes && typeof attributes.changes === "object" ? Object.keys(attributes.changes) : [];
    marks.push(changes.length ? `${words.changed}: ${changes.join(", ")}` : words.changed);
  }
  const lines = marks.length ? [printable(marks.join(" "))] : [];
  lines.push(...kindLines(attributes, classes));
  // The page's own names for the node (gradexport.backward.steps.name_nodes), as its code writes them.
  if (Array.isArray(attributes.variables) && attributes.variables.length) lines.push(shorten(printable(attributes.variables.map(String).join(", "))));
  if (options.saved_bytes && attributes.saved_bytes !== undefined) {
    const shared = attributes.saved_bytes_shared || 0;
    lines.push(`saved ${byteText(attributes.saved_bytes)}` + (shared ? ` (+${byteText(shared)} shared)` : ""));
  }
  return lines;
}

/**
 * @param {Record<string, any>} attributes
 * @param {Map<string, string>} classes
 * @returns {string[]}
 */
function kindLines(attributes, classes) {
  const kind = attributes.kind;
  if (kind === "none") return ["None"];
  if (kind === "module") {
    const count = attributes.num_nodes ?? "?";
    return [moduleTitle(String(attributes.module ?? ""), classes), `folded: ${count} node${count === 1 ? "" : "s"}`];
  }
  const lines = [];
  if (kind === "root") lines.push(String(attributes.root ?? "root"));
  else if (kind === "leaf") {
    if (attributes.names && attributes.names.length) lines.push(attributes.names.map(String).join(", "));
  } else {
    lines.push(String(attributes.op ?? "?"));
    if (attributes.special) lines.push(`special: ${attributes.special}`);
    if (kind === REGION_OP) lines.push(...regionOpLines(attributes));
  }
  if (kind === "root" || kind === "leaf") lines.push(tensorText(attributes));
  return lines.filter(Boolean).map((line) => shorten(printable(line)));
}

/**
 * An op inside a compiled region (regions.js): the forward op it differentiates and its line, and where its result leaves.
 * @param {Record<string, any>} attributes
 * @returns {string[]}
 */
function regionOpLines(attributes) {
  const lines = [];
  const where = typeof attributes.source === "string" ? attributes.source.slice(attributes.source.lastIndexOf("/") + 1) : "";
  const made = [attributes.forward_op, where].filter((part) => typeof part === "string" && part).join(" ");
  if (made) lines.push(made);
  if (typeof attributes.returns === "number") lines.push(`→ next_functions[${attributes.returns}]`);
  return lines;
}

/**
 * An attribute's value on one line: a string as it is, anything else as compact JSON.
 * @param {unknown} value
 * @returns {string}
 */
export function formatValue(value) {
  return typeof value === "string" ? printable(value) : printable(JSON.stringify(value, null, 1).replace(/\n\s*/g, " "));
}
