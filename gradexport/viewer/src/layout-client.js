// The page's side of the layout: requests go to the Web Worker (worker.js, embedded by the build as
// the string "worker-source" and started from a Blob URL), or, where a sandbox forbids workers, to the
// same code run on the page.
import workerSource from "worker-source";

export class LayoutClient {
  constructor() {
    /** The number of the latest request: an answer to an older one is out of date. */
    this.serial = 0;
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

  /** A Promise of {serial, result}: the request's number and its layout (see layout.js). */
  request(request) {
    const serial = ++this.serial;
    return new Promise((resolve) => {
      this.pending.set(serial, { resolve, request });
      if (this.worker) this.worker.postMessage({ serial, request });
      else setTimeout(() => this.inline.onmessage({ data: { serial, request } }), 0);
    }).then((result) => ({ serial, result }));
  }
}
