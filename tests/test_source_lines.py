"""capture_source: each backward node names the line of a file written here that made it."""

from __future__ import annotations

import gc
import importlib
import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch._dynamo.testing import CompileCounter

import gradexport

PROGRAM = textwrap.dedent(
    """
    import torch
    import torch.utils.checkpoint


    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2


    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):
            h = self.linear(x)  # @linear
            return torch.tanh(h)  # @tanh


    def ops(x):
        a = x * 2  # @mul
        b = a.exp()  # @exp
        c = b.sum()  # @sum
        return c


    def loop(x):
        for _ in range(3):
            x = x.sin()  # @sin
        return x


    square = lambda x: x ** 2  # @lambda


    def body(x):
        return x.cos() * 3


    compiled = torch.compile(body, backend="aot_eager")


    def compiled_call(x):
        y = compiled(x)  # @compiled
        return y.sum()  # @compiled_sum


    def custom(x):
        y = Double.apply(x)  # @custom
        return y.mean()  # @custom_mean


    def checkpointed(x):
        y = torch.utils.checkpoint.checkpoint(torch.sigmoid, x, use_reentrant=False)  # @checkpoint
        z = torch.utils.checkpoint.checkpoint(torch.sigmoid, y, use_reentrant=True)  # @reentrant
        return z.sum()  # @checkpoint_sum
    """
)

#: The ops that torch itself records for each marked line (by `next_functions`).
EXPECTED = {
    "mul": {"MulBackward0"},
    "exp": {"ExpBackward0"},
    "sum": {"SumBackward0"},
    "linear": {"AddmmBackward0", "TBackward0", "ViewBackward0"},
    "tanh": {"TanhBackward0"},
    "sin": {"SinBackward0"},
    "lambda": {"PowBackward0"},
    "compiled": {"CompiledFunctionBackward"},
    "compiled_sum": {"SumBackward0"},
    "custom": {"DoubleBackward"},
    "custom_mean": {"MeanBackward0"},
    "checkpoint": {"SigmoidBackward0"},
    "reentrant": {"CheckpointFunctionBackward"},
    "checkpoint_sum": {"SumBackward0"},
}


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModuleType, Path, dict[int, str]]:
    path = tmp_path_factory.mktemp("user") / "user_program.py"
    path.write_text(PROGRAM)
    spec = importlib.util.spec_from_file_location("user_program", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_program"] = module
    spec.loader.exec_module(module)
    markers = {number: line.rsplit("# @", 1)[1] for number, line in enumerate(PROGRAM.splitlines(), 1) if "# @" in line}
    return module, path, markers


def _sources(graph: gradexport.streams.GraphStream | object) -> dict[str, tuple[str, str, str]]:
    assert hasattr(graph, "nodes")
    return {
        node: (data["op"], data["source"], data["source_code"])
        for node, data in graph.nodes(data=True)  # type: ignore[attr-defined]
        if data["kind"] == "backward"
    }


def _check(graph: object, path: Path, markers: dict[int, str], wanted: set[str], shown: str | None = None) -> None:
    """Every backward node's line is a marked line whose ops torch says include the node's op, and every wanted line made a node."""
    shown = shown or str(path)
    seen: set[str] = set()
    text = PROGRAM.splitlines()
    for node, (op, source, code) in _sources(graph).items():
        file, _, number = source.rpartition(":")
        assert file == shown, (node, source)
        marker = markers.get(int(number))
        assert marker is not None, f"{node} {op} attributed to unmarked line {source}"
        assert op in EXPECTED[marker], (node, op, marker)
        assert code == text[int(number) - 1].strip()
        seen.add(marker)
    assert seen == wanted


def test_each_op_on_its_own_line(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, markers = program
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source():
        out = module.ops(x)
    graph = gradexport.to_networkx(out)
    _check(graph, path, markers, {"mul", "exp", "sum"})
    assert {data["source_function"] for _, data in graph.nodes(data=True) if "source" in data} == {"ops"}


def test_module_forward_loop_and_lambda(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, markers = program
    x = torch.randn(2, 3, requires_grad=True)
    with gradexport.tools.capture_source():
        out = module.square(module.loop(module.Block()(x)))
    graph = gradexport.to_networkx(out)
    _check(graph, path, markers, {"linear", "tanh", "sin", "lambda"})
    sines = [data for _, data in graph.nodes(data=True) if data.get("op") == "SinBackward0"]
    assert len(sines) == 3 and {data["source_function"] for data in sines} == {"loop"}
    assert {data["source_function"] for _, data in graph.nodes(data=True) if data.get("op") == "PowBackward0"} == {"<lambda>"}


def test_compiled_function_is_one_line_and_does_not_break_the_graph(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, markers = program
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source():
        out = module.compiled_call(x)
    graph = gradexport.to_networkx(out)
    _check(graph, path, markers, {"compiled", "compiled_sum"})
    # Dynamo traces the same single graph with the mode on as without it.
    counter = CompileCounter()
    with gradexport.tools.capture_source():
        explained = torch._dynamo.explain(module.body)(x)
        torch.compile(module.body, backend=counter)(x)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    assert counter.frame_count == 1


def test_custom_function_and_checkpoints(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, markers = program
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source():
        custom = module.custom(x)
        checkpointed = module.checkpointed(x)
    _check(gradexport.to_networkx(custom), path, markers, {"custom", "custom_mean"})
    _check(gradexport.to_networkx(checkpointed), path, markers, {"checkpoint", "reentrant", "checkpoint_sum"})
    # The gradients are those of a run without the capture.
    custom.backward()
    with_capture = x.grad.clone()  # type: ignore[union-attr]
    x.grad = None
    module.custom(x).backward()
    assert torch.equal(with_capture, x.grad)  # type: ignore[arg-type]


def test_path_is_relative_inside_the_working_directory(program: tuple[ModuleType, Path, dict[int, str]], monkeypatch: pytest.MonkeyPatch) -> None:
    module, path, markers = program
    monkeypatch.chdir(path.parent)
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source():
        out = module.ops(x)
    _check(gradexport.to_networkx(out), path, markers, {"mul", "exp", "sum"}, shown="user_program.py")


def test_stack_keeps_every_user_frame(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, _ = program
    x = torch.randn(2, 3, requires_grad=True)
    with gradexport.tools.capture_source(stack=True):
        out = module.Block()(x)  # this test's line is the outer frame
    tanh = next(data for _, data in gradexport.to_networkx(out).nodes(data=True) if data.get("op") == "TanhBackward0")
    inner, outer = tanh["source_stack"][:2]  # then pytest's frames
    assert inner.startswith(f"{path}:") and inner.endswith(" in forward")
    assert outer.endswith(" in test_stack_keeps_every_user_frame") and "test_source_lines.py:" in outer
    assert tanh["source"] == inner.rsplit(" in ", 1)[0]


def test_no_source_without_the_context(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, _, _ = program
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source():
        pass
    graph = gradexport.to_networkx(module.ops(x))
    assert not [node for node, data in graph.nodes(data=True) if any(key.startswith("source") for key in data)]
    # Nodes made before the block are not claimed by it.
    before = module.ops(x)
    with gradexport.tools.capture_source():
        after = before * 1
    claimed = {data["op"] for _, data in gradexport.to_networkx(after).nodes(data=True) if "source" in data}
    assert claimed == {"MulBackward0"}


def test_no_cost_when_unused(monkeypatch: pytest.MonkeyPatch) -> None:
    """Until capture_source is entered, the walk reads no node's metadata."""
    # The plugin's tests may have re-imported the library (as `mkdocs serve` does): use the modules in use now.
    library = importlib.import_module("gradexport")
    used_lines = importlib.import_module("gradexport.tracing.lines")
    graph_module = importlib.import_module("gradexport.tracing.graph")
    monkeypatch.setattr(used_lines, "USED", False)
    read: list[object] = []
    original = used_lines.source_of
    monkeypatch.setattr(graph_module, "source_of", lambda node: read.append(node) or original(node))
    x = torch.randn(3, requires_grad=True)
    library.to_networkx((x * 2).sum())
    assert read == []
    with library.tools.capture_source():
        y = (x * 2).sum()
    library.to_networkx(y)
    assert len(read) == 2
    after = library.to_networkx((x * 2).sum())  # the mode is gone with the block
    assert not [data for _, data in after.nodes(data=True) if "source" in data]


def test_nests_with_capture_modules() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Tanh())
    with gradexport.capture_modules(), gradexport.tools.capture_source():
        out = model(torch.randn(1, 3)).sum()
    graph = gradexport.to_networkx(out, module=model)
    tanh = next(data for _, data in graph.nodes(data=True) if data.get("op") == "TanhBackward0")
    assert tanh["module"] == "1" and tanh["source_code"] == "out = model(torch.randn(1, 3)).sum()"


def test_nested_blocks_keep_the_inner_line(program: tuple[ModuleType, Path, dict[int, str]]) -> None:
    module, path, markers = program
    x = torch.randn(3, requires_grad=True)
    with gradexport.tools.capture_source(), gradexport.tools.capture_source():
        out = module.ops(x)
    _check(gradexport.to_networkx(out), path, markers, {"mul", "exp", "sum"})


def test_a_file_name_with_a_lone_surrogate_does_not_stop_the_trace():
    """``compile(..., "\\ud800.py", ...)``: linecache's os.stat raised UnicodeEncodeError out of to_networkx."""
    namespace: dict[str, object] = {}
    exec(compile("def double_sum(x):\n    return (x * 2).sum()\n", "\ud800.py", "exec"), namespace)
    x = torch.ones(2, requires_grad=True)
    with gradexport.tools.capture_source():
        loss = namespace["double_sum"](x)  # type: ignore[operator]
    graph = gradexport.to_networkx(loss, params={"x": x})
    made_there = {data["source"]: data["source_code"] for _, data in graph.nodes(data=True) if "source" in data}
    assert made_there == {"\ud800.py:2": ""}  # the line, with no text: there is no such file to read it from
    assert gradexport.from_json(gradexport.to_json(graph)).nodes(data="source") == graph.nodes(data="source")
    assert "\\ud800.py:2" in gradexport.to_dot(graph)


def test_code_made_and_dropped_again_and_again_keeps_its_own_line() -> None:
    """The capture keeps its verdicts and lines by a code object's id: a code object dropped must not lend its id, and so its line, to the next."""
    x = torch.ones(2, requires_grad=True)
    for padding in range(1, 11):
        namespace: dict[str, Any] = {}
        exec(compile("\n" * padding + "def double(x):\n    return x * 2\n", "made_here.py", "exec"), namespace)
        with gradexport.tools.capture_source():
            out = namespace["double"](x)
        sources = {data["source"] for _, data in gradexport.to_networkx(out).nodes(data=True) if "source" in data}
        assert sources == {f"made_here.py:{padding + 2}"}
        del namespace, out
        gc.collect()  # the function and its globals hold each other: the code object goes now


def test_each_op_of_a_long_function_names_its_own_line() -> None:
    """Lines are kept by code object and instruction: the ops on 200 lines of one function, run twice, each name their own line."""
    body = "".join(f"    x = x * {number}\n" for number in range(2, 202))
    namespace: dict[str, Any] = {}
    exec(compile(f"def long_forward(x):\n{body}    return x\n", "long_forward.py", "exec"), namespace)
    x = torch.ones(1, requires_grad=True)
    for _ in range(2):
        with gradexport.tools.capture_source():
            out = namespace["long_forward"](x)
        graph = gradexport.to_networkx(out)
        lines = sorted(int(data["source"].rpartition(":")[2]) for _, data in graph.nodes(data=True) if "source" in data)
        assert lines == list(range(2, 202))
