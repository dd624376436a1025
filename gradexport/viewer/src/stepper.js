// The step bar of a replay page: first / previous / next / last, a scrubber, play and pause with a speed, the keys
// (←, →, Home, End, space); at step k it paints every drawn node done / waiting / pending, marks the node being
// called (or the folded group it runs inside) and brings it into view, writes the gradients on its incoming edges
// (per input slot) and outgoing edges (per next_functions position), each leaf's .grad so far, and the step in
// the side panel with the reason the engine runs this node now (steps.js). Names are data: textContent only.
// Writes: no viewer field.
// Changes: its own step and timer, its step bar, the children of viewer.panel, the step classes and notes of the drawn elements, data-playing on viewer.host, and the camera (it shows a small drawing whole, also when the canvas is resized, and centres the running node when it is out of view).
import { el } from "./dom.js";
import { printable } from "./text.js";

const SPEEDS = [0.5, 1, 2, 5, 10, 30];

/** The smallest scale at which a step page shows its whole drawing rather than part of it at 1:1. */
const WHOLE_AT_LEAST = 0.7;
/** Room (px of the drawing) under the lowest nodes for the note written under a leaf (its .grad). */
const NOTE_ROOM = 18;

/** An edge label's text is cut to this many characters (the panel shows the whole tensor). */
const EDGE_TEXT = 12;

/** A tensor record in one line for an edge label: torch's printing squeezed (cut), or its norm. */
export function shortText(tensor, limit = EDGE_TEXT) {
  if (!tensor || (tensor.values === null && !tensor.stats)) return "None";
  if (tensor.values !== undefined && tensor.values !== null) {
    const text = tensor.values.replace(/\s+/g, " ").replace(/^tensor\((.*)\)$/, "$1");
    return text.length > limit ? text.slice(0, limit - 1) + "…" : text;
  }
  const s = tensor.stats;
  return `‖g‖ ${fmt(s.norm)}${s.nonfinite ? ` ${s.nonfinite} non-finite` : ""}`;
}

function fmt(value) {
  return typeof value === "number" ? String(Number(value.toPrecision(4))) : String(value);
}

/** The lines of a tensor for the panel: shape and dtype, then the values as torch prints them or the statistics. */
function tensorBlock(tensor) {
  if (!tensor || tensor.shape === null) return [el("div", { class: "gx-step-none" }, "None")];
  const head = el("div", { class: "gx-step-meta" }, printable(`shape [${tensor.shape.join(", ")}] ${tensor.dtype}`));
  // torch's own printing of numbers (never a name), shown with its line breaks.
  if (tensor.values !== undefined) return [head, el("pre", { class: "gx-step-values" }, tensor.values)];
  const s = tensor.stats;
  const text = `norm ${fmt(s.norm)}  min ${fmt(s.min)}  max ${fmt(s.max)}  mean ${fmt(s.mean)}  non-finite ${s.nonfinite}`;
  return [head, el("div", { class: "gx-step-stats" }, text)];
}

/** @typedef {import("./viewer.js").Viewer} Viewer */

export class Stepper {
  // The step bar's controls, made by build(), which page.js calls before any step is shown.
  /** @type {HTMLButtonElement} */ playButton;
  /** @type {HTMLInputElement} */ scrubber;
  /** @type {HTMLSelectElement} */ speedBox;
  /** @type {HTMLSpanElement} */ label;

  /**
   * @param {Viewer} viewer
   * @param {import("./steps.js").Steps} steps
   */
  constructor(viewer, steps) {
    this.viewer = viewer;
    this.steps = steps;
    /** The step shown. */
    this.k = 0;
    /** @type {ReturnType<typeof setInterval> | null} the player's interval while it plays */
    this.timer = null;
    /** Steps per second. */
    this.speed = 2;
    /** @type {{remove: () => void}[]} what paint() added to the drawing, removed at the next step */
    this.overlays = [];
    /** The drawing edgeMap was made for. */
    this.drawnFor = null;
    /** The drawing showWhole last fitted. */
    this.wholeFor = null;
    /** @type {Map<number, import("./model.js").VisibleEdge>} graph edge → the drawn edge that shows it */
    this.edgeMap = new Map();
  }

  /** The step bar, put above the canvas by page.js. */
  build() {
    const bar = el("div", { class: "gx-stepbar", role: "toolbar", "aria-label": "Steps of the backward pass" });
    const button = (label, hint, action, name) => {
      const b = el("button", { type: "button", title: hint, "data-step": name }, label);
      b.addEventListener("click", () => {
        action();
        this.viewer.host.focus({ preventScroll: true });
      });
      bar.appendChild(b);
      return b;
    };
    button("« first", "First step (Home)", () => this.go(0), "first");
    button("‹ prev", "Previous step (←)", () => this.go(this.k - 1), "prev");
    this.playButton = button("play", "Play or pause (space)", () => this.toggle(), "play");
    button("next ›", "Next step (→)", () => this.go(this.k + 1), "next");
    button("last »", "Last step (End)", () => this.go(this.steps.count - 1), "last");
    this.scrubber = el("input", { type: "range", min: 0, max: Math.max(0, this.steps.count - 1), value: 0, class: "gx-scrubber", "aria-label": "Step" });
    this.scrubber.addEventListener("input", () => this.go(Number(this.scrubber.value)));
    this.speedBox = el("select", { class: "gx-speed", "aria-label": "Steps per second" });
    for (const speed of SPEEDS) {
      const option = el("option", { value: speed }, `${speed} steps/s`);
      if (speed === this.speed) option.selected = true;
      this.speedBox.appendChild(option);
    }
    this.speedBox.addEventListener("change", () => {
      this.speed = Number(this.speedBox.value);
      if (this.timer !== null) this.play();
    });
    this.label = el("span", { class: "gx-step-label", role: "status" });
    // The legend of the node states sits in the bar, where it covers none of the drawing.
    const legend = el("span", { class: "gx-step-legend", "aria-label": "Node states" });
    for (const [state, text] of [["current", "called now"], ["done", "done"], ["waiting", "waiting (inputs arriving)"], ["pending", "not reached"]]) {
      const row = el("span", { class: "gx-legend-row", "data-legend": `step-${state}` });
      row.append(el("span", { class: `gx-swatch gx-step-swatch-${state}` }), document.createTextNode(text));
      legend.appendChild(row);
    }
    bar.append(this.scrubber, this.speedBox, this.label, legend);
    new ResizeObserver(() => this.showWhole()).observe(this.viewer.svg);
    return bar;
  }

  /** The keys of a step page; true when the key was a step key. */
  key(event) {
    const actions = {
      ArrowLeft: () => this.go(this.k - 1),
      ArrowRight: () => this.go(this.k + 1),
      Home: () => this.go(0),
      End: () => this.go(this.steps.count - 1),
      " ": () => this.toggle(),
    };
    const action = actions[event.key];
    if (!action) return false;
    event.preventDefault();
    action();
    return true;
  }

  toggle() {
    if (this.timer === null) this.play();
    else this.pause();
  }

  play() {
    if (this.timer !== null) clearInterval(this.timer);
    if (this.k >= this.steps.count - 1) this.go(0);
    this.timer = setInterval(() => {
      if (this.k >= this.steps.count - 1) this.pause();
      else this.go(this.k + 1);
    }, 1000 / this.speed);
    this.playButton.textContent = "pause";
    this.viewer.host.dataset.playing = "true";
  }

  pause() {
    if (this.timer !== null) clearInterval(this.timer);
    this.timer = null;
    this.playButton.textContent = "play";
    delete this.viewer.host.dataset.playing;
  }

  /** Go to step k (clamped) and show it; returns the step as data. */
  go(k) {
    this.k = Math.max(0, Math.min(this.steps.count - 1, Math.trunc(Number(k)) || 0));
    this.scrubber.value = String(this.k);
    this.label.textContent = `step ${this.k + 1} / ${this.steps.count}`;
    const record = this.steps.step(this.k);
    this.paint(record);
    this.showPanel(record);
    return record;
  }

  /** Graph edge → the drawn edge that shows it, recomputed when the drawing changes. */
  drawnEdges() {
    const drawn = this.viewer.drawn;
    if (this.drawnFor !== drawn) {
      this.edgeMap = new Map();
      if (drawn) for (const edge of drawn.edges) for (const e of edge.edges) this.edgeMap.set(e, edge);
      this.drawnFor = drawn;
    }
    return this.edgeMap;
  }

  /** Paint the drawing for the step `record` (also called by draw.js after each layout). */
  paint(record = this.steps.step(this.k)) {
    const viewer = this.viewer;
    const drawn = viewer.drawn;
    for (const overlay of this.overlays) overlay.remove();
    this.overlays = [];
    if (!drawn) return;
    const { graph, folds } = viewer;
    const { steps, k } = this;
    const v = steps.nodes[k];
    const current = drawn.rep[v];
    for (const item of drawn.items) {
      const g = drawn.elements.get(item);
      if (!g) continue;
      const state = folds.isGroup(item) ? null : steps.state(item, k);
      for (const name of ["done", "waiting", "pending"]) g.classList.toggle(`gx-step-${name}`, state === name);
      g.classList.toggle("gx-step-current", item === current);
      g.classList.toggle("gx-step-ready", state === "waiting" && steps.ready(item, k));
      if (state !== null && graph.field(item, "kind") === "leaf") {
        const grad = steps.leafGrad(item, k);
        if (grad) this.note(g, g.querySelector(".gx-shape"), `.grad ${shortText(grad, 16)}`, "gx-step-grad", true);
      }
    }
    if (this.wholeFor !== drawn) {
      this.wholeFor = drawn;
      this.showWhole();
    }
    const currentElement = drawn.elements.get(current);
    if (currentElement) {
      currentElement.dataset.running = folds.isGroup(current) ? `running inside: ${graph.id(v)} ${record.op}` : "";
      if (folds.isGroup(current)) this.note(currentElement, currentElement.querySelector(".gx-shape"), `▶ running inside: ${record.op}`, "gx-step-inside", true);
      // The view moves only to bring the node in: a drawing fitted whole stays whole, step after step.
      const node = (currentElement.querySelector(".gx-shape") || currentElement).getBoundingClientRect();
      const canvas = viewer.svg.getBoundingClientRect();
      if (node.left < canvas.left || node.right > canvas.right || node.top < canvas.top || node.bottom > canvas.bottom) viewer.camera.centerOn(currentElement);
    }
    const edges = this.drawnEdges();
    const labelled = new Set();
    const label = (e, text, cls) => {
      const edge = edges.get(e);
      const element = edge && edge.element;
      if (!edge || !element || labelled.has(edge)) return;
      labelled.add(edge);
      element.classList.add(cls);
      this.overlays.push({ remove: () => element.classList.remove(cls) });
      this.note(element, element.querySelector(".gx-edge-label rect"), text, `gx-step-flow ${cls}-text`, false);
    };
    for (const input of record.inputs) {
      for (const arrival of input.edges) label(arrival.edge, shortText(arrival), "gx-step-in");
    }
    for (const output of record.outputs) {
      if (output.edge !== null) label(output.edge, shortText(output), "gx-step-out");
    }
  }

  /**
   * A new drawing, or a canvas of a new size: where the drawing is not all in view but the canvas can show all of
   * it with its text at WHOLE_AT_LEAST of its size or more, show all of it (the camera's first fit prefers 1:1 and
   * may leave the leaves below the edge), so that every step is seen in the whole pass. The canvas changes size
   * when an embedding page lays its frame out after the first drawing.
   */
  showWhole() {
    const camera = this.viewer.camera;
    if (!this.viewer.drawn || !this.viewer.svg.getBoundingClientRect().height) return;
    const { width, height } = camera.screen();
    const { width: w, height: h } = camera.bounds;
    const { x, y, k } = camera.transform;
    const inView = x >= 0 && y >= 0 && x + w * k <= width && y + (h + NOTE_ROOM) * k <= height;
    if (!inView && Math.min(width / w, height / (h + NOTE_ROOM)) * 0.95 >= WHOLE_AT_LEAST) camera.fit(false, NOTE_ROOM);
  }

  /** A text under `anchor` (an SVG rect or path inside group g), removed at the next step. */
  note(g, anchor, text, cls, below) {
    if (!anchor) return;
    const box = anchor.getBBox();
    // The edge's own label already says i→k; the note under it is the gradient that flows along it.
    const t = el("svg:text", { class: cls, x: box.x + box.width / 2, y: below ? box.y + box.height + 13 : box.y + box.height + 12, "text-anchor": "middle" });
    t.textContent = printable(text.length > 90 ? text.slice(0, 89) + "…" : text);
    g.appendChild(t);
    this.overlays.push(t);
  }

  /** The step in the side panel: node, op, module, why now, what it computes, inputs per slot, outputs per position, the leaf's .grad. */
  showPanel(record) {
    const { panel } = this.viewer;
    const steps = this.steps;
    panel.replaceChildren();
    const section = el("section", { class: "gx-step-panel", "data-step-index": record.index });
    section.appendChild(el("h2", {}, printable(`Step ${record.index + 1} of ${steps.count}: ${record.op}`)));
    const facts = el("dl", { class: "gx-attributes" });
    const fact = (key, value) => facts.append(el("dt", {}, key), el("dd", { "data-fact": key }, printable(value)));
    fact("node", record.node);
    if (record.variables) fact("in the code", record.variables.join(", "));
    fact("op", record.op);
    const title = this.viewer.graph.field(steps.nodes[record.index], "names");
    if (Array.isArray(title) && title.length) fact("leaf", title.join(", "));
    if (record.module !== undefined) fact("module", record.module);
    section.appendChild(facts);
    section.appendChild(el("h3", {}, "Why now"));
    section.appendChild(el("p", { class: "gx-step-reason" }, steps.reason(record.index)));
    if (record.math) section.append(...mathBlocks(record.math));
    section.appendChild(el("h3", {}, "Inputs (per input slot)"));
    for (const input of record.inputs) {
      const block = el("div", { class: "gx-step-slot", "data-slot": input.slot });
      const from = input.edges.map((arrival) => `${steps.label(arrival.from)}[${arrival.position}]`).join(" + ");
      block.appendChild(el("div", { class: "gx-step-head" }, printable(`slot ${input.slot}` + (from ? ` ← ${from}` : "") + (input.edges.length > 1 ? " (summed)" : ""))));
      block.append(...tensorBlock(input));
      section.appendChild(block);
    }
    section.appendChild(el("h3", {}, "Outputs (per next_functions position)"));
    if (!record.outputs.length) section.appendChild(el("p", { class: "gx-hint" }, "none: a leaf's AccumulateGrad has no next_functions"));
    for (const output of record.outputs) {
      const block = el("div", { class: "gx-step-position", "data-position": output.position });
      const to = output.to === null ? " → (None, 0)" : ` → ${steps.label(output.to)} slot ${output.input_nr}`;
      block.appendChild(el("div", { class: "gx-step-head" }, printable(`${output.position}→${output.input_nr ?? "-"}${to}`)));
      block.append(...tensorBlock(output));
      section.appendChild(block);
    }
    if (record.grad) {
      section.appendChild(el("h3", {}, "The leaf's .grad after this step"));
      section.append(...tensorBlock(record.grad));
    }
    panel.appendChild(section);
  }
}

/**
 * The panel's account of what the node computes: the forward operation and its local derivative, then each
 * vector–Jacobian product with the values it uses and what it gives; or why there is no formula.
 * @param {import("./steps.js").StepMath} math
 */
function mathBlocks(math) {
  const blocks = [el("h3", {}, "What it computes")];
  if (math.note) return [...blocks, el("p", { class: "gx-step-note" }, printable(math.note))];
  const formula = (/** @type {string} */ label, /** @type {string} */ text) => {
    const line = el("div", { class: "gx-step-formula" });
    line.append(el("span", { class: "gx-hint" }, label), el("code", {}, printable(text)));
    return line;
  };
  blocks.push(formula("forward ", math.forward), formula("local derivative ", math.local));
  for (const product of math.products) {
    const block = el("div", { class: "gx-step-product", "data-position": product.position });
    block.appendChild(el("div", { class: "gx-step-head" }, printable(`${product.text}  (vector–Jacobian product, to position ${product.position})`)));
    for (const term of product.terms) {
      block.appendChild(el("div", { class: "gx-step-term", "data-symbol": term.symbol }, printable(`${term.symbol} =`)));
      block.append(...tensorBlock(term));
    }
    block.appendChild(el("div", { class: "gx-step-term gx-step-result" }, printable(`${product.text.split(" = ")[0]} =`)));
    block.append(...tensorBlock(product.value));
    blocks.push(block);
  }
  return blocks;
}
