// The script API, window.gradexportViewer: for tests and for scripts in the browser's console
// (documented in docs/guides/viewer.md, "Script API").
// Writes: no viewer field.
// Changes: nothing itself: its verbs call the modules that do.
import { idle } from "./draw.js";
import { setTheme } from "./page.js";
import { groupSummary } from "./panel.js";
import { runSearch } from "./search.js";
import { showStep } from "./watch.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/** The group with id `id`; an Error naming `verb` if there is none, or it is a node. */
function groupItem(folds, id, verb) {
  const item = folds.item(String(id));
  if (item === undefined) throw new Error(`${verb}: no node or group with id ${JSON.stringify(String(id))}`);
  if (!folds.isGroup(item)) throw new Error(`${verb}: ${JSON.stringify(String(id))} is a node of the graph, not a folded group`);
  return item;
}

/** @param {Viewer} viewer */
function needSteps(viewer, verb) {
  if (!viewer.stepper) throw new Error(`${verb}: this page holds no steps (write it from gradexport.replay's record, or with steps=True)`);
  return viewer.stepper;
}

/** A step as the script API returns it: without the drawing's edge numbers. */
function plainStep(record) {
  const strip = ({ edge, ...rest }) => rest;
  return {
    ...record,
    inputs: record.inputs.map((input) => ({ ...input, edges: input.edges.map(strip) })),
    outputs: record.outputs.map(strip),
  };
}

/** @param {Viewer} viewer */
export function scriptApi(viewer) {
  const { folds, graph } = viewer;
  return {
    ready: viewer.ready.then(() => viewer.visible()),
    visible: () => viewer.visible(),
    expand: (id) => viewer.expandItem(groupItem(folds, id, "expand")),
    collapse: (id) => viewer.collapseItem(groupItem(folds, id, "collapse")),
    expandAll: (id) => viewer.expandAllUnder(id === undefined ? graph.n : groupItem(folds, id, "expandAll")),
    select: (id) => {
      const item = folds.item(String(id));
      if (item === undefined) throw new Error(`select: no node or group with id ${JSON.stringify(String(id))}`);
      viewer.selectItem(item);
      return folds.isGroup(item) ? groupSummary(folds, item) : graph.attributes(item);
    },
    search: (text) => runSearch(viewer, text, false),
    iterations: () => (viewer.watch ? [...viewer.watch.steps] : []),
    iteration: (k) => showStep(viewer, k),
    theme: (name) => (name === undefined ? viewer.host.dataset.theme : setTheme(viewer.host, name)),
    idle: () => idle(viewer),
    // A replay page's steps (docs/guides/viewer.md, "Stepping through a replay"); elsewhere they throw.
    steps: () => (viewer.steps ? viewer.steps.count : 0),
    step: (k) => {
      const stepper = needSteps(viewer, "step");
      if (k === undefined) return plainStep(stepper.steps.step(stepper.k));
      if (!Number.isInteger(k) || k < 0 || k >= stepper.steps.count) throw new Error(`step: k must be a whole number from 0 to ${stepper.steps.count - 1}, got ${JSON.stringify(k)}`);
      return plainStep(stepper.go(k));
    },
    state: (id) => {
      const stepper = needSteps(viewer, "state");
      const node = graph.index.get(String(id));
      if (node === undefined) throw new Error(`state: no node with id ${JSON.stringify(String(id))}`);
      return stepper.steps.state(node, stepper.k);
    },
    leafGrad: (id) => {
      const stepper = needSteps(viewer, "leafGrad");
      const node = graph.index.get(String(id));
      if (node === undefined) throw new Error(`leafGrad: no node with id ${JSON.stringify(String(id))}`);
      return stepper.steps.leafGrad(node, stepper.k);
    },
    reason: () => {
      const stepper = needSteps(viewer, "reason");
      return stepper.steps.reason(stepper.k);
    },
    play: () => needSteps(viewer, "play").play(),
    pause: () => needSteps(viewer, "pause").pause(),
    // Diagnostics for benchmarks: times in ms since the script started, and the last layout request.
    timings: viewer.timings,
    layoutRequest: () => viewer.lastRequest,
  };
}
