// A gradexport.watch history on the page (gradexport.to_html(history)): a step scrubber that recolours the
// edges entering each module by that step's gradient norm, on one scale fixed across all steps, and a small
// chart of a module's or a parameter's norm over the steps in the panel. The page opens on the vanishing
// layer whose gradient is smallest. The data: the graph attributes watch_steps, watch_modules {module path:
// norms per step}, watch_params {parameter name: its .grad's norm per step} and watch_flags {module path:
// reasons}, and each entering edge's watch_norms (one per step).
// Writes: no viewer field.
// Changes: inside viewer.watch its index, label and input; the grad of the watched edges' attributes in viewer.data.edge_extra (the step shown); the top of viewer.legend; the folds and the selection (showVanishing).
import { refresh } from "./draw.js";
import { el, table } from "./dom.js";
import { centerOn } from "./selection.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/**
 * @typedef {object} WatchState
 * @property {number[]} steps the recorded training steps
 * @property {Record<string, any>[]} edges the attributes of the edges with a norm per step; showStep writes their grad
 * @property {number} index the step shown; showStep writes it
 * @property {Record<string, (number | null)[]>} modules per module path, its norm per step
 * @property {Record<string, (number | null)[]>} params per parameter name, its gradient's norm per step
 * @property {Record<string, string[]>} flags per flagged module path, the reasons ("vanishing: ...")
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
  const { watch_modules: modules, watch_params: params, watch_flags: flags } = viewer.data.graph;
  return { steps, edges, index: steps.length - 1, modules: modules || {}, params: params || {}, flags: flags || {} };
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
 * What the page shows at the current step: every node of a watched module with its module's norm, and
 * every parameter's leaf with its own gradient's norm.
 * @param {Viewer} viewer
 * @param {WatchState} state the viewer's watch
 */
export function nodeValues(viewer, state) {
  const { graph } = viewer;
  const values = {};
  for (let i = 0; i < graph.n; i++) {
    const norms = ownNorms(graph, state, i) || moduleNorms(state, graph.field(i, "module"));
    if (norms) values[graph.id(i)] = norms[state.index];
  }
  return values;
}

/** The norms of node `i`'s parameter (a leaf naming one), or undefined. */
function ownNorms(graph, state, i) {
  const names = graph.field(i, "names");
  const name = Array.isArray(names) ? names.find((candidate) => Object.hasOwn(state.params, candidate)) : undefined;
  return name === undefined ? undefined : state.params[name];
}

/** The norms at `module`'s output, or undefined. */
function moduleNorms(state, module) {
  return typeof module === "string" && Object.hasOwn(state.modules, module) ? state.modules[module] : undefined;
}

/**
 * On a page with vanishing layers, open the one whose gradient is smallest at the step shown, select it and
 * bring it to the middle (unless something is selected already); passes `visible` on.
 * @param {Viewer} viewer
 */
export function showVanishing(viewer, visible) {
  const state = viewer.watch;
  if (!state || viewer.selected !== null) return visible;
  const item = vanishingItem(viewer, state);
  if (item === undefined) return visible;
  viewer.folds.reveal(item);
  return refresh(viewer).then((shown) => {
    viewer.selectItem(item);
    centerOn(viewer, item, true);
    return shown;
  });
}

/** The group of the flagged vanishing layer with the smallest norm at the step shown, or undefined. */
function vanishingItem(viewer, state) {
  let best;
  let smallest = Infinity;
  for (const [module, reasons] of Object.entries(state.flags)) {
    if (!reasons.some((reason) => reason.startsWith("vanishing"))) continue;
    const norms = moduleNorms(state, module);
    const norm = norms ? norms[state.index] : null;
    const item = viewer.folds.item("module:" + module);
    if (item === undefined) continue;
    const value = typeof norm === "number" ? norm : Infinity;
    if (best === undefined || value < smallest) [best, smallest] = [item, value];
  }
  return best;
}

/**
 * For the graph's panel: the flagged layers (the smallest gradient first) with their norm at the first
 * step, the step shown and its range, in place of the raw per-step lists.
 * @param {Viewer} viewer
 */
export function watchSummary(viewer) {
  const state = viewer.watch;
  if (!state) return null;
  const box = el("div", { class: "gx-watch-summary" });
  const flagged = Object.keys(state.flags);
  box.appendChild(el("h3", {}, `${state.steps.length} recorded steps (${state.steps[0]}–${state.steps[state.steps.length - 1]}); ${flagged.length} flagged layer${flagged.length === 1 ? "" : "s"}`));
  const at = (module) => (moduleNorms(state, module) || [])[state.index];
  flagged.sort((a, b) => (at(a) ?? Infinity) - (at(b) ?? Infinity));
  const rows = {};
  for (const module of flagged.slice(0, 40)) {
    rows[module || "(model)"] = `${state.flags[module].map((reason) => reason.split(":")[0]).join(", ")}: ${normsText(moduleNorms(state, module) || [], state.index)}`;
  }
  if (flagged.length) box.appendChild(table(rows));
  return box;
}

/**
 * A list of norms per step in words: first, the step shown, least and largest.
 * @param {(number | null)[]} norms
 * @param {number} index the step shown
 */
export function normsText(norms, index) {
  const known = /** @type {number[]} */ (norms.filter((norm) => typeof norm === "number" && !Number.isNaN(norm)));
  if (!known.length) return `${norms.length} steps, none recorded`;
  const show = (norm) => (typeof norm === "number" ? norm.toPrecision(3) : "—");
  return `${show(norms[0])} at first, ${show(norms[index])} now; ${show(Math.min(...known))} … ${show(Math.max(...known))} over ${norms.length} steps`;
}

/**
 * A small chart of a module's norms over the steps (log scale), or with `parameter` of a parameter's, the current step marked.
 * @param {Viewer} viewer
 * @param {string} name a module path, or with `parameter` a parameter name
 * @param {boolean} [parameter]
 */
export function normChart(viewer, name, parameter) {
  const state = viewer.watch;
  const norms = state && (parameter ? (Object.hasOwn(state.params, name) ? state.params[name] : undefined) : moduleNorms(state, name));
  if (!state || !norms) return null;
  const logs = norms.map((norm) => (typeof norm === "number" && norm > 0 && Number.isFinite(norm) ? Math.log10(norm) : null));
  const known = logs.filter((value) => value !== null);
  if (!known.length) return null;
  const [w, h] = [200, 48];
  const low = Math.min(...known);
  const high = Math.max(...known);
  const x = (i) => (norms.length === 1 ? w / 2 : (i * w) / (norms.length - 1));
  const y = (value) => (high === low ? h / 2 : h - 2 - ((value - low) * (h - 4)) / (high - low));
  const points = logs.map((value, i) => (value === null ? null : `${x(i).toFixed(1)},${y(value).toFixed(1)}`)).filter(Boolean);
  const svg = el("svg:svg", { class: "gx-watch-chart", width: w, height: h, viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": `gradient norm of ${name} over the steps` });
  svg.appendChild(el("svg:polyline", { points: points.join(" "), fill: "none", stroke: "currentColor", "stroke-width": 1.5 }));
  svg.appendChild(el("svg:line", { x1: x(state.index), x2: x(state.index), y1: 0, y2: h, stroke: "#d9480f", "stroke-width": 1 }));
  const box = el("div", { class: "gx-watch" });
  const what = parameter ? `‖${name}.grad‖` : `‖gradient‖ at ${name || "(model)"}'s output`;
  box.append(el("h3", {}, `${what}, steps ${state.steps[0]}–${state.steps[state.steps.length - 1]} (log)`), svg);
  box.appendChild(el("p", { class: "gx-hint" }, normsText(norms, state.index)));
  return box;
}
