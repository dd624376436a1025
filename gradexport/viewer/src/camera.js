// The view of the drawing: its pan and zoom (one transform on the viewport group), fitting it to
// the canvas, centring on an element, and the pointer gestures that move it (drag pans, wheel zooms).
// Writes: no viewer field.
// Changes: its own transform, bounds and drag, and the transform attribute of the viewport it is given.

/** Fit shows the whole drawing only if its text is at least this fraction of its size. */
const READABLE = 0.5;

export class Camera {
  constructor(svg, viewport) {
    this.svg = svg;
    this.viewport = viewport;
    this.transform = { x: 0, y: 0, k: 1 };
    this.bounds = { width: 1, height: 1 };
    this.fitted = false;
    this.drag = null;
    /** @type {(transform: {x: number, y: number, k: number}) => void} called with the transform after every change (the minimap follows it) */
    this.moved = () => {};
  }

  /** Drag on the canvas pans it, the wheel zooms about the pointer. */
  bindPointer() {
    this.svg.addEventListener("pointerdown", (event) => {
      if (event.button !== 0) return;
      this.drag = { x: event.clientX, y: event.clientY, tx: this.transform.x, ty: this.transform.y, moved: false };
    });
    window.addEventListener("pointermove", (event) => {
      const drag = this.drag;
      if (!drag) return;
      const dx = event.clientX - drag.x;
      const dy = event.clientY - drag.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) drag.moved = true;
      if (drag.moved) {
        this.transform.x = drag.tx + dx;
        this.transform.y = drag.ty + dy;
        this.apply();
      }
    });
    window.addEventListener("pointerup", () => {
      setTimeout(() => (this.drag = null), 0);
    });
    // Embedded in a page, the wheel scrolls the page past the viewer; it zooms with Ctrl (or ⌘),
    // or once the reader has clicked into the drawing, until the pointer leaves it.
    const embedded = window.parent !== window;
    this.engaged = !embedded;
    this.svg.addEventListener("pointerdown", () => (this.engaged = true));
    this.svg.addEventListener("pointerleave", () => (this.engaged = !embedded));
    this.svg.addEventListener(
      "wheel",
      (event) => {
        if (!this.engaged && !event.ctrlKey && !event.metaKey) return;
        event.preventDefault();
        const box = this.svg.getBoundingClientRect();
        this.zoom(Math.exp(-event.deltaY * 0.0015), event.clientX - box.left, event.clientY - box.top);
      },
      { passive: false },
    );
  }

  /** Whether the press that ends now dragged the drawing (its click then is no click). */
  get dragged() {
    return Boolean(this.drag && this.drag.moved);
  }

  /** A new drawing of this size is on the canvas: the first is fitted (readable), the later ones keep the view. */
  redrawn(bounds) {
    this.bounds = bounds;
    if (!this.fitted) {
      this.fit(true);
      this.fitted = true;
    } else this.apply();
  }

  apply() {
    const { x, y, k } = this.transform;
    this.viewport.setAttribute("transform", `translate(${x.toFixed(2)},${y.toFixed(2)}) scale(${k.toFixed(4)})`);
    this.moved(this.transform);
  }

  /** The canvas's size on screen. */
  screen() {
    const box = this.svg.getBoundingClientRect();
    return { width: box.width || 800, height: box.height || 600 };
  }

  /**
   * Fit the drawing. The whole of it when its text stays at least READABLE of its size; a long drawing (a
   * deep net, top to bottom) is fitted across instead, at most 1:1, and shown from its start (the loss),
   * the rest a pan or a minimap click away: the whole of a 12-layer encoder would be a strip a few pixels wide.
   * `readable` (on opening) also keeps the text at least at 70 % size; `below` (px of the drawing) leaves room
   * under it for what is written under its lowest nodes (a replay page's .grad notes).
   */
  fit(readable = false, below = 0) {
    const { width, height } = this.screen();
    const w = this.bounds.width;
    const h = this.bounds.height + below;
    const whole = Math.min(1.5, Math.max(0.02, Math.min(width / w, height / h) * 0.95));
    // Fitted across: the drawing's narrow side fills the canvas's matching side.
    const across = Math.min(1, (h / w > height / width ? width / w : height / h) * 0.95);
    let k = whole < READABLE ? Math.max(whole, across) : whole;
    if (readable) k = Math.max(k, 0.7, Math.min(1, (width / w) * 0.95));
    const x = w * k > width ? 8 : (width - w * k) / 2;
    const y = h * k > height ? 8 : (height - h * k) / 2;
    this.transform = { k, x, y };
    this.apply();
  }

  /** Centre the view on the drawing's point (x, y), at the same zoom. */
  centerAt(x, y) {
    const { width, height } = this.screen();
    const k = this.transform.k;
    this.transform = { k, x: width / 2 - x * k, y: height / 2 - y * k };
    this.apply();
  }

  /** Zoom by `factor` about the canvas point (cx, cy), by default its middle. */
  zoom(factor, cx, cy) {
    const box = this.svg.getBoundingClientRect();
    const x = cx ?? box.width / 2;
    const y = cy ?? box.height / 2;
    const t = this.transform;
    const k = Math.min(8, Math.max(0.01, t.k * factor));
    this.transform = { k, x: x - ((x - t.x) * k) / t.k, y: y - ((y - t.y) * k) / t.k };
    this.apply();
  }

  pan(dx, dy) {
    this.transform.x += dx;
    this.transform.y += dy;
    this.apply();
  }

  /** Bring the drawn element `g` (if any) to the middle of the canvas; `zoomIn` also zooms to at least 1:1 to read it. */
  centerOn(g, zoomIn = false) {
    if (!g) return;
    const b = g.getBBox();
    if (zoomIn) this.transform.k = Math.min(8, Math.max(this.transform.k, 1));
    this.centerAt(b.x + b.width / 2, b.y + b.height / 2);
  }
}
