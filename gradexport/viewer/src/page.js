// The page around the drawing: the toolbar (search box, fit, zoom, theme, help), the breadcrumbs, the canvas,
// the panel, the legend and status; the style sheet; clicks on the drawing, the search box's keys, the keys.
// Writes: viewer.crumbs, viewer.directionButton, viewer.help, viewer.legend, viewer.matches, viewer.panel, viewer.searchBox, viewer.stage, viewer.status, viewer.svg, viewer.viewport.
// Changes: the children, class, theme and tab index of viewer.host, and a style sheet in the document's head.
import css from "./viewer.css";
import { el } from "./dom.js";
import { addChangeButtons, directionLabel, flipDirection, goToChange } from "./navigate.js";
import { showEdge } from "./panel.js";
import { runSearch } from "./search.js";

/** @typedef {import("./viewer.js").Viewer} Viewer */

const HELP = [
  ["click", "select; a folded group expands, an expanded box's title collapses"],
  ["f", "fit: the whole drawing, or a long one across (then pan or use the minimap)"],
  ["+ / −", "zoom"],
  ["arrows", "pan"],
  ["/", "search"],
  ["Enter", "expand or collapse the selected group"],
  ["Backspace", "collapse the box around the selection"],
  ["Esc", "clear selection and search"],
  ["t", "light or dark theme"],
  ["l", "lay out top to bottom or left to right"],
  ["m", "show or hide the minimap (click it to go there)"],
  ["n / p", "next or previous change (a diff's page)"],
];

const STEP_HELP = [
  ["← / →", "previous or next step (instead of panning)"],
  ["Home / End", "first or last step"],
  ["space", "play or pause"],
];

export function setTheme(host, name) {
  if (name !== "light" && name !== "dark") throw new Error(`theme must be "light" or "dark", got ${JSON.stringify(name)}`);
  host.dataset.theme = name;
  return name;
}

const flipTheme = (host) => setTheme(host, host.dataset.theme === "dark" ? "light" : "dark");

/**
 * Build the page in viewer.host; sets viewer.searchBox, crumbs, svg, viewport, panel, status, legend and help.
 * @param {Viewer} viewer
 */
export function buildPage(viewer) {
  const host = viewer.host;
  const style = el("style");
  style.textContent = css;
  document.head.appendChild(style);
  const prefersDark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  host.classList.add("gx");
  host.dataset.theme = prefersDark ? "dark" : "light";
  const bar = el("div", { class: "gx-bar", role: "toolbar" });
  const title = el("span", { class: "gx-title" }, viewer.data.title || "autograd graph");
  viewer.searchBox = el("input", { type: "search", class: "gx-search", placeholder: "Search op, parameter, module, file:line  ( / )", "aria-label": "Search" });
  const button = (label, hint, action) => {
    const b = el("button", { type: "button", title: hint }, label);
    b.addEventListener("click", action);
    bar.appendChild(b);
    return b;
  };
  bar.append(title, viewer.searchBox);
  button("Fit", "Fit to screen (f)", () => viewer.camera.fit());
  button("−", "Zoom out (-)", () => viewer.camera.zoom(1 / 1.25));
  button("+", "Zoom in (+)", () => viewer.camera.zoom(1.25));
  viewer.directionButton = button(directionLabel(viewer), "Top to bottom or left to right (l)", () => flipDirection(viewer));
  viewer.directionButton.classList.add("gx-direction");
  addChangeButtons(viewer, button, bar);
  button("Theme", "Light or dark (t)", () => flipTheme(host));
  button("?", "Keyboard shortcuts", () => viewer.help.classList.toggle("gx-hidden"));
  viewer.crumbs = el("nav", { class: "gx-crumbs", "aria-label": "Where you are" });
  viewer.svg = el("svg:svg", { class: "gx-canvas", role: "img", "aria-label": "autograd graph" });
  const defs = el("svg:defs");
  const marker = el("svg:marker", { id: "gx-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
  marker.appendChild(el("svg:path", { d: "M0,0 L10,5 L0,10 z", class: "gx-arrowhead" }));
  defs.appendChild(marker);
  viewer.viewport = el("svg:g", { class: "gx-viewport" });
  viewer.svg.append(defs, viewer.viewport);
  viewer.panel = el("aside", { class: "gx-panel", "aria-label": "Details" });
  viewer.status = el("div", { class: "gx-status", role: "status" });
  viewer.legend = el("div", { class: "gx-legend" });
  viewer.help = el("div", { class: "gx-help gx-hidden" });
  for (const [keys, what] of viewer.stepper ? [...STEP_HELP, ...HELP.filter(([k]) => k !== "arrows")] : HELP) {
    const row = el("div");
    row.append(el("kbd", {}, keys), document.createTextNode(" " + what));
    viewer.help.appendChild(row);
  }
  const main = el("div", { class: "gx-main" });
  const stage = el("div", { class: "gx-stage" });
  stage.append(viewer.svg, viewer.legend, viewer.help, viewer.status);
  main.append(stage, viewer.panel);
  viewer.stage = stage;
  host.append(bar);
  if (viewer.stepper) host.append(viewer.stepper.build());
  host.append(viewer.crumbs, main);
}

/**
 * Clicks on the drawing, the search box's Enter and Escape, and the keys (key) on the page.
 * @param {Viewer} viewer
 */
export function bindInput(viewer) {
  viewer.svg.addEventListener("click", (event) => {
    if (viewer.camera.dragged) return;
    const target = event.target instanceof Element ? event.target.closest("[data-item], [data-box], [data-edge]") : null;
    // What is clicked is drawn: an SVG element.
    if (!(target instanceof SVGElement)) return viewer.selectItem(null);
    if (target.dataset.box) return viewer.toggle(Number(target.dataset.box));
    if (target.dataset.edge) return showEdge(viewer, Number(target.dataset.edge));
    const item = Number(target.dataset.item);
    if (viewer.folds.isGroup(item)) return viewer.toggleAndSelect(item);
    viewer.selectItem(item);
  });
  const searchBox = viewer.searchBox;
  searchBox.addEventListener("keydown", (event) => {
    if (event.key === "Enter") runSearch(viewer, searchBox.value, true);
    if (event.key === "Escape") searchBox.blur();
    event.stopPropagation();
  });
  viewer.host.tabIndex = 0;
  viewer.host.addEventListener("keydown", (event) => key(viewer, event));
}

/** @param {Viewer} viewer */
function key(viewer, event) {
  const { camera, folds } = viewer;
  if (viewer.stepper && viewer.stepper.key(event)) return;
  const step = 60;
  const actions = {
    f: () => camera.fit(),
    "+": () => camera.zoom(1.25),
    "=": () => camera.zoom(1.25),
    "-": () => camera.zoom(1 / 1.25),
    ArrowLeft: () => camera.pan(step, 0),
    ArrowRight: () => camera.pan(-step, 0),
    ArrowUp: () => camera.pan(0, step),
    ArrowDown: () => camera.pan(0, -step),
    "/": () => viewer.searchBox.focus(),
    t: () => flipTheme(viewer.host),
    l: () => flipDirection(viewer),
    m: () => viewer.minimap && viewer.minimap.frame.classList.toggle("gx-hidden"),
    n: () => goToChange(viewer, viewer.change + 1),
    p: () => goToChange(viewer, viewer.change - 1),
    Escape: () => {
      viewer.searchBox.value = "";
      viewer.matches = new Set();
      viewer.selectItem(null);
    },
    Enter: () => viewer.selected !== null && folds.isGroup(viewer.selected) && viewer.toggleAndSelect(viewer.selected),
    Backspace: () => {
      if (viewer.selected === null) return;
      const box = folds.parentOf(viewer.selected);
      if (box > viewer.graph.n) viewer.collapseItem(box).then(() => viewer.selectItem(box));
    },
  };
  const action = actions[event.key];
  if (action) {
    event.preventDefault();
    action();
  }
}
