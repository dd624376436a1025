// Layout libraries side by side on the viewer's own layout requests (written by benchmarks/viewer.py):
//   node benchmarks/viewer_layouts.mjs request.json...
// Prints one JSON line per request: milliseconds (median of 3) for dagre (as the viewer runs it) and ELK's layered algorithm.
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { layout as dagreLayout } from "../gradexport/viewer/src/layout.js";

const require = createRequire(import.meta.url);
const ELK = require("elkjs/lib/elk.bundled.js");
const elk = new ELK();

// ELK lays out the nested boxes itself (hierarchyHandling INCLUDE_CHILDREN); dagre gets them as the viewer
// gives them (one flat layout per box, innermost first; see gradexport/viewer/src/layout.js).
function elkGraph(request) {
  const children = new Map([[null, []]]);
  for (const box of request.boxes) children.set(box.id, []);
  for (const box of request.boxes) {
    const node = { id: box.id, labels: [{ text: box.id, width: box.w, height: box.h }], children: children.get(box.id), layoutOptions: { "elk.padding": "[top=26,left=10,bottom=10,right=10]" } };
    children.get(box.box).push(node);
  }
  for (const item of request.nodes) children.get(item.box).push({ id: item.id, width: item.w, height: item.h });
  return {
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": request.direction === "LR" ? "RIGHT" : "DOWN",
      "elk.hierarchyHandling": "INCLUDE_CHILDREN",
      "elk.edgeLabels.inline": "true",
    },
    children: children.get(null),
    edges: request.edges.map((e) => ({ id: e.id, sources: [e.from], targets: [e.to], labels: [{ text: e.id, width: e.w, height: e.h }] })),
  };
}

async function time(run) {
  const times = [];
  for (let k = 0; k < 3; k++) {
    const start = performance.now();
    await run();
    times.push(performance.now() - start);
  }
  return times.sort((a, b) => a - b)[1];
}

for (const file of process.argv.slice(2)) {
  const request = JSON.parse(readFileSync(file, "utf8"));
  const dagre = await time(() => dagreLayout(request));
  let elkMs = null;
  let elkError = null;
  try {
    elkMs = await time(() => elk.layout(elkGraph(request)));
  } catch (error) {
    elkError = String(error.message || error).slice(0, 200);
  }
  console.log(JSON.stringify({ file, nodes: request.nodes.length, boxes: request.boxes.length, edges: request.edges.length, dagre_ms: dagre, elk_ms: elkMs, elk_error: elkError }));
}
