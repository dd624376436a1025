// The layout Web Worker: started from a Blob URL (works from file:// and in an iframe srcdoc).
// Writes: no viewer field.
// Changes: the worker's onmessage.
import { layout } from "./layout.js";

self.onmessage = (event) => {
  const { serial, request } = event.data;
  self.postMessage({ serial, result: layout(request) });
};
