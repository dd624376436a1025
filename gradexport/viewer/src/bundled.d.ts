// What scripts/build-viewer.mjs gives the imports that are no files of node_modules, and what main.js adds to the page.

/** The style sheet, as text (esbuild's "text" loader). */
declare module "*.css" {
  const text: string;
  export default text;
}

/** The layout worker (worker.js), bundled first and embedded as the text of its script. */
declare module "worker-source" {
  const source: string;
  export default source;
}

/** The script API (api.js), set by main.js. */
interface Window {
  gradexportViewer: ReturnType<typeof import("./api.js").scriptApi>;
}
