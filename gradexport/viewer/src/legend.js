// The legend over the canvas: the node kinds, then what this graph carries: non-finite marks and their path,
// a diff's marks, the saved-bytes bar, the gradient-norm colour ramp.
// Writes: no viewer field.
// Changes: the children of viewer.legend.
import { el } from "./dom.js";
import { BAR_COLOR } from "./looks.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

function swatch(fill, stroke) {
  const span = el("span", { class: "gx-swatch" });
  span.style.background = fill;
  if (stroke !== undefined) span.style.borderColor = stroke;
  return span;
}

/** @param {Viewer} viewer */
export function drawLegend(viewer) {
  const { legend, styles, words, markColors, scale } = viewer;
  legend.replaceChildren();
  for (const [cls, name] of [["root", "root"], ["backward", "backward"], ["special", "special"], ["leaf", "leaf (AccumulateGrad)"], ["module", "folded module"]]) {
    const row = el("div", { class: "gx-legend-row" });
    row.append(swatch(styles[cls].fill, styles[cls].stroke), document.createTextNode(name));
    legend.appendChild(row);
  }
  const graphAttributes = viewer.data.graph || {};
  if ("nonfinite" in graphAttributes) {
    legend.appendChild(el("div", { class: "gx-legend-title" }, "non-finite gradient (find_nonfinite)"));
    legendRow(viewer, "nonfinite", words.nonfinite);
    legendRow(viewer, null, "its path to the parameters", markColors.path);
  }
  if ("diff" in graphAttributes) {
    legend.appendChild(el("div", { class: "gx-legend-title" }, "diff: nodes and edges (+ − ~ after i→k)"));
    for (const mark of ["added", "removed", "changed"]) legendRow(viewer, mark, words[mark], markColors[mark]);
  }
  if (viewer.saved) {
    const row = el("div", { class: "gx-legend-row", "data-legend": "saved_bytes" });
    const bar = el("span", { class: "gx-line-swatch" });
    bar.style.background = BAR_COLOR;
    row.append(bar, document.createTextNode("saved bytes (the largest shown: a full bar)"));
    legend.appendChild(row);
  }
  if (!scale) return;
  legend.appendChild(el("div", { class: "gx-legend-title" }, "‖gradient‖ on the edge (the same scale in every graph)"));
  scale.colors.forEach((_, step) => {
    const row = el("div", { class: "gx-legend-row", "data-legend": `grad-${step}` });
    const line = el("span", { class: "gx-line-swatch" });
    line.style.background = scale.color(step);
    line.style.height = `${scale.width(step)}px`;
    row.append(line, document.createTextNode(scale.texts[step] || ""));
    legend.appendChild(row);
  });
  const bad = el("div", { class: "gx-legend-row" });
  bad.append(swatch(scale.bad), document.createTextNode("NaN or infinite"));
  legend.appendChild(bad);
}

/**
 * A legend row: a node swatch of style `cls` and/or an edge swatch of `color`, then `text`.
 * @param {Viewer} viewer
 * @param {string | null} cls
 * @param {string} text
 * @param {string} [color]
 */
function legendRow(viewer, cls, text, color) {
  const row = el("div", { class: "gx-legend-row", "data-legend": cls || "edge" });
  if (cls) {
    const style = viewer.styles[cls];
    const node = swatch(style.fill, style.stroke);
    if (style.dashed) node.style.borderStyle = "dashed";
    row.appendChild(node);
  }
  if (color) {
    const line = el("span", { class: "gx-line-swatch" });
    line.style.background = color;
    row.appendChild(line);
  }
  row.appendChild(document.createTextNode(text));
  viewer.legend.appendChild(row);
}
