// A gradexport.watch history on the page (gradexport.to_html(history)): a step scrubber that recolours the
// edges entering each module by that step's gradient norm, on one scale fixed across all steps, and a small
// chart of a module's norm over the steps in the panel. The data: the graph attribute watch_steps, each
// entering edge's watch_norms (one per step), and watch_modules {module path: norms per step}.
// Writes: no viewer field.
// Changes: inside viewer.watch its index, label and input; the grad of the watched edges' attributes in viewer.data.edge_extra (the step shown); the top of viewer.legend.
import { refresh } from "./draw.js";
import { el } from "./dom.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/**
 * @typedef {object} WatchState
 * @property {number[]} steps the recorded training steps
 * @property {Record<string, any>[]} edges the attributes of the edges with a norm per step; showStep writes their grad
 * @property {number} index the step shown; showStep writes it
 * @property {Record<string, (number | null)[]>} modules per module path, its norm per step
 * @property {HTMLElement} [label] the step's label, set by mountWatch
 * @property {HTMLInputElement} [input] the scrubber, set by mountWatch
 */

/**
 * The scrubber's state, or null without a history. The colours need no fitting to the history: the
 * gradient scale is fixed in decades of the norm (GradScale), so every step and every page share it.
 * @param {Viewer} viewer
 * @returns {WatchState | null}
 */
export function watchState(viewer) {
  const steps = viewer.data.graph.watch_steps;
  if (!Array.isArray(steps) || !steps.length || !viewer.scale) return null;
  const edges = Object.values(viewer.data.edge_extra).filter((extra) => extra && Array.isArray(extra.watch_norms));
  return { steps, edges, index: steps.length - 1, modules: viewer.data.graph.watch_modules || {} };
}

/**
 * The scrubber, above the legend.
 * @param {Viewer} viewer
 */
export function mountWatch(viewer) {
  const state = viewer.watch;
  if (!state) return;
  const label = el("div", { class: "gx-legend-title gx-watch-step" }, `step ${state.steps[state.index]}`);
  const input = el("input", { type: "range", min: 0, max: state.steps.length - 1, value: state.index, class: "gx-watch-scrubber", "aria-label": "training step" });
  input.addEventListener("input", () => showStep(viewer, Number(input.value)));
  state.label = label;
  state.input = input;
  viewer.legend.prepend(label, input);
}

/**
 * Show recorded step number `index` (0 for the first recorded); a Promise of the per-node values once drawn.
 * @param {Viewer} viewer
 */
export function showStep(viewer, index) {
  const state = viewer.watch;
  if (!state) throw new Error("iteration: this page shows no gradexport.watch history");
  if (!Number.isInteger(index) || index < 0 || index >= state.steps.length) {
    throw new Error(`iteration: no recorded step at position ${JSON.stringify(index)}; there are ${state.steps.length}`);
  }
  state.index = index;
  for (const extra of state.edges) {
    const norm = extra.watch_norms[index];
    extra.grad = norm === null || norm === undefined ? undefined : { norm };
  }
  if (state.label) state.label.textContent = `step ${state.steps[index]}`;
  if (state.input) state.input.value = String(index);
  return refresh(viewer).then(() => nodeValues(viewer, state));
}

/**
 * What the page shows at the current step: every node of a watched module with its module's norm.
 * @param {Viewer} viewer
 * @param {WatchState} state the viewer's watch
 */
export function nodeValues(viewer, state) {
  const { graph } = viewer;
  const values = {};
  for (let i = 0; i < graph.n; i++) {
    const module = graph.field(i, "module");
    const norms = typeof module === "string" ? state.modules[module] : undefined;
    if (norms) values[graph.id(i)] = norms[state.index];
  }
  return values;
}

/**
 * A small chart of `norms` over the steps (log scale), the current step marked.
 * @param {Viewer} viewer
 */
export function normChart(viewer, module) {
  const state = viewer.watch;
  const norms = state && state.modules[module];
  if (!norms) return null;
  const logs = norms.map((norm) => (typeof norm === "number" && norm > 0 && Number.isFinite(norm) ? Math.log10(norm) : null));
  const known = logs.filter((value) => value !== null);
  if (!known.length) return null;
  const [w, h] = [200, 48];
  const low = Math.min(...known);
  const high = Math.max(...known);
  const x = (i) => (norms.length === 1 ? w / 2 : (i * w) / (norms.length - 1));
  const y = (value) => (high === low ? h / 2 : h - 2 - ((value - low) * (h - 4)) / (high - low));
  const points = logs.map((value, i) => (value === null ? null : `${x(i).toFixed(1)},${y(value).toFixed(1)}`)).filter(Boolean);
  const svg = el("svg:svg", { class: "gx-watch-chart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": `gradient norm of ${module} over the steps` });
  svg.appendChild(el("svg:polyline", { points: points.join(" "), fill: "none", stroke: "currentColor", "stroke-width": 1.5 }));
  svg.appendChild(el("svg:line", { x1: x(state.index), x2: x(state.index), y1: 0, y2: h, stroke: "#d9480f", "stroke-width": 1 }));
  const box = el("div", { class: "gx-watch" });
  box.append(el("h3", {}, `‖gradient‖ at ${module || "(model)"}'s output, steps ${state.steps[0]}–${state.steps[state.steps.length - 1]} (log)`), svg);
  box.appendChild(el("p", { class: "gx-hint" }, `${(10 ** low).toPrecision(2)} … ${(10 ** high).toPrecision(2)}`));
  return box;
}
