// The page: reads the embedded graph, folds it, asks the layout worker for positions,
// draws SVG, and offers window.gradexportViewer. Names are data: every text goes
// through textContent or an attribute, never through markup.
import css from "./viewer.css";
import workerSource from "worker-source";
import { Folds, Graph, GradScale, MARKS, edgeMark, nodeMark, nodeTitle, pathMarks, search, visibleEdges } from "./model.js";

const SVG = "http://www.w3.org/2000/svg";
const FONT = "12px Helvetica, Arial, sans-serif";
const LINE = 16;
const PAD_X = 10;
const PAD_Y = 6;
/** The page opens with the deepest fold that shows at most this many items. */
const OPEN_BUDGET = 150;
/** The bar under a node that shows its saved bytes (option saved_bytes). */
const BAR = 4;
const BAR_COLOR = "#5e35b1";
/** The page opens with at most this many non-finite origins revealed (the folded groups show the others). */
const REVEAL_ORIGINS = 8;

function el(tag, attributes = {}, text) {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function pyTuple(shape) {
  if (!Array.isArray(shape)) return String(shape);
  return shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
}

// As gradexport.formats.labels.tensor_text.
function tensorText(record) {
  const parts = "shape" in record ? [pyTuple(record.shape)] : [];
  if (record.dtype !== undefined && record.dtype !== "float32") parts.push(String(record.dtype));
  if (record.device !== undefined && record.device !== "cpu") parts.push(String(record.device));
  return parts.join(" ");
}

// As gradexport.formats.labels.printable: control characters as escapes.
function printable(text) {
  return String(text).replace(/[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]/g, (c) => {
    const escapes = { "\n": "\\n", "\r": "\\r", "\t": "\\t" };
    const code = c.charCodeAt(0);
    return escapes[c] || (code < 0x100 ? "\\x" + code.toString(16).padStart(2, "0") : "\\u" + code.toString(16).padStart(4, "0"));
  });
}

// As gradexport.formats.labels.byte_text.
function byteText(count) {
  let size = Number(count);
  for (const unit of ["B", "KiB", "MiB", "GiB"]) {
    if (size < 1024 || unit === "GiB") return unit === "B" ? `${Math.trunc(size)} B` : `${size.toFixed(1)} ${unit}`;
    size /= 1024;
  }
}

// As gradexport.formats.labels.node_lines: the marks line ("#k", the mark's words), the node's own lines,
// then its saved bytes.
function nodeLines(attributes, options, words) {
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
  lines.push(...kindLines(attributes));
  if (options.saved_bytes && attributes.saved_bytes !== undefined) {
    const shared = attributes.saved_bytes_shared || 0;
    lines.push(`saved ${byteText(attributes.saved_bytes)}` + (shared ? ` (+${byteText(shared)} shared)` : ""));
  }
  return lines;
}

function kindLines(attributes) {
  const kind = attributes.kind;
  if (kind === "none") return ["None"];
  if (kind === "module") return [attributes.module || "(model)", `module of ${attributes.num_nodes ?? "?"} nodes`];
  const lines = [];
  if (kind === "root") lines.push(String(attributes.root ?? "root"));
  else if (kind === "leaf") {
    if (attributes.names && attributes.names.length) lines.push(attributes.names.map(String).join(", "));
  } else {
    lines.push(String(attributes.op ?? "?"));
    if (attributes.special) lines.push(`special: ${attributes.special}`);
  }
  if (kind === "root" || kind === "leaf") lines.push(tensorText(attributes));
  return lines.filter(Boolean).map(printable);
}

function nodeClass(attributes) {
  const mark = nodeMark(attributes.nonfinite, attributes.diff);
  if (mark) return mark;
  const kind = attributes.kind ?? "backward";
  if (kind === "backward" && attributes.special) return "special";
  return ["root", "backward", "leaf", "none", "module"].includes(kind) ? kind : "backward";
}

function formatValue(value) {
  return typeof value === "string" ? printable(value) : printable(JSON.stringify(value, null, 1).replace(/\n\s*/g, " "));
}

class Viewer {
  constructor(host, data) {
    this.host = host;
    this.data = data;
    this.options = data.options || {};
    this.styles = data.styles;
    this.graph = new Graph(data);
    this.folds = new Folds(this.graph, this.options.group_modules !== false);
    this.folds.openWithin(OPEN_BUDGET);
    this.revealOrigins();
    this.words = data.mark_words || {};
    this.markColors = data.mark_colors || {};
    this.saved = this.options.saved_bytes ? this.folds.sums((i) => Number(this.graph.field(i, "saved_bytes")) || 0) : null;
    this.scale = this.options.grad_norms === false ? null : new GradScale(this.graph, data.grad_colors, data.grad_bad_color);
    if (this.scale && !this.scale.any) this.scale = null;
    this.selected = null;
    this.marks = null;
    this.matches = new Set();
    this.serial = 0;
    this.waiting = [];
    this.transform = { x: 0, y: 0, k: 1 };
    this.fitted = false;
    this.timings = { start: performance.now() };
    this.measure = document.createElement("canvas").getContext("2d");
    this.measure.font = FONT;
    this.build();
    this.startWorker();
    this.ready = this.refresh().then((visible) => this.showOrigin(visible));
  }

  // ---- DOM -------------------------------------------------------------------------

  build() {
    const style = el("style");
    style.textContent = css;
    document.head.appendChild(style);
    const prefersDark = window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
    this.host.classList.add("gx");
    this.host.dataset.theme = prefersDark ? "dark" : "light";
    const bar = el("div", { class: "gx-bar", role: "toolbar" });
    const title = el("span", { class: "gx-title" }, this.data.title || "autograd graph");
    this.searchBox = el("input", { type: "search", class: "gx-search", placeholder: "Search op, parameter, module  ( / )", "aria-label": "Search" });
    const button = (label, hint, action) => {
      const b = el("button", { type: "button", title: hint }, label);
      b.addEventListener("click", action);
      bar.appendChild(b);
      return b;
    };
    bar.append(title, this.searchBox);
    button("Fit", "Fit to screen (f)", () => this.fit());
    button("−", "Zoom out (-)", () => this.zoom(1 / 1.25));
    button("+", "Zoom in (+)", () => this.zoom(1.25));
    button("Theme", "Light or dark (t)", () => this.setTheme(this.host.dataset.theme === "dark" ? "light" : "dark"));
    button("?", "Keyboard shortcuts", () => this.help.classList.toggle("gx-hidden"));
    this.crumbs = el("nav", { class: "gx-crumbs", "aria-label": "Where you are" });
    this.svg = el("svg:svg", { class: "gx-canvas", role: "img", "aria-label": "autograd graph" });
    this.defs = el("svg:defs");
    const marker = el("svg:marker", { id: "gx-arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 8, markerHeight: 8, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse" });
    marker.appendChild(el("svg:path", { d: "M0,0 L10,5 L0,10 z", class: "gx-arrowhead" }));
    this.defs.appendChild(marker);
    this.viewport = el("svg:g", { class: "gx-viewport" });
    this.svg.append(this.defs, this.viewport);
    this.panel = el("aside", { class: "gx-panel", "aria-label": "Details" });
    this.status = el("div", { class: "gx-status", role: "status" });
    this.legend = el("div", { class: "gx-legend" });
    this.help = el("div", { class: "gx-help gx-hidden" });
    for (const [key, what] of [
      ["click", "select; a folded group expands, an expanded box's title collapses"],
      ["f", "fit to screen"],
      ["+ / −", "zoom"],
      ["arrows", "pan"],
      ["/", "search"],
      ["Enter", "expand or collapse the selected group"],
      ["Backspace", "collapse the box around the selection"],
      ["Esc", "clear selection and search"],
      ["t", "light or dark theme"],
    ]) {
      const row = el("div");
      row.append(el("kbd", {}, key), document.createTextNode(" " + what));
      this.help.appendChild(row);
    }
    const main = el("div", { class: "gx-main" });
    const stage = el("div", { class: "gx-stage" });
    stage.append(this.svg, this.legend, this.help, this.status);
    main.append(stage, this.panel);
    this.host.append(bar, this.crumbs, main);
    this.drawLegend();
    this.showPanel(null);
    this.showCrumbs(null);
    this.bindInput();
  }

  bindInput() {
    let drag = null;
    this.svg.addEventListener("pointerdown", (event) => {
      if (event.button !== 0) return;
      drag = { x: event.clientX, y: event.clientY, tx: this.transform.x, ty: this.transform.y, moved: false };
    });
    window.addEventListener("pointermove", (event) => {
      if (!drag) return;
      const dx = event.clientX - drag.x;
      const dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) {
        this.transform.x = drag.tx + dx;
        this.transform.y = drag.ty + dy;
        this.applyTransform();
      }
    });
    window.addEventListener("pointerup", () => {
      setTimeout(() => (drag = null), 0);
    });
    this.svg.addEventListener("click", (event) => {
      if (drag && drag.moved) return;
      const target = event.target.closest("[data-item], [data-box], [data-edge]");
      if (!target) return this.selectItem(null);
      if (target.dataset.box) return this.toggle(Number(target.dataset.box));
      if (target.dataset.edge) return this.showEdge(Number(target.dataset.edge));
      const item = Number(target.dataset.item);
      if (this.folds.isGroup(item)) this.toggle(item);
      this.selectItem(item);
    });
    this.svg.addEventListener(
      "wheel",
      (event) => {
        event.preventDefault();
        const box = this.svg.getBoundingClientRect();
        this.zoom(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
      },
      { passive: false },
    );
    this.searchBox.addEventListener("keydown", (event) => {
      if (event.key === "Enter") this.runSearch(this.searchBox.value, true);
      if (event.key === "Escape") this.searchBox.blur();
      event.stopPropagation();
    });
    this.host.tabIndex = 0;
    this.host.addEventListener("keydown", (event) => this.key(event));
  }

  key(event) {
    const step = 60;
    const actions = {
      f: () => this.fit(),
      "+": () => this.zoom(1.25),
      "=": () => this.zoom(1.25),
      "-": () => this.zoom(1 / 1.25),
      ArrowLeft: () => this.pan(step, 0),
      ArrowRight: () => this.pan(-step, 0),
      ArrowUp: () => this.pan(0, step),
      ArrowDown: () => this.pan(0, -step),
      "/": () => this.searchBox.focus(),
      t: () => this.setTheme(this.host.dataset.theme === "dark" ? "light" : "dark"),
      Escape: () => {
        this.searchBox.value = "";
        this.matches = new Set();
        this.selectItem(null);
      },
      Enter: () => this.selected !== null && this.folds.isGroup(this.selected) && this.toggle(this.selected),
      Backspace: () => {
        if (this.selected === null) return;
        const box = this.folds.parentOf(this.selected);
        if (box > this.graph.n) this.collapseItem(box).then(() => this.selectItem(box));
      },
    };
    const action = actions[event.key];
    if (action) {
      event.preventDefault();
      action();
    }
  }

  // ---- layout and drawing ----------------------------------------------------------

  startWorker() {
    this.pending = new Map();
    const deliver = (message) => {
      const waiting = this.pending.get(message.serial);
      this.pending.delete(message.serial);
      if (waiting) waiting.resolve(message.result);
    };
    try {
      const url = URL.createObjectURL(new Blob([workerSource], { type: "text/javascript" }));
      this.worker = new Worker(url);
      this.worker.onmessage = (event) => deliver(event.data);
      this.worker.onerror = (event) => {
        event.preventDefault();
        this.fallBack(deliver);
      };
    } catch (error) {
      this.fallBack(deliver);
    }
  }

  fallBack(deliver) {
    // No worker (a sandbox forbids it): run the same code on the page.
    if (this.inline) return;
    this.worker = null;
    const scope = { postMessage: deliver };
    new Function("self", workerSource)(scope);
    this.inline = scope;
    // Requests the worker never answered are laid out here.
    for (const [serial, { request }] of this.pending) setTimeout(() => scope.onmessage({ data: { serial, request } }), 0);
  }

  requestLayout(request) {
    const serial = ++this.serial;
    return new Promise((resolve) => {
      this.pending.set(serial, { resolve, request });
      if (this.worker) this.worker.postMessage({ serial, request });
      else setTimeout(() => this.inline.onmessage({ data: { serial, request } }), 0);
    }).then((result) => ({ serial, result }));
  }

  textWidth(text) {
    return this.measure.measureText(text).width;
  }

  itemLook(item) {
    const folds = this.folds;
    if (folds.isGroup(item)) {
      const group = folds.group(item);
      const lines = [...group.label];
      if (group.kind === "module") lines.push(group.size === 1 ? "1 node" : `${group.size} nodes`);
      const inside = this.marksInside(group);
      if (inside) lines.push(inside);
      const bytes = this.saved ? this.saved[item - this.graph.n] : undefined;
      if (bytes !== undefined) lines.push(`saved ${byteText(bytes)}`);
      return { cls: group.kind === "module" ? "module" : "fold", lines: lines.map(printable), group, mark: groupMark(group), bytes };
    }
    const attributes = this.graph.attributes(item);
    const cls = nodeClass(attributes);
    const bytes = this.saved && typeof attributes.saved_bytes === "number" ? attributes.saved_bytes : undefined;
    return { cls, lines: nodeLines(attributes, this.options, this.words), mark: MARKS.includes(cls) ? cls : null, bytes };
  }

  /** The line a folded group shows for the marked nodes inside it: "non-finite gradient starts inside", "+2 added · −1 removed". */
  marksInside(group) {
    const marks = group.marks;
    if (!marks) return null;
    const parts = [];
    if (marks.nonfinite) parts.push(`${this.words.nonfinite.replace(/ here$/, "")} inside`);
    for (const mark of ["added", "removed", "changed"]) {
      const words = this.words[mark];
      if (marks[mark]) parts.push(`${words[0]}${marks[mark]} ${words.slice(2)}`);
    }
    return parts.join(" · ");
  }

  /**
   * Open the groups around the nodes where a non-finite gradient started (graph attribute nonfinite, in the
   * order the engine ran them), so they show at once: the first REVEAL_ORIGINS of them, to keep the page small.
   */
  revealOrigins() {
    const origins = this.graph.data.graph && this.graph.data.graph.nonfinite;
    if (!Array.isArray(origins)) return;
    for (const id of origins.slice(0, REVEAL_ORIGINS)) {
      const item = this.folds.item(String(id));
      if (item !== undefined) this.folds.reveal(item);
    }
  }

  /** On first render, select the first node where a non-finite gradient started and bring it to the middle. */
  showOrigin(visible) {
    const origins = this.graph.data.graph && this.graph.data.graph.nonfinite;
    const item = Array.isArray(origins) && origins.length ? this.folds.item(String(origins[0])) : undefined;
    if (item === undefined || this.folds.isGroup(item)) return visible;
    this.selectItem(item);
    this.centerOn(this.current.rep[item]);
    return visible;
  }

  /** The mark of a visible edge: the strongest mark among the graph's edges it stands for, and the sign to write. */
  edgeLook(edge) {
    if (!this.graph.marked) return null;
    const found = new Set(edge.edges.map((e) => edgeMark(this.graph.edgeAttributes(e))).filter(Boolean));
    if (!found.size) return null;
    const mark = ["origin", "path", "removed", "added", "changed"].find((m) => found.has(m));
    const diffs = [...found].filter((m) => this.words[m]);
    const sign = diffs.length === 1 ? this.words[diffs[0]][0] : diffs.length ? "±" : "";
    return { mark, color: this.markColors[mark], sign };
  }

  edgeLines(edge) {
    let first = `${edge.next}→${edge.input}`;
    if (edge.count > 1) first += ` ×${edge.count}`;
    edge.mark = this.edgeLook(edge);
    if (edge.mark && edge.mark.sign) first += ` ${edge.mark.sign}`;
    const lines = [first];
    if (edge.edges.length === 1) {
      const attributes = this.graph.edgeAttributes(edge.edges[0]);
      if (this.options.edge_shapes && "shape" in attributes) lines.push(printable(tensorText(attributes)));
      const grad = this.scale ? attributes.grad : null;
      if (grad && typeof grad === "object" && "norm" in grad) {
        const norm = typeof grad.norm === "number" ? grad.norm.toPrecision(3).replace(/\.?0+(e|$)/, "$1") : String(grad.norm);
        lines.push(`‖g‖ ${norm}`);
      }
    }
    return lines;
  }

  refresh() {
    const started = performance.now();
    const { items, boxes, box } = this.folds.view();
    const rep = this.folds.representatives();
    const edges = visibleEdges(this.graph, rep);
    this.current = { items, boxes, box, rep, edges };
    const looks = new Map(items.map((item) => [item, this.itemLook(item)]));
    const bar = this.saved ? BAR + 2 : 0;
    const size = (lines) => ({
      w: Math.ceil(Math.max(24, ...lines.map((line) => this.textWidth(line))) + 2 * PAD_X),
      h: lines.length * LINE + 2 * PAD_Y + bar,
    });
    const boxId = (b) => (b < 0 ? null : "b" + b);
    const request = {
      direction: this.options.direction || "TB",
      nodes: items.map((item) => ({ id: "i" + item, box: boxId(box.get(item)), ...size(looks.get(item).lines) })),
      boxes: boxes.map((b) => ({
        id: "b" + b,
        box: boxId(box.get(b)),
        w: this.textWidth(this.boxTitle(b)) + 2 * PAD_X,
        h: LINE,
        compound: this.folds.group(b).kind === "module",
      })),
      edges: edges.map((edge, j) => {
        const lines = this.edgeLines(edge);
        edge.lines = lines;
        return { id: "e" + j, from: "i" + edge.from, to: "i" + edge.to, w: Math.max(...lines.map((l) => this.textWidth(l))) + 6, h: lines.length * 14 + 2 };
      }),
    };
    this.lastRequest = request;
    this.status.textContent = `laying out ${items.length} nodes, ${edges.length} edges…`;
    return this.requestLayout(request).then(({ serial, result }) => {
      if (serial !== this.serial) return this.idle();
      this.draw(result, looks);
      this.timings.layout = performance.now() - started;
      if (!this.timings.firstRender) this.timings.firstRender = performance.now() - this.timings.start;
      const folded = items.filter((item) => this.folds.isGroup(item)).length;
      this.status.textContent =
        `${items.length} visible (${folded} folded) of ${this.graph.n} nodes` + (result.warning ? " · boxes approximated" : "");
      const waiting = this.waiting;
      this.waiting = [];
      for (const resolve of waiting) resolve();
      return this.visible();
    });
  }

  /** A Promise resolved once the latest layout is drawn. */
  idle() {
    return new Promise((resolve) => this.waiting.push(resolve)).then(() => this.visible());
  }

  boxTitle(b) {
    const group = this.folds.group(b);
    return printable(group.kind === "module" ? `${group.label[0]} ▾` : `${group.label[0]} · ${group.label[1]} ▾`);
  }

  draw(result, looks) {
    const { items, boxes, edges } = this.current;
    const viewport = this.viewport;
    viewport.replaceChildren();
    this.elements = new Map();
    const boxLayer = el("svg:g", { class: "gx-boxes" });
    const edgeLayer = el("svg:g", { class: "gx-edges" });
    const nodeLayer = el("svg:g", { class: "gx-nodes" });
    viewport.append(boxLayer, edgeLayer, nodeLayer);
    const depth = (b) => {
      let d = 0;
      for (let outer = this.current.box.get(b); outer >= 0; outer = this.current.box.get(outer)) d++;
      return d;
    };
    for (const b of [...boxes].sort((a, c) => depth(a) - depth(c))) {
      const p = result.boxes["b" + b];
      if (!p) continue;
      const g = el("svg:g", { class: `gx-box gx-box-${this.folds.group(b).kind}`, "data-id": this.folds.itemId(b) });
      const frame = el("svg:rect", { class: "bg", x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, rx: 6 });
      const mark = groupMark(this.folds.group(b));
      if (mark) {
        frame.style.stroke = this.styles[mark].stroke;
        g.dataset.mark = mark;
      }
      g.appendChild(frame);
      const title = el("svg:g", { class: "gx-box-title", "data-box": b });
      const text = this.boxTitle(b);
      const tw = this.textWidth(text) + 8;
      title.appendChild(el("svg:rect", { class: "bg", x: p.x - p.w / 2 + 4, y: p.y - p.h / 2 + 2, width: tw, height: LINE + 2, rx: 3 }));
      title.appendChild(el("svg:text", { x: p.x - p.w / 2 + 8, y: p.y - p.h / 2 + 2 + LINE - 3 }, text));
      title.appendChild(el("svg:title", {}, "collapse"));
      g.appendChild(title);
      boxLayer.appendChild(g);
      this.elements.set(b, g);
    }
    edges.forEach((edge, j) => {
      const p = result.edges["e" + j];
      if (!p) return;
      const g = el("svg:g", { class: "gx-edge", "data-edge": j });
      const d = "M" + p.points.map(([x, y]) => `${x.toFixed(1)},${y.toFixed(1)}`).join(" L");
      const path = el("svg:path", { d, class: "gx-edge-line", "marker-end": "url(#gx-arrow)" });
      const look = (this.scale ? this.scale.style(this.graph, edge) : null) || (edge.mark && { color: edge.mark.color, width: 2 });
      if (look) {
        path.style.stroke = look.color;
        path.style.strokeWidth = String(look.width);
        if (look.bad) g.classList.add("gx-bad");
      }
      if (edge.mark) g.dataset.mark = edge.mark.mark;
      g.appendChild(path);
      const label = el("svg:g", { class: "gx-edge-label" });
      const w = Math.max(...edge.lines.map((l) => this.textWidth(l))) + 6;
      const h = edge.lines.length * 14 + 2;
      label.appendChild(el("svg:rect", { class: "bg", x: p.x - w / 2, y: p.y - h / 2, width: w, height: h, rx: 2 }));
      edge.lines.forEach((line, k) => {
        label.appendChild(el("svg:text", { x: p.x, y: p.y - h / 2 + 12 + 14 * k, "text-anchor": "middle" }, line));
      });
      g.appendChild(label);
      edgeLayer.appendChild(g);
      edge.element = g;
    });
    let most = 0;
    for (const item of items) most = Math.max(most, looks.get(item).bytes || 0);
    for (const item of items) {
      const p = result.nodes["i" + item];
      const look = looks.get(item);
      const style = this.styles[look.cls === "fold" ? "backward" : look.cls];
      const g = el("svg:g", { class: `gx-node gx-${look.cls}`, "data-item": item, "data-id": this.folds.itemId(item) });
      const x0 = p.x - p.w / 2;
      const y0 = p.y - p.h / 2;
      if (look.cls === "fold" || look.cls === "module") {
        g.appendChild(el("svg:rect", { class: "gx-stack", x: x0 + 4, y: y0 + 4, width: p.w, height: p.h, rx: 4, fill: style.fill, stroke: style.stroke }));
      }
      const shape = el("svg:path", { class: "bg gx-shape", d: shapePath(style.shape, x0, y0, p.w, p.h), fill: style.fill, stroke: style.stroke });
      if (style.dashed || look.cls === "fold") shape.setAttribute("stroke-dasharray", "4 3");
      if (look.mark) {
        // A marked node, or a folded group holding one: the outline in the mark's colour.
        shape.setAttribute("stroke", this.styles[look.mark].stroke);
        g.classList.add("gx-marked");
        g.dataset.mark = look.mark;
      }
      g.appendChild(shape);
      if (this.saved && look.bytes !== undefined) {
        const width = p.w - 2 * PAD_X;
        const fraction = most > 0 ? (look.bytes || 0) / most : 0;
        const y = y0 + p.h - PAD_Y - BAR;
        g.appendChild(el("svg:rect", { class: "gx-saved-track", x: x0 + PAD_X, y, width, height: BAR }));
        g.appendChild(el("svg:rect", { class: "gx-saved-bar", x: x0 + PAD_X, y, width: width * fraction, height: BAR, fill: BAR_COLOR, "data-fraction": fraction }));
      }
      look.lines.forEach((line, k) => {
        g.appendChild(el("svg:text", { x: p.x, y: y0 + PAD_Y + LINE * (k + 1) - 4, "text-anchor": "middle", fill: style.text }, line));
      });
      if (this.folds.isGroup(item)) g.appendChild(el("svg:title", {}, "click to expand"));
      nodeLayer.appendChild(g);
      this.elements.set(item, g);
    }
    this.bounds = { width: result.width || 1, height: result.height || 1 };
    this.svg.setAttribute("data-rendered", String(this.serial));
    this.paintMarks();
    if (!this.fitted) {
      this.fit(true);
      this.fitted = true;
    } else this.applyTransform();
  }

  // ---- view ------------------------------------------------------------------------

  applyTransform() {
    const { x, y, k } = this.transform;
    this.viewport.setAttribute("transform", `translate(${x.toFixed(2)},${y.toFixed(2)}) scale(${k.toFixed(4)})`);
  }

  /** Fit the whole drawing; `readable` keeps the text at least at 70 % size and shows the top (the loss) first. */
  fit(readable = false) {
    const box = this.svg.getBoundingClientRect();
    const width = box.width || 800;
    const height = box.height || 600;
    let k = Math.min(1.5, Math.max(0.02, Math.min(width / this.bounds.width, height / this.bounds.height) * 0.95));
    if (readable) k = Math.max(k, 0.7, Math.min(1, (width / this.bounds.width) * 0.95));
    const x = (width - this.bounds.width * k) / 2;
    const y = this.bounds.height * k > height ? 8 : (height - this.bounds.height * k) / 2;
    this.transform = { k, x: this.bounds.width * k > width ? 8 : x, y };
    this.applyTransform();
  }

  zoom(factor, cx, cy) {
    const box = this.svg.getBoundingClientRect();
    const x = cx ?? box.width / 2;
    const y = cy ?? box.height / 2;
    const t = this.transform;
    const k = Math.min(8, Math.max(0.01, t.k * factor));
    this.transform = { k, x: x - ((x - t.x) * k) / t.k, y: y - ((y - t.y) * k) / t.k };
    this.applyTransform();
  }

  pan(dx, dy) {
    this.transform.x += dx;
    this.transform.y += dy;
    this.applyTransform();
  }

  centerOn(item) {
    const g = this.elements && this.elements.get(item);
    if (!g) return;
    const b = g.getBBox();
    const box = this.svg.getBoundingClientRect();
    const k = this.transform.k;
    this.transform.x = box.width / 2 - (b.x + b.width / 2) * k;
    this.transform.y = box.height / 2 - (b.y + b.height / 2) * k;
    this.applyTransform();
  }

  setTheme(name) {
    if (name !== "light" && name !== "dark") throw new Error(`theme must be "light" or "dark", got ${JSON.stringify(name)}`);
    this.host.dataset.theme = name;
    return name;
  }

  // ---- folding ---------------------------------------------------------------------

  toggle(item) {
    return this.folds.expanded.has(item) ? this.collapseItem(item) : this.expandItem(item);
  }

  expandItem(item) {
    this.folds.expanded.add(item);
    this.folds.reveal(item);
    return this.refresh();
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
    return this.refresh();
  }

  collapseItem(item) {
    this.folds.expanded.delete(item);
    return this.refresh();
  }

  groupItem(id, verb) {
    const item = this.folds.item(String(id));
    if (item === undefined) throw new Error(`${verb}: no node or group with id ${JSON.stringify(String(id))}`);
    if (!this.folds.isGroup(item)) throw new Error(`${verb}: ${JSON.stringify(String(id))} is a node of the graph, not a folded group`);
    return item;
  }

  visible() {
    return this.current.items.map((item) => this.folds.itemId(item));
  }

  // ---- selection, paths, search ----------------------------------------------------

  selectItem(item) {
    this.selected = item;
    this.marks = item !== null && !this.folds.isGroup(item) ? pathMarks(this.graph, item) : null;
    this.paintMarks();
    this.showPanel(item);
    this.showCrumbs(item);
  }

  paintMarks() {
    if (!this.elements) return;
    const { items, rep, edges } = this.current;
    const marks = this.marks;
    const onPath = new Set();
    if (marks) for (let v = 0; v < this.graph.n; v++) if (marks[v]) onPath.add(rep[v]);
    for (const item of items) {
      const g = this.elements.get(item);
      g.classList.toggle("gx-selected", item === this.selected || (this.selected !== null && rep[this.selected] === item && !this.folds.isGroup(this.selected)));
      g.classList.toggle("gx-on-path", onPath.has(item));
      g.classList.toggle("gx-match", this.matches.has(item));
    }
    for (const edge of edges) {
      if (!edge.element) continue;
      edge.element.classList.toggle("gx-on-path", Boolean(marks) && edge.edges.some((e) => marks[this.graph.tgt[e]]));
    }
  }

  groupSummary(item) {
    const group = this.folds.group(item);
    const summary = { id: group.id, kind: group.kind, num_nodes: group.size, expanded: this.folds.expanded.has(item) };
    if (group.kind === "module") {
      summary.module = group.path;
      if (group.moduleClass) summary.module_class = group.moduleClass;
    }
    return summary;
  }

  showPanel(item) {
    const panel = this.panel;
    panel.replaceChildren();
    if (item === null) {
      panel.appendChild(el("h2", {}, "Graph"));
      const attributes = { ...this.data.graph };
      delete attributes.module_classes;
      panel.appendChild(table(attributes));
      panel.appendChild(el("p", { class: "gx-hint" }, "Click a node for its attributes, a folded group to open it. Edge labels i→k: position i of the parent's next_functions, input slot k of the child."));
      return;
    }
    if (this.folds.isGroup(item)) {
      const summary = this.groupSummary(item);
      panel.appendChild(el("h2", {}, printable(this.folds.group(item).label[0])));
      panel.appendChild(table(summary));
      const action = el("button", { type: "button" }, summary.expanded ? "Collapse" : "Expand");
      action.addEventListener("click", () => this.toggle(item).then(() => this.selectItem(item)));
      panel.appendChild(action);
      return;
    }
    const attributes = this.graph.attributes(item);
    panel.appendChild(el("h2", {}, printable(nodeTitle(this.graph, item))));
    panel.appendChild(table({ id: this.graph.id(item), ...attributes }));
    const edges = [];
    for (let j = this.graph.outStart[item]; j < this.graph.outStart[item + 1] && edges.length < 50; j++) edges.push(this.graph.outEdges[j]);
    if (edges.length) {
      panel.appendChild(el("h3", {}, "next_functions"));
      const list = el("ol", { start: 0 });
      for (const e of edges) {
        const attributes = this.graph.edgeAttributes(e);
        const line = `[${this.graph.edgeKey(e)}] → ${this.graph.id(this.graph.tgt[e])} slot ${attributes.input_nr}`;
        list.appendChild(el("li", {}, printable(line)));
      }
      panel.appendChild(list);
    }
  }

  showEdge(j) {
    const edge = this.current.edges[j];
    const panel = this.panel;
    panel.replaceChildren(el("h2", {}, `edge ${edge.lines[0]}`));
    panel.appendChild(el("p", {}, printable(`${this.folds.itemId(edge.from)} → ${this.folds.itemId(edge.to)}: stands for ${edge.count} edge(s) of the graph`)));
    for (const e of edge.edges.slice(0, 20)) {
      panel.appendChild(
        table({ source: this.graph.id(this.graph.src[e]), target: this.graph.id(this.graph.tgt[e]), key: this.graph.edgeKey(e), ...this.graph.edgeAttributes(e) }),
      );
    }
  }

  showCrumbs(item) {
    const crumbs = this.crumbs;
    crumbs.replaceChildren();
    const home = el("button", { type: "button" }, "graph");
    home.addEventListener("click", () => this.selectItem(null));
    crumbs.appendChild(home);
    if (item === null) return;
    for (const group of this.folds.ancestors(item)) {
      crumbs.appendChild(el("span", { class: "gx-sep" }, "›"));
      const crumb = el("button", { type: "button", title: "collapse" }, printable(this.folds.group(group).label[0]));
      crumb.addEventListener("click", () => this.collapseItem(group).then(() => this.selectItem(group)));
      crumbs.appendChild(crumb);
    }
    crumbs.appendChild(el("span", { class: "gx-sep" }, "›"));
    const label = this.folds.isGroup(item) ? this.folds.group(item).label[0] : nodeTitle(this.graph, item);
    crumbs.appendChild(el("span", { class: "gx-here" }, printable(label)));
  }

  runSearch(text, reveal) {
    const ids = search(this.graph, this.folds, text);
    const rep = this.current.rep;
    this.matches = new Set(ids.map((id) => this.folds.item(id)).map((item) => (this.folds.isGroup(item) ? item : rep[item])));
    this.paintMarks();
    this.panel.replaceChildren(el("h2", {}, `${ids.length} match${ids.length === 1 ? "" : "es"}`));
    const list = el("ul", { class: "gx-results" });
    for (const id of ids.slice(0, 200)) {
      const item = this.folds.item(id);
      const b = el("button", { type: "button" }, printable(`${id}: ${this.folds.isGroup(item) ? this.folds.group(item).label[0] : nodeTitle(this.graph, item)}`));
      b.addEventListener("click", () => this.revealAndSelect(item));
      const li = el("li");
      li.appendChild(b);
      list.appendChild(li);
    }
    this.panel.appendChild(list);
    if (reveal && ids.length) this.revealAndSelect(this.folds.item(ids[0]), true);
    return ids;
  }

  revealAndSelect(item, keepPanel) {
    this.folds.reveal(item);
    return this.refresh().then(() => {
      if (keepPanel) {
        this.selected = item;
        this.marks = this.folds.isGroup(item) ? null : pathMarks(this.graph, item);
        this.paintMarks();
        this.showCrumbs(item);
      } else this.selectItem(item);
      this.centerOn(this.folds.isGroup(item) ? item : this.current.rep[item]);
    });
  }

  drawLegend() {
    const legend = this.legend;
    legend.replaceChildren();
    for (const [cls, name] of [["root", "root"], ["backward", "backward"], ["special", "special"], ["leaf", "leaf (AccumulateGrad)"], ["module", "folded module"]]) {
      const style = this.styles[cls];
      const row = el("div", { class: "gx-legend-row" });
      const swatch = el("span", { class: "gx-swatch" });
      swatch.style.background = style.fill;
      swatch.style.borderColor = style.stroke;
      row.append(swatch, document.createTextNode(name));
      legend.appendChild(row);
    }
    const graphAttributes = this.data.graph || {};
    if ("nonfinite" in graphAttributes) {
      legend.appendChild(el("div", { class: "gx-legend-title" }, "non-finite gradient (find_nonfinite)"));
      this.legendRow("nonfinite", this.words.nonfinite);
      this.legendRow(null, "its path to the parameters", this.markColors.path);
    }
    if ("diff" in graphAttributes) {
      legend.appendChild(el("div", { class: "gx-legend-title" }, "diff: nodes and edges (+ − ~ after i→k)"));
      for (const mark of ["added", "removed", "changed"]) this.legendRow(mark, this.words[mark], this.markColors[mark]);
    }
    if (this.saved) {
      const row = el("div", { class: "gx-legend-row", "data-legend": "saved_bytes" });
      const bar = el("span", { class: "gx-line-swatch" });
      bar.style.background = BAR_COLOR;
      row.append(bar, document.createTextNode("saved bytes (the largest shown: a full bar)"));
      legend.appendChild(row);
    }
    if (!this.scale) return;
    legend.appendChild(el("div", { class: "gx-legend-title" }, "‖gradient‖ on the edge (log scale)"));
    const ramp = el("div", { class: "gx-ramp" });
    for (const color of this.scale.colors) {
      const cell = el("span");
      cell.style.background = color;
      ramp.appendChild(cell);
    }
    legend.appendChild(ramp);
    legend.appendChild(el("div", { class: "gx-legend-row" }, `${(10 ** this.scale.low).toPrecision(2)} … ${(10 ** this.scale.high).toPrecision(2)}`));
    const bad = el("div", { class: "gx-legend-row" });
    const swatch = el("span", { class: "gx-swatch" });
    swatch.style.background = this.scale.bad;
    bad.append(swatch, document.createTextNode("NaN or infinite"));
    legend.appendChild(bad);
  }

  /** A legend row: a node swatch of style `cls` and/or an edge swatch of `color`, then `text`. */
  legendRow(cls, text, color) {
    const row = el("div", { class: "gx-legend-row", "data-legend": cls || "edge" });
    if (cls) {
      const style = this.styles[cls];
      const swatch = el("span", { class: "gx-swatch" });
      swatch.style.background = style.fill;
      swatch.style.borderColor = style.stroke;
      if (style.dashed) swatch.style.borderStyle = "dashed";
      row.appendChild(swatch);
    }
    if (color) {
      const line = el("span", { class: "gx-line-swatch" });
      line.style.background = color;
      row.appendChild(line);
    }
    row.appendChild(document.createTextNode(text));
    this.legend.appendChild(row);
  }

  api() {
    return {
      ready: this.ready.then(() => this.visible()),
      visible: () => this.visible(),
      expand: (id) => this.expandItem(this.groupItem(id, "expand")),
      collapse: (id) => this.collapseItem(this.groupItem(id, "collapse")),
      expandAll: (id) => this.expandAllUnder(id === undefined ? this.graph.n : this.groupItem(id, "expandAll")),
      select: (id) => {
        const item = this.folds.item(String(id));
        if (item === undefined) throw new Error(`select: no node or group with id ${JSON.stringify(String(id))}`);
        this.selectItem(item);
        return this.folds.isGroup(item) ? this.groupSummary(item) : this.graph.attributes(item);
      },
      search: (text) => this.runSearch(text, false),
      theme: (name) => (name === undefined ? this.host.dataset.theme : this.setTheme(name)),
      idle: () => this.idle(),
      // Diagnostics for benchmarks: times in ms since the script started, and the last layout request.
      timings: this.timings,
      layoutRequest: () => this.lastRequest,
    };
  }
}

/** The outline a group (folded, or the box of an opened one) takes for the marks inside: non-finite first, else a diff's. */
function groupMark(group) {
  const marks = group.marks;
  if (!marks) return null;
  if (marks.nonfinite) return "nonfinite";
  const diffs = ["removed", "added", "changed"].filter((mark) => marks[mark]);
  // A group that holds added and removed nodes has changed.
  return diffs.length === 1 ? diffs[0] : diffs.length ? "changed" : null;
}

function table(record) {
  const dl = el("dl", { class: "gx-attributes" });
  for (const [key, value] of Object.entries(record)) {
    dl.append(el("dt", {}, printable(key)), el("dd", {}, formatValue(value)));
  }
  return dl;
}

function shapePath(shape, x, y, w, h) {
  const r = (radius) =>
    `M${x + radius},${y} H${x + w - radius} A${radius},${radius} 0 0 1 ${x + w},${y + radius} V${y + h - radius} ` +
    `A${radius},${radius} 0 0 1 ${x + w - radius},${y + h} H${x + radius} A${radius},${radius} 0 0 1 ${x},${y + h - radius} ` +
    `V${y + radius} A${radius},${radius} 0 0 1 ${x + radius},${y} Z`;
  if (shape === "stadium") return r(h / 2);
  if (shape === "rounded") return r(6);
  if (shape === "hexagon") {
    const c = Math.min(10, w / 4);
    return `M${x + c},${y} H${x + w - c} L${x + w},${y + h / 2} L${x + w - c},${y + h} H${x + c} L${x},${y + h / 2} Z`;
  }
  if (shape === "note") return `M${x},${y} H${x + w - 8} L${x + w},${y + 8} V${y + h} H${x} Z`;
  if (shape === "subroutine") return `M${x},${y} H${x + w} V${y + h} H${x} Z M${x + 6},${y} V${y + h} M${x + w - 6},${y} V${y + h}`;
  return `M${x},${y} H${x + w} V${y + h} H${x} Z`;
}

function start() {
  const source = document.getElementById("gradexport-data");
  const host = document.getElementById("gradexport-viewer");
  if (!source || !host) return;
  const viewer = new Viewer(host, JSON.parse(source.textContent));
  window.gradexportViewer = viewer.api();
  host.focus({ preventScroll: true });
}

start();
