// The page's side of the layout: requests go to the Web Worker (worker.js, embedded by the build as
// the string "worker-source" and started from a Blob URL), or, where a sandbox forbids workers, to the
// same code run on the page.
// Writes: no viewer field.
// Changes: its own serial and pending requests.
import workerSource from "worker-source";

/**
 * @typedef {import("./layout.js").LayoutRequest} LayoutRequest
 * @typedef {import("./layout.js").LayoutResult} LayoutResult
 * @typedef {{serial: number, result: LayoutResult}} Answer
 * The worker's global scope, stood in for on the page: worker.js sets its onmessage.
 * @typedef {{postMessage: (answer: Answer) => void, onmessage?: (event: {data: {serial: number, request: LayoutRequest}}) => void}} InlineScope
 */

export class LayoutClient {
  constructor() {
    /** The number of the latest request: an answer to an older one is out of date. */
    this.serial = 0;
    /** @type {Map<number, {resolve: (result: LayoutResult) => void, request: LayoutRequest}>} */
    this.pending = new Map();
    /** @type {Worker | null} the layout worker; null where none could start */
    this.worker = null;
    /** @type {InlineScope | null} the worker's code run on the page instead */
    this.inline = null;
    /** @param {Answer} message */
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
    } catch {
      this.fallBack(deliver);
    }
  }

  /** @param {(answer: Answer) => void} deliver */
  fallBack(deliver) {
    // No worker (a sandbox forbids it): run the same code on the page.
    if (this.inline) return;
    this.worker = null;
    /** @type {InlineScope} */
    const scope = { postMessage: deliver };
    new Function("self", workerSource)(scope);
    this.inline = scope;
    // Requests the worker never answered are laid out here.
    for (const [serial, { request }] of this.pending) setTimeout(() => this.layOutInline(serial, request), 0);
  }

  /**
   * Lay `request` out with the worker's code on the page (fallBack loaded it, as it does before the worker is dropped).
   * @param {number} serial
   * @param {LayoutRequest} request
   */
  layOutInline(serial, request) {
    const onmessage = this.inline && this.inline.onmessage;
    if (!onmessage) throw new Error("LayoutClient.layOutInline: the worker's code is not loaded on the page; call fallBack first");
    onmessage({ data: { serial, request } });
  }

  /**
   * A Promise of {serial, result}: the request's number and its layout (see layout.js).
   * @param {LayoutRequest} request
   * @returns {Promise<Answer>}
   */
  request(request) {
    const serial = ++this.serial;
    return new Promise((/** @type {(result: LayoutResult) => void} */ resolve) => {
      this.pending.set(serial, { resolve, request });
      if (this.worker) this.worker.postMessage({ serial, request });
      else setTimeout(() => this.layOutInline(serial, request), 0);
    }).then((result) => ({ serial, result }));
  }
}
