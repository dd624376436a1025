// The view of the drawing: its pan and zoom (one transform on the viewport group), fitting it to
// the canvas, centring on an element, and the pointer gestures that move it (drag pans, wheel zooms).

export class Camera {
  constructor(svg, viewport) {
    this.svg = svg;
    this.viewport = viewport;
    this.transform = { x: 0, y: 0, k: 1 };
    this.bounds = { width: 1, height: 1 };
    this.fitted = false;
    this.drag = null;
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

  /** Bring the drawn element `g` (if any) to the middle of the canvas, at the same zoom. */
  centerOn(g) {
    if (!g) return;
    const b = g.getBBox();
    const box = this.svg.getBoundingClientRect();
    const k = this.transform.k;
    this.transform.x = box.width / 2 - (b.x + b.width / 2) * k;
    this.transform.y = box.height / 2 - (b.y + b.height / 2) * k;
    this.apply();
  }
}
