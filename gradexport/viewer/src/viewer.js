// The Viewer: owns the state of one page (the graph, its folds, what is selected, matched and drawn) and
// its parts, and holds the verbs the parts share: select an item, open or close groups. The work is in
// the modules it calls: page.js (DOM and input), draw.js and looks.js (drawing), camera.js (pan and zoom),
// layout-client.js (the layout worker), selection.js, panel.js, legend.js, search.js, steps.js and stepper.js (a
// replay's steps and the step bar); api.js is the script API.
//
// Every field of the viewer is declared in the class below, with its type and the modules that write it; any
// module may read any field. Each module's header says which fields it writes ("Writes:", which
// tests/js/state.test.mjs holds to the assignments in its code) and what else it changes ("Changes:"). The pure
// modules (model.js, steps.js, looks.js, layout-input.js, layout.js, text.js) take what they need as arguments,
// touch no DOM and write no viewer field; tests/js tests them in node.
// Writes: every field, in the constructor; viewer.selected and viewer.marks (selectItem).
// Changes: the folds' expanded groups (expandItem, collapseItem, expandAllUnder).
import { Camera } from "./camera.js";
import { refresh } from "./draw.js";
import { LayoutClient } from "./layout-client.js";
import { drawLegend } from "./legend.js";
import { Folds, GradScale, Graph, pathMarks } from "./model.js";
import { buildMinimap, diffChanges, drawMinimap, showChangeCount } from "./navigate.js";
import { bindInput, buildPage } from "./page.js";
import { showCrumbs, showPanel } from "./panel.js";
import { openRegions } from "./regions.js";
import { centerOn, paintMarks, revealOrigins, showOrigin } from "./selection.js";
import { Stepper } from "./stepper.js";
import { Steps } from "./steps.js";
import { mountWatch, showVanishing, watchState } from "./watch.js";

/** The page opens with the deepest fold that shows at most this many items. */
const OPEN_BUDGET = 150;

/**
 * @typedef {import("./model.js").VisibleEdge & {lines: string[]}} DrawnEdge a visible edge with its label's lines (layout-input.js)
 * @typedef {Omit<import("./model.js").View, "edges"> & {edges: DrawnEdge[]}} LaidView a view whose edges have their lines
 * @typedef {LaidView & {elements: Map<number, SVGGElement>}} DrawnView what is on the canvas, its elements by item
 * @typedef {{frame: HTMLDivElement, svg: SVGSVGElement, content: SVGGElement, view: SVGRectElement, bounds?: {width: number, height: number}}} Minimap
 */

export class Viewer {
  // Set by page.js (buildPage), once: the page's elements.
  /** @type {HTMLInputElement} */ searchBox;
  /** @type {HTMLButtonElement} */ directionButton;
  /** @type {HTMLElement} the breadcrumbs */ crumbs;
  /** @type {SVGSVGElement} the canvas */ svg;
  /** @type {SVGGElement} the group the camera moves, holding the drawing */ viewport;
  /** @type {HTMLElement} the side panel (panel.js, search.js and stepper.js fill it) */ panel;
  /** @type {HTMLElement} */ status;
  /** @type {HTMLElement} the legend (legend.js and watch.js fill it) */ legend;
  /** @type {HTMLElement} the keyboard help */ help;
  /** @type {HTMLElement} the canvas's container: the minimap sits in it */ stage;
  // Set by navigate.js, once.
  /** @type {HTMLElement | null} "change k of N", on a diff's page */ changeCount = null;
  /** @type {Minimap | null} */ minimap = null;
  // Set by draw.js (refresh), first in the constructor's call of it.
  /** @type {import("./model.js").View} what refresh() last asked to draw; it is on the canvas once laid out */ current;

  /**
   * @param {HTMLElement} host the element the viewer fills
   * @param {import("./model.js").PageData} data the page data
   */
  constructor(host, data) {
    this.host = host;
    this.data = data;
    /** @type {Record<string, any>} the diagram options; navigate.js writes it (direction) */
    this.options = data.options || {};
    this.styles = data.styles;
    this.graph = new Graph(openRegions(data));
    this.folds = new Folds(this.graph, this.options.group_modules !== false);
    this.folds.openWithin(OPEN_BUDGET);
    revealOrigins(this);
    /** A diff's changed nodes (navigate.js), and which of them was gone to last (navigate.js writes it); the page opens at the first. */
    this.changes = diffChanges(this.graph);
    this.change = 0;
    if (this.changes.length) this.folds.reveal(this.changes[0]);
    this.words = data.mark_words || {};
    this.markColors = data.mark_colors || {};
    this.saved = this.options.saved_bytes ? this.folds.sums((i) => Number(this.graph.field(i, "saved_bytes")) || 0) : null;
    this.scale = this.options.grad_norms === false ? null : new GradScale(
      this.graph, data.grad_colors, data.grad_bad_color, data.grad_bounds, data.grad_legend, data.grad_colors_dark);
    if (this.scale && !this.scale.any) this.scale = null;
    if (this.scale) {
      const style = document.createElement("style");
      style.textContent = this.scale.cssRules();
      (host.getRootNode() === document ? document.head : host.getRootNode()).appendChild(style);
    }
    /** A gradexport.watch history's scrubber state (watch.js writes inside it), or null. */
    this.watch = watchState(this);
    /** @type {number | null} the selected item; selectItem writes it */
    this.selected = null;
    /** @type {Uint8Array | null} pathMarks of the selected node: the nodes on a path from the loss to it; selectItem writes it. */
    this.marks = null;
    /** @type {Set<number>} the visible items matching the search; search.js and page.js (Escape) write it */
    this.matches = new Set();
    /** @type {(() => void)[]} resolvers of idle(), called once the latest layout is drawn; draw.js writes it */
    this.waiting = [];
    /** @type {DrawnView | null} what is on the canvas: the view drawn last, with its elements by item; draw.js writes it */
    this.drawn = null;
    /** @type {import("./layout.js").LayoutRequest | null} the latest layout request (the script API shows it); draw.js writes it */
    this.lastRequest = null;
    /** @type {{start: number, layout?: number, firstRender?: number}} ms since the script started; draw.js adds the layout's */
    this.timings = { start: performance.now() };
    /** A replay page's steps (steps.js) and its step bar (stepper.js); null on other pages. */
    this.steps = data.steps ? new Steps(this.graph, data.steps) : null;
    this.stepper = this.steps && this.steps.count ? new Stepper(this, this.steps) : null;
    buildPage(this);
    /** Pan and zoom (camera.js); its transform is camera.js's alone. */
    this.camera = new Camera(this.svg, this.viewport);
    drawLegend(this);
    mountWatch(this);
    showPanel(this, null);
    showCrumbs(this, null);
    this.camera.bindPointer();
    buildMinimap(this, this.stage);
    /** @type {(result: import("./layout.js").LayoutResult, looks: Map<number, import("./looks.js").Look>) => void} called by draw.js after each drawing */
    this.drawnHook = (result, looks) => drawMinimap(this, result, looks);
    bindInput(this);
    this.layouts = new LayoutClient();
    this.ready = refresh(this)
      .then((visible) => {
        if (this.stepper) this.stepper.go(0);
        return showOrigin(this, visible);
      })
      .then((visible) => this.showFirstChange(visible))
      .then((visible) => showVanishing(this, visible));
  }

  /** On a diff's page, select the first change and bring it, readable, to the middle; passes `visible` on. */
  showFirstChange(visible) {
    if (!this.changes.length || this.selected !== null) return visible;
    this.selectItem(this.changes[0]);
    centerOn(this, this.changes[0], true);
    showChangeCount(this);
    return visible;
  }

  /** Select `item` (a node or a group; null: nothing): marks its paths, shows it in the panel (unless `keepPanel`) and the breadcrumbs. */
  selectItem(item, keepPanel = false) {
    this.selected = item;
    this.marks = item !== null && !this.folds.isGroup(item) ? pathMarks(this.graph, item) : null;
    paintMarks(this);
    if (!keepPanel) showPanel(this, item);
    showCrumbs(this, item);
  }

  /** Open or close a group; like the others below, a Promise of the visible ids once drawn. */
  toggle(item) {
    return this.folds.expanded.has(item) ? this.collapseItem(item) : this.expandItem(item);
  }

  /** Open or close a group, then select it once the new drawing is there (so the marks, panel and breadcrumbs show its new state). */
  toggleAndSelect(item) {
    return this.toggle(item).then(() => this.selectItem(item));
  }

  expandItem(item) {
    this.folds.expanded.add(item);
    this.folds.reveal(item);
    return refresh(this);
  }

  /** Expand `item` and every group inside it (the whole graph when item is the top), then draw once. */
  expandAllUnder(item) {
    const stack = [item];
    while (stack.length) {
      const group = stack.pop();
      this.folds.expanded.add(group);
      for (const child of this.folds.group(group).children) if (this.folds.isGroup(child)) stack.push(child);
    }
    this.folds.reveal(item);
    return refresh(this);
  }

  collapseItem(item) {
    this.folds.expanded.delete(item);
    return refresh(this);
  }

  /** The ids of the visible items (the latest asked for). */
  visible() {
    return this.current.items.map((item) => this.folds.itemId(item));
  }
}
