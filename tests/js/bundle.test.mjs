// A flight-recorder bundle's page without a browser (gradexport/viewer/src/bundle-text.js): the header's lines
// from the summary that gradexport/api/export.py (bundle_page_graphs) writes, and the page each step's viewer runs in,
// which a DOM parser (jsdom) must read back with the very data and script it was given.
import assert from "node:assert/strict";
import { test } from "node:test";

import { JSDOM } from "jsdom";

import { headerLines, viewerPage } from "../../gradexport/viewer/src/bundle-text.js";

/** @type {import("../../gradexport/viewer/src/bundle-text.js").BundleSummary} */
const SUMMARY = {
  bad_step: 17,
  reasons: ["a gradient holds NaN or Inf (the norm over all is nan)"],
  healthy_step: 15,
  healthy_every: 5,
  divergence: "n9",
  divergence_op: "SqrtBackward0",
  divergence_source: "train.py:38: scale = torch.sqrt(s)",
  divergence_step: 6,
  healthy_divergence_step: 6,
  forward_origin: null,
  reproduced: true,
};

test("the header says why the step is bad, where the steps diverge with the forward line, and which healthy step is beside it", () => {
  const lines = headerLines(SUMMARY);
  assert.deepEqual(
    lines.map(([, text]) => text),
    [
      "bad step 17: a gradient holds NaN or Inf (the norm over all is nan)",
      "first node where the steps diverge: SqrtBackward0 (n9), made by the forward line train.py:38: scale = torch.sqrt(s)",
      "beside it: healthy step 15, the last the recorder kept (it keeps one every 5)",
    ],
  );
});

test("the header names the forward origin, a missing healthy step and a step that did not reproduce", () => {
  const origin = { op: "sqrt", cause: "made", source: "m.py:3", source_code: "y = x.sqrt()", module: "block", output: "float32 [2]; 1 NaN" };
  const lines = headerLines({ ...SUMMARY, divergence: null, forward_origin: origin, healthy_step: null, reproduced: false });
  assert.deepEqual(
    lines.map(([name]) => name),
    ["gx-bundle-title", "gx-bundle-divergence", "gx-bundle-origin", "gx-bundle-healthy", "gx-bundle-warning"],
  );
  assert.equal(lines[2][1], "forward origin: sqrt in block at m.py:3: y = x.sqrt() (its inputs were finite; it returned float32 [2]; 1 NaN)");
  assert.equal(lines[3][1], "beside it: no healthy step was kept before it");
});

test("a step's viewer page holds its data and the script intact, whatever the names in them", () => {
  const data = { title: "</script><script>window.bad = 1</script>", nodes: [["<!--", "&amp;"]] };
  const script = "window.ran = (window.ran || 0) + 1;";
  const page = viewerPage('bad step 17 <b>"', data, script);
  const { document } = new JSDOM(page).window;
  assert.equal(document.title, 'bad step 17 <b>"');
  assert.deepEqual(JSON.parse(document.getElementById("gradexport-data").textContent), data);
  const scripts = [...document.querySelectorAll("script")];
  assert.equal(scripts.length, 2);
  assert.equal(scripts[1].textContent.trim(), script);
});

test("an origin the loss function's graph left unsure names the ops that may have made it", () => {
  const origin = { op: "SumBackward0", cause: "unsure", candidates: ["LogBackward0", "SumBackward0"], source: null, source_code: null, module: null, output: "float32 []  1 NaN" };
  const lines = headerLines({ ...SUMMARY, forward_origin: origin });
  assert.equal(
    lines[2][1],
    "forward origin: SumBackward0 (made in the loss function by one of LogBackward0, SumBackward0: the graph kept no value between them; it returned float32 []  1 NaN)",
  );
});
