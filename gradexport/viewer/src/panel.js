// The side panel and the breadcrumbs: what is selected (a node's attributes and next_functions, a group's
// summary with a button to open or close it, an edge's graph edges), and the groups around it.
// Writes: no viewer field.
// Changes: the children of viewer.panel and viewer.crumbs.
import { el, table } from "./dom.js";
import { nodeTitle } from "./model.js";
import { printable } from "./text.js";
import { normChart, normsText, watchSummary } from "./watch.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

/** What the panel and the script API's select() tell about a group. */
export function groupSummary(folds, item) {
  const group = folds.group(item);
  const summary = { id: group.id, kind: group.kind, num_nodes: group.size, expanded: folds.expanded.has(item) };
  if (group.kind === "module") {
    summary.module = group.path;
    if (group.moduleClass) summary.module_class = group.moduleClass;
  }
  return summary;
}

/**
 * Show `item` (a node or a group) in the panel; null: the graph's own attributes.
 * @param {Viewer} viewer
 */
export function showPanel(viewer, item) {
  const { folds, graph, panel } = viewer;
  panel.replaceChildren();
  if (item === null) {
    panel.appendChild(el("h2", {}, "Graph"));
    const attributes = { ...viewer.data.graph };
    // A watch history's per-step lists are summed up below, not dumped.
    for (const key of ["module_classes", "watch_steps", "watch_modules", "watch_params", "watch_flags"]) delete attributes[key];
    panel.appendChild(table(attributes));
    const summary = watchSummary(viewer);
    if (summary) panel.appendChild(summary);
    panel.appendChild(el("p", { class: "gx-hint" }, "Click a node for its attributes, a folded group to open it. Edge labels i→k: position i of the parent's next_functions, input slot k of the child."));
    return;
  }
  if (folds.isGroup(item)) {
    const summary = groupSummary(folds, item);
    panel.appendChild(el("h2", {}, printable(folds.title(item))));
    panel.appendChild(table(summary));
    const chart = summary.kind === "module" ? normChart(viewer, summary.module) : null;
    if (chart) panel.appendChild(chart);
    const action = el("button", { type: "button" }, summary.expanded ? "Collapse" : "Expand");
    action.addEventListener("click", () => viewer.toggleAndSelect(item));
    panel.appendChild(action);
    return;
  }
  const attributes = graph.attributes(item);
  panel.appendChild(el("h2", {}, printable(nodeTitle(graph, item))));
  // The forward's line that made the node (gradexport.capture_source), above the attribute table.
  if (typeof attributes.source === "string") {
    panel.appendChild(el("p", { class: "gx-source" }, printable(`made at ${attributes.source}: ${attributes.source_code || ""}`)));
  }
  panel.appendChild(table({ id: graph.id(item), ...attributes }));
  const names = Array.isArray(attributes.names) ? attributes.names : [];
  const chart = names.map((name) => normChart(viewer, name, true)).find(Boolean) || (typeof attributes.module === "string" ? normChart(viewer, attributes.module) : null);
  if (chart) panel.appendChild(chart);
  const edges = [];
  for (let j = graph.outStart[item]; j < graph.outStart[item + 1] && edges.length < 50; j++) edges.push(graph.outEdges[j]);
  if (edges.length) {
    panel.appendChild(el("h3", {}, "next_functions"));
    const list = el("ol", { start: 0 });
    for (const e of edges) {
      const line = `[${graph.edgeKey(e)}] → ${graph.id(graph.tgt[e])} slot ${graph.edgeAttributes(e).input_nr}`;
      list.appendChild(el("li", {}, printable(line)));
    }
    panel.appendChild(list);
  }
}

/**
 * Show edge number `j` of the drawing in the panel: the edges of the graph it stands for.
 * @param {Viewer} viewer
 */
export function showEdge(viewer, j) {
  const { folds, graph, panel, drawn } = viewer;
  if (!drawn) return; // an edge is clicked on a drawing
  const edge = drawn.edges[j];
  panel.replaceChildren(el("h2", {}, `edge ${edge.lines[0]}`));
  panel.appendChild(el("p", {}, printable(`${folds.itemId(edge.from)} → ${folds.itemId(edge.to)}: stands for ${edge.count} edge(s) of the graph`)));
  for (const e of edge.edges.slice(0, 20)) {
    const attributes = { ...graph.edgeAttributes(e) };
    if (Array.isArray(attributes.watch_norms) && viewer.watch) attributes.watch_norms = normsText(attributes.watch_norms, viewer.watch.index);
    panel.appendChild(table({ source: graph.id(graph.src[e]), target: graph.id(graph.tgt[e]), key: graph.edgeKey(e), ...attributes }));
  }
}

/**
 * The breadcrumbs of `item`: "graph", each opened group around it (a click closes it), then the item.
 * @param {Viewer} viewer
 */
export function showCrumbs(viewer, item) {
  const { folds, crumbs } = viewer;
  crumbs.replaceChildren();
  const home = el("button", { type: "button" }, "graph");
  home.addEventListener("click", () => viewer.selectItem(null));
  crumbs.appendChild(home);
  if (item === null) return;
  for (const group of folds.ancestors(item)) {
    crumbs.appendChild(el("span", { class: "gx-sep" }, "›"));
    const crumb = el("button", { type: "button", title: "collapse" }, printable(folds.title(group)));
    crumb.addEventListener("click", () => viewer.collapseItem(group).then(() => viewer.selectItem(group)));
    crumbs.appendChild(crumb);
  }
  crumbs.appendChild(el("span", { class: "gx-sep" }, "›"));
  crumbs.appendChild(el("span", { class: "gx-here" }, printable(folds.title(item))));
}
