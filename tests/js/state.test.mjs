// The state each viewer module may touch is written in its header: "Writes:" names the viewer fields it assigns.
// These tests hold each header to the assignments in the module's code, and each named field to a declaration
// of the Viewer class (viewer.js), so that the written rule and the code cannot drift apart.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const SOURCE = fileURLToPath(new URL("../../gradexport/viewer/src/", import.meta.url));
const modules = readdirSync(SOURCE).filter((name) => name.endsWith(".js")).sort();
const read = (name) => readFileSync(join(SOURCE, name), "utf8");

/** The fields a module's code assigns: `viewer.x = `, `this.viewer.x = ` (and `this.x = ` in viewer.js itself). */
function assigned(name, code) {
  const pattern = name === "viewer.js" ? /\bthis\.(\w+)\s*(?:[-+*/]?=(?!=)|\+\+|--)/g : /\bviewer\.(\w+)\s*(?:[-+*/]?=(?!=)|\+\+|--)/g;
  return new Set([...code.matchAll(pattern)].map((match) => match[1]));
}

/** The fields a module's header says it writes; null where the header has no "Writes:" line. */
function declared(code) {
  const line = code.split("\n").find((text) => text.startsWith("// Writes: "));
  if (!line) return null;
  return new Set([...line.matchAll(/\bviewer\.(\w+)/g)].map((match) => match[1]));
}

/** The fields the Viewer class declares: class fields and `this.x = ` in its constructor. */
function viewerFields() {
  const code = read("viewer.js");
  const body = code.slice(code.indexOf("export class Viewer"));
  const fields = [...body.matchAll(/^ {2}\/\*\*.*\*\/ (\w+)(?: = [^;]+)?;$/gm)].map((match) => match[1]);
  return new Set([...fields, ...assigned("viewer.js", body)]);
}

test("every module's header says which viewer fields it writes", () => {
  const missing = modules.filter((name) => declared(read(name)) === null);
  assert.deepEqual(missing, []);
});

test("each module writes exactly the viewer fields its header names", () => {
  for (const name of modules.filter((module) => module !== "viewer.js")) {
    const code = read(name);
    assert.deepEqual([...assigned(name, code)].sort(), [.../** @type {Set<string>} */ (declared(code))].sort(), `${name}: its "Writes:" line and its code`);
  }
});

test("viewer.js writes only in the constructor and selectItem, fields the class declares", () => {
  const code = read("viewer.js");
  const fields = viewerFields();
  for (const name of modules) {
    for (const field of assigned(name, read(name))) assert.ok(fields.has(field), `${name} writes viewer.${field}, which the Viewer class does not declare`);
  }
  const methods = code.slice(code.indexOf("\n  /** On a diff's page"));
  assert.deepEqual([...assigned("viewer.js", methods)].sort(), ["marks", "selected"]);
});

test("the rule checks what it claims: an assignment the header leaves out is found", () => {
  const code = "// Writes: viewer.drawn.\nviewer.drawn = x;\nthis.viewer.panel = y;\nif (viewer.selected === 1) z();";
  assert.deepEqual([...assigned("draw.js", code)].sort(), ["drawn", "panel"]);
  assert.deepEqual([.../** @type {Set<string>} */ (declared(code))], ["drawn"]);
});
