// A flight-recorder bundle's page, the parts that need no DOM: the header's lines from the bundle's summary
// (gradexport/api/export.py, bundle_page_graphs) and the text of the page each step's viewer runs in.
// Writes: no viewer field.
// Changes: nothing (pure: no DOM).

/**
 * What the bundle page's header shows (gradexport.api.export.bundle_page_graphs).
 * @typedef {object} BundleSummary
 * @property {number} bad_step
 * @property {string[]} reasons
 * @property {number | null} healthy_step
 * @property {number} healthy_every
 * @property {string | null} divergence the divergent node's id in the bad step's graph
 * @property {string | null} divergence_op
 * @property {string | null} divergence_source "PATH:LINE: code" of the forward line that made it
 * @property {number | null} divergence_step its position in the bad step's backward (0 for the first node run)
 * @property {number | null} healthy_divergence_step its position in the healthy step's backward
 * @property {{op: string, cause: string, candidates?: string[], source: string | null, source_code: string | null, module: string | null, output: string} | null} forward_origin
 *   cause "made", "input", or "unsure" (found in the loss function from what its graph held: one of `candidates` made it)
 * @property {boolean} reproduced
 */

/**
 * The header's lines, in order: [class, text] pairs (names are data: the caller sets them as textContent).
 * @param {BundleSummary} summary
 * @returns {[string, string][]}
 */
export function headerLines(summary) {
  /** @type {[string, string][]} */
  const lines = [["gx-bundle-title", `bad step ${summary.bad_step}: ${summary.reasons.join("; ")}`]];
  if (summary.divergence !== null) {
    const where = summary.divergence_source ? `, made by the forward line ${summary.divergence_source}` : "";
    lines.push(["gx-bundle-divergence", `first node where the steps diverge: ${summary.divergence_op} (${summary.divergence})${where}`]);
  } else {
    lines.push(["gx-bundle-divergence", "no node of the backward diverges from the healthy step"]);
  }
  const origin = summary.forward_origin;
  if (origin) {
    const module = origin.module ? ` in ${origin.module}` : "";
    const where = origin.source ? ` at ${origin.source}: ${origin.source_code || ""}` : "";
    lines.push(["gx-bundle-origin", `forward origin: ${origin.op}${module}${where} (${originCause(origin)}; it returned ${origin.output})`]);
  }
  const healthy = summary.healthy_step === null ? "no healthy step was kept before it" : `healthy step ${summary.healthy_step}, the last the recorder kept (it keeps one every ${summary.healthy_every})`;
  lines.push(["gx-bundle-healthy", `beside it: ${healthy}`]);
  if (!summary.reproduced) lines.push(["gx-bundle-warning", "the re-run of the step did not give the training step's gradients bit for bit"]);
  return lines;
}

/**
 * What the header says of how the forward origin came by its NaN or Inf.
 * @param {NonNullable<BundleSummary["forward_origin"]>} origin
 */
function originCause(origin) {
  if (origin.cause === "made") return "its inputs were finite";
  if (origin.cause === "unsure") {
    return `made in the loss function by one of ${(origin.candidates || []).join(", ")}: the graph kept no value between them`;
  }
  return "an input already held NaN or Inf";
}

/**
 * `text` safe inside a <script> element: <, > and & as \u escapes (JSON means the same by them).
 * @param {string} text
 */
function scriptSafe(text) {
  return text.replace(/[<>&]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}

/**
 * The page of one step's viewer: the page gradexport.to_html writes, with `data` (the page data of one graph)
 * and `script` (the viewer's own script, which this page runs too).
 * @param {string} title
 * @param {unknown} data
 * @param {string} script
 */
export function viewerPage(title, data, script) {
  const escaped = title.replace(/[&<>"]/g, (c) => `&#${c.charCodeAt(0)};`);
  return (
    `<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n<title>${escaped}</title>\n</head>\n<body>\n` +
    `<div id="gradexport-viewer"></div>\n<script type="application/json" id="gradexport-data">${scriptSafe(JSON.stringify(data))}</script>\n` +
    `<script>\n${script}</script>\n</body>\n</html>\n`
  );
}
