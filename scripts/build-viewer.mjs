// Bundle the viewer (gradexport/viewer/src) into one script shipped in the Python package.
//   node scripts/build-viewer.mjs [output folder]   (default: gradexport/viewer)
// Writes viewer.bundle.js and the licences of the bundled layout library beside it.
// The layout worker is bundled first and embedded in the page script as a string,
// which the page starts from a Blob URL: one file, nothing fetched, works from file://.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const source = join(root, "gradexport", "viewer", "src");
const output = resolve(process.argv[2] || join(root, "gradexport", "viewer"));
const modules = join(root, "node_modules", "@dagrejs");
const version = (name) => JSON.parse(readFileSync(join(modules, name, "package.json"), "utf8")).version;

const common = { bundle: true, minify: true, format: "iife", target: "es2020", legalComments: "none", write: false, logLevel: "error" };

const worker = await build({ ...common, entryPoints: [join(source, "worker.js")] });
const workerText = worker.outputFiles[0].text;

const embedWorker = {
  name: "worker-source",
  setup(b) {
    b.onResolve({ filter: /^worker-source$/ }, () => ({ path: "worker-source", namespace: "worker-source" }));
    b.onLoad({ filter: /.*/, namespace: "worker-source" }, () => ({ contents: `export default ${JSON.stringify(workerText)};`, loader: "js" }));
  },
};

const page = await build({
  ...common,
  entryPoints: [join(source, "main.js")],
  loader: { ".css": "text" },
  plugins: [embedWorker],
});

const dagreVersion = version("dagre");
const graphlibVersion = version("graphlib");
const header =
  `/* gradexport viewer, built by scripts/build-viewer.mjs from gradexport/viewer/src. Do not edit.\n` +
  ` * Bundles @dagrejs/dagre ${dagreVersion} and @dagrejs/graphlib ${graphlibVersion} (MIT, see LICENSE.dagre.txt and LICENSE.graphlib.txt). */\n`;
mkdirSync(output, { recursive: true });
writeFileSync(join(output, "viewer.bundle.js"), header + page.outputFiles[0].text);
copyFileSync(join(modules, "dagre", "LICENSE"), join(output, "LICENSE.dagre.txt"));
copyFileSync(join(modules, "graphlib", "LICENSE"), join(output, "LICENSE.graphlib.txt"));
