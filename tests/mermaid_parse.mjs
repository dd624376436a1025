// Parse Mermaid diagrams with mermaid.js itself (from node_modules), under jsdom.
//
//   node tests/mermaid_parse.mjs FILE.mmd ...     parse files
//   node tests/mermaid_parse.mjs < diagrams.json  parse a JSON array of diagram texts
//
// Prints a JSON array, one result per diagram: {"ok": true, "vertices": {id: {text, classes}},
// "edges": [{"start", "end", "text"}], "subgraphs": [{"id", "title", "nodes"}]} or {"ok": false, "error": message}. Texts are
// as mermaid's parser stores them, entity codes still encoded ("#35;" as "ﬂ°°35¶ß").
// Exit status 0 when every diagram parsed, 1 otherwise. One process parses a whole
// batch: starting Node and loading mermaid takes about a second.
import { readFileSync } from "node:fs";
import { JSDOM } from "jsdom";

const dom = new JSDOM("<!DOCTYPE html><body></body>");
globalThis.window = dom.window;
globalThis.document = dom.window.document;
const { default: mermaid } = await import("mermaid");
mermaid.initialize({ startOnLoad: false });

const files = process.argv.slice(2);
const texts = files.length ? files.map((file) => readFileSync(file, "utf8")) : JSON.parse(readFileSync(0, "utf8"));

const results = [];
for (const text of texts) {
  try {
    await mermaid.parse(text);
    const diagram = await mermaid.mermaidAPI.getDiagramFromText(text);
    const vertices = {};
    for (const [id, vertex] of diagram.db.getVertices()) vertices[id] = { text: vertex.text, classes: vertex.classes };
    const edges = diagram.db.getEdges().map((edge) => ({ start: edge.start, end: edge.end, text: edge.text }));
    const subgraphs = diagram.db.getSubGraphs().map((sub) => ({ id: sub.id, title: sub.title, nodes: sub.nodes }));
    results.push({ ok: true, vertices, edges, subgraphs });
  } catch (error) {
    results.push({ ok: false, error: String(error?.message ?? error) });
  }
}
process.stdout.write(JSON.stringify(results));
process.exitCode = results.every((result) => result.ok) ? 0 : 1;
