"""The viewer's texts (gradexport/viewer/src/text.js) against the Python writers' (gradexport.formats.labels).

text.js says it writes each text as the Python function of the same name does; node runs it here on the same
inputs, so a drift on either side fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

from format_fixtures import needs_tool

from gradexport.formats.html import _MARK_WORDS
from gradexport.formats.labels import byte_text, node_lines, printable, tensor_text

REPO = Path(__file__).resolve().parent.parent
TEXT_JS = REPO / "gradexport" / "viewer" / "src" / "text.js"

needs_node = needs_tool(shutil.which("node") is None, "Node.js is needed to run the viewer's modules (make setup installs it)")

#: Reads [[function, args...], ...] on stdin, writes each result; nodeLines's module classes come as a Map, as the viewer holds them.
RUNNER = """
import { readFileSync } from "node:fs";
const text = await import(process.argv[1]);
const calls = JSON.parse(readFileSync(0, "utf8"));
const call = ([name, ...args]) => (name === "nodeLines" ? text.nodeLines(args[0], args[1], args[2], new Map(Object.entries(args[3]))) : text[name](...args));
process.stdout.write(JSON.stringify(calls.map(call)));
"""

PRINTABLE = ["plain", "a\nb\x00", "tab\there\r", "\x7f\x80\x9f", "\u2028x\u2029", "lone \ud800 \udfff", "\ufffe\uffff", "ünïcode ✓ 𝔸"]
BYTES = [0, 1, 1023, 1024, 1536, 2**20 - 1, 3 * 2**20, 5 * 2**30, 2**50]
TENSORS: list[dict[str, Any]] = [
    {"shape": [2]},
    {"shape": []},
    {"shape": [3, 4], "dtype": "float16"},
    {"shape": [1], "dtype": "float32", "device": "cuda:0"},
    {"dtype": "int64"},
]
NODES: list[dict[str, Any]] = [
    {"kind": "backward", "op": "MulBackward0"},
    {"kind": "backward", "op": "CppFunction", "special": "opaque"},
    {"kind": "root", "root": "loss", "shape": [], "dtype": "float32"},
    {"kind": "leaf", "names": ["fc.weight", "tied"], "shape": [4, 4], "dtype": "float64", "device": "cpu"},
    {"kind": "leaf", "shape": [2]},
    {"kind": "none"},
    {"kind": "backward", "op": "AddBackward0", "exec_order": 3, "diff": "added"},
    {"kind": "backward", "op": "ExpBackward0", "diff": "changed", "changes": {"op": ["A", "B"], "sequence_nr": [1, 2]}},
    {"kind": "backward", "op": "DivBackward0", "diff": "changed"},
    {"kind": "backward", "op": "LogBackward0", "nonfinite": "origin", "diff": "removed"},
    {"kind": "backward", "op": "MmBackward0", "saved_bytes": 4096, "saved_bytes_shared": 512},
    {"kind": "backward", "op": "name\nwith\tcontrols"},
    {"kind": "backward", "op": "Long" * 80},
    {"kind": "leaf", "names": ["𝔸" * 250], "shape": [1]},
    {"kind": "module", "module": "encoder.layer", "num_nodes": 12},
    {"kind": "module", "module": "head", "num_nodes": 1},
    {"kind": "module", "module": "", "num_nodes": 40},
    {"kind": "module", "module": "unclassed"},
]
#: The graph's module_classes (gradexport.collapse folds modules into nodes of kind "module").
CLASSES = {"encoder.layer": "TransformerEncoderLayer", "": "Net", "head": "Linear"}
OPTIONS = [{"exec_order": False, "saved_bytes": False}, {"exec_order": True, "saved_bytes": True}]


def run_text_js(calls: list[list[Any]]) -> list[Any]:
    result = subprocess.run(
        ["node", "--input-type=module", "-e", RUNNER, TEXT_JS.as_uri()],
        input=json.dumps(calls).encode(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


@needs_node
def test_printable_byte_and_tensor_texts_match_the_python_writers() -> None:
    calls = [["printable", text] for text in PRINTABLE] + [["byteText", count] for count in BYTES]
    calls += [["tensorText", record] for record in TENSORS]
    expected = [printable(text) for text in PRINTABLE] + [byte_text(count) for count in BYTES]
    expected += [tensor_text(record) for record in TENSORS]
    assert run_text_js(calls) == expected


@needs_node
def test_node_lines_match_the_python_writers_for_the_lines_the_viewer_shows() -> None:
    # The viewer shows no saved tensors and no module line on a node (its panel has them): show_saved and show_module off.
    calls = [["nodeLines", attributes, options, _MARK_WORDS, CLASSES] for options in OPTIONS for attributes in NODES]
    expected = [
        list(node_lines(attributes, False, False, exec_order=options["exec_order"], saved_bytes=options["saved_bytes"], classes=CLASSES))
        for options in OPTIONS
        for attributes in NODES
    ]
    assert run_text_js(calls) == expected
