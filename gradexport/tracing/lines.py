"""Which line of the user's forward created each backward node.

Autograd keeps no record of where a node was made (anomaly mode keeps a full
traceback per node, and slows a forward about ten times). `capture_source`
is a `torch.overrides.TorchFunctionMode`: torch calls it once for every torch
function the user's code calls (an op called from inside torch, such as
``F.linear`` inside ``nn.Linear.forward``, is not seen twice: the mode is
switched off while an op runs). It finds the user's frame by walking out of
the frames of torch and gradexport (each code object's verdict is cached),
and tags the backward nodes the call created (``_sequence_nr()`` at least the
counter's value when the call began) with that frame's code and line, in the
node's writable ``metadata``. `gradexport.to_networkx` then turns the tag
into the node attributes ``source`` (``"PATH:LINE"``, PATH relative to the
working directory when inside it), ``source_code`` (that line, stripped)
and ``source_function``; with ``stack=True`` also ``source_stack``, every
user frame from the innermost out (when there are more than one).

Some nodes are made by no torch function: a custom ``autograd.Function``'s
node (``.apply`` is not dispatched to modes) and a ``torch.compile``
region's ``CompiledFunctionBackward``. They show up as a *gap* in the
sequence numbers before a call; the gap is attributed to the innermost user
frame running at that call, outside the Function's own ``forward`` (the
line that called ``.apply`` or the compiled function), and its nodes are
tagged when a later call meets them (the compiled region's own runtime
calls ``torch._is_view`` on its outputs, so a compiled region is tagged at
once; a custom Function's node when its output is used inside the block).
While Dynamo traces (``is_compiling()``), the mode only calls
the op, so a function compiles into the same graphs with and without it.

The mode also checks each floating-point result for NaN and Inf, until the
first one that holds some: `gradexport.tracing.forward_values` keeps that
call, its line and its inputs, for `gradexport.find_nonfinite`.

`capture_source` and `gradexport.capture_modules` are independent and nest
in either order: ``with capture_modules(), capture_source():`` gives every
node both its module and its line.

Examples:
    >>> import torch, gradexport
    >>> x = torch.ones(2, requires_grad=True)
    >>> with gradexport.tools.capture_source():
    ...     y = (x * 3).sum()
    >>> graph = gradexport.to_networkx(y)
    >>> sorted(data["source_code"] for _, data in graph.nodes(data=True) if "source" in data)
    ['y = (x * 3).sum()', 'y = (x * 3).sum()']
"""

from __future__ import annotations

import contextlib
import linecache
import os
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import CodeType, FrameType, FunctionType
from typing import Any, NamedTuple, TypeVar

import torch
from torch.autograd.graph import Node
from torch.overrides import TorchFunctionMode

from ._torch import function_codes, inductor_cache_dir, is_compiling, is_dynamo_code, next_sequence_nr, node_metadata, sequence_nr_getter
from .forward_values import CHECK_KEY, Deliberate, ForwardCheck, first_nonfinite, forward_origin

__all__ = ["CUTS", "SOURCE_KEY", "CallSite", "Cut", "call_from", "capture_source", "source_attributes", "source_of", "user_call_site"]

#: Key in ``Node.metadata`` under which the creating frame(s) are kept:
#: a tuple of ``(code, line)`` pairs, innermost first (one pair without ``stack=True``).
SOURCE_KEY = "gradexport.source"

_Where = tuple[tuple[CodeType, int], ...]

#: torch's package folder and gradexport's: frames in there are never the user's.
_INTERNAL_ROOTS = (
    os.path.dirname(os.path.abspath(torch.__file__)) + os.sep,
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,
)
#: Each code object's verdict (torch's or gradexport's: True), by ``id``: a code object's hash is
#: not cached, and hashes its constants, nested functions' code included, at every look-up.
_internal_code: dict[int, bool] = {}
#: The code objects judged, kept so that no other code object takes one of their ids.
_judged_codes: list[CodeType] = []
#: The ids of the code objects judged torch's or gradexport's (the frames a walk skips).
_internal_ids: set[int] = set()


class Cut(NamedTuple):
    """A call inside `capture_source` whose tensor inputs needed a gradient and whose result needs none.

    Kept for `gradexport.tools.unreached`, which the graph alone cannot tell why a
    parameter is cut off: ``kind`` is ``"no_grad"`` (the call ran under
    ``torch.no_grad()``), ``"detached"`` (``detach``) or
    ``"non_differentiable"`` (an integer or boolean result: a cast,
    ``argmax``, a comparison; or an op torch does not differentiate).
    """

    kind: str
    op: str
    where: _Where
    #: The ``grad_fn`` of each input that has one.
    inputs: tuple[Node, ...]
    #: ``id`` of each leaf input that requires grad (a parameter cut at once).
    leaves: frozenset[int]


#: The cuts of the latest outermost `capture_source` block (their inputs' nodes are held until the next one).
CUTS: list[Cut] = []
#: At most this many cuts are kept per block, so that a long loop under
#: ``no_grad`` inside the block holds bounded memory.
CUT_LIMIT = 10_000
_depth = [0]

#: Whether `capture_source` was ever entered in this process: until then the
#: graph walk does not read any node's metadata for a location.
USED = False


def _is_internal(code: CodeType) -> bool:
    verdict = _internal_code.get(id(code))
    if verdict is None:
        filename = code.co_filename
        # Code that torch generates (fx's "<eval_with_key>.3", Dynamo's
        # runtime wrappers named "...codegen(...)", the code Dynamo runs in
        # place of a compiled function, inductor's modules in its cache folder) counts as torch's, and contextlib's
        # frames (a ``with`` block's entry) are nobody's line.
        generated = inductor_cache_dir()
        verdict = (
            filename.startswith(_INTERNAL_ROOTS)
            or filename.startswith("<eval_with_key>")
            or "codegen(" in filename
            or filename == contextlib.__file__
            or is_dynamo_code(code)
            or (generated is not None and filename.startswith(os.path.join(generated, "")))
        )
        _internal_code[id(code)] = verdict
        _judged_codes.append(code)
        if verdict:
            _internal_ids.add(id(code))
    return verdict


def _user_frame(frame: FrameType | None) -> FrameType | None:
    internal = _internal_ids
    while frame is not None:
        # One set look-up for each of torch's frames, most of the walk; a call to
        # judge only the frame that may be the user's.
        if id(frame.f_code) not in internal and not _is_internal(frame.f_code):
            return frame
        frame = frame.f_back
    return None


#: The line of each ``(id(code), f_lasti)`` a user frame stood at: reading ``f_lineno``
#: decodes the code's line table from its start, a cost that grows with the function.
#: A user frame's code was judged by `_is_internal`, so `_judged_codes` keeps its id its own.
_lines: dict[tuple[int, int], int] = {}


def _line(frame: FrameType) -> int:
    key = (id(frame.f_code), frame.f_lasti)
    line = _lines.get(key)
    if line is None:
        line = _lines[key] = frame.f_lineno
    return line


#: Ops whose result holds only elements of their tensor inputs (or zeros): a view, a copy, a
#: selection, a join, ``relu``. Such a result is finite when every input is, so it is not summed
#: again when every input is a result this block found finite (`_SourceMode.check_values`).
VALUE_KEEPING = frozenset(
    {
        "__getitem__",
        "cat",
        "chunk",
        "clone",
        "concat",
        "contiguous",
        "detach",
        "expand",
        "expand_as",
        "flatten",
        "movedim",
        "narrow",
        "permute",
        "relu",
        "relu_",
        "reshape",
        "reshape_as",
        "select",
        "split",
        "squeeze",
        "stack",
        "t",
        "transpose",
        "unbind",
        "unflatten",
        "unsqueeze",
        "view",
        "view_as",
    }
)


class _SourceMode(TorchFunctionMode):
    """The mode behind `capture_source`; one per block, used on the thread that entered it."""

    def __init__(self, stack: bool, values: bool = True) -> None:
        super().__init__()
        self.stack = stack
        self.thread = threading.get_ident()
        self.begin = next_sequence_nr()
        self.last_end = self.begin
        #: Sequence numbers made outside every call: ``[low, high)`` and where.
        self.gaps: list[tuple[int, int, _Where]] = []
        #: The first call whose result held NaN or Inf (see `gradexport.tracing.forward_values`), kept on the tagged nodes.
        self.check = ForwardCheck() if values else None
        #: Results whose Inf was given on purpose (a -inf mask), by id.
        self.deliberate: Deliberate = {}
        #: Results found finite, by id (a weak reference tells a reused id apart).
        self.finite: dict[int, weakref.ref[torch.Tensor]] = {}

    def where(self, frame: FrameType | None) -> _Where:
        user = _user_frame(frame)
        if user is None:
            return ()
        if not self.stack:
            return ((user.f_code, _line(user)),)
        found = []
        while user is not None:
            found.append((user.f_code, _line(user)))
            user = _user_frame(user.f_back)
        return tuple(found)

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if kwargs is None:
            kwargs = {}
        if is_compiling() or threading.get_ident() != self.thread:
            return func(*args, **kwargs)
        frame = sys._getframe(1)
        start = next_sequence_nr()
        if start != self.last_end:
            self.note_gap(start, frame, args)
        result = func(*args, **kwargs)
        end = self.last_end = next_sequence_nr()
        if end != start:
            where = self.where(frame)
            if where:
                self.tag_outputs(result, start, where, end)
        elif isinstance(result, torch.Tensor) and not result.requires_grad:
            self.note_cut(func, frame, args)
        check = self.check
        if check is not None and check.origin is None:
            self.check_values(func, args, kwargs, result, frame)
        return result

    def check_values(self, func: Any, args: Any, kwargs: dict[str, Any], result: Any, frame: FrameType) -> None:
        """Keep the call as the forward origin if its result holds NaN or Inf (see `gradexport.tracing.forward_values`)."""
        single = isinstance(result, torch.Tensor)
        if single:
            if not result.is_floating_point():
                return
        elif not isinstance(result, (tuple, list)):
            return
        finite = self.finite
        if getattr(func, "__name__", None) in VALUE_KEEPING and _all_known(finite, args):
            for tensor in (result,) if single else _tensors(result):
                finite[id(tensor)] = weakref.ref(tensor)
            return
        bad = first_nonfinite(result)
        if bad is not None:
            line = source_attributes(self.where(frame))
            self.check.origin = forward_origin(func, args, kwargs, bad, frame, line, self.deliberate)  # type: ignore[union-attr]
        elif single:
            finite[id(result)] = weakref.ref(result)

    def note_cut(self, func: Any, frame: FrameType, args: Any) -> None:
        """Keep a call that took tensors needing a gradient and made one that needs none."""
        if len(CUTS) >= CUT_LIMIT:
            return
        needing = [value for value in _tensors(args) if value.requires_grad]
        if not needing:
            return
        name = getattr(func, "__name__", str(func))
        if not torch.is_grad_enabled():
            kind = "no_grad"
        elif name in ("detach", "detach_"):
            kind = "detached"
        else:
            kind = "non_differentiable"
        CUTS.append(
            Cut(
                kind,
                name,
                self.where(frame),
                tuple(value.grad_fn for value in needing if value.grad_fn is not None),
                frozenset(id(value) for value in needing if value.grad_fn is None),
            )
        )

    def note_gap(self, start: int, frame: FrameType, args: Any) -> None:
        """Nodes were made since the previous call by no torch function: keep every user frame running now."""
        chain = []
        user = _user_frame(frame)
        while user is not None:
            chain.append((user.f_code, user.f_lineno))
            user = _user_frame(user.f_back)
        if chain:
            self.gaps.append((self.last_end, start, tuple(chain)))
            # The compiled region's runtime hands the region's outputs to the first call after it.
            self.tag_outputs(args, self.last_end, None)

    def location_of(self, node: Node, number: int, start: int, where: _Where | None) -> _Where | None:
        if where is not None and number >= start:
            return where
        for low, high, chain in reversed(self.gaps):
            if low <= number < high:
                # A custom Function's node exists before its forward runs: the
                # line that made it is the one that called .apply, outside forward.
                inside = function_codes(type(node))
                outside = tuple(pair for pair in chain if pair[0] not in inside) or chain
                return outside if self.stack else outside[:1]
        return None

    def tag_outputs(self, result: Any, start: int, where: _Where | None, end: int = 0) -> None:
        """Tag the untagged nodes made inside the block that ``result`` reaches, down to tagged ones.

        With ``end``, the call made the nodes numbered ``start`` to ``end - 1``: once that many
        are tagged (and no gap waits for a node), the walk stops before reading their inputs.
        """
        if isinstance(result, torch.Tensor):
            node = result.grad_fn
            if node is None:
                return
            stack: list[Node] = [node]
        else:
            stack = [leaf.grad_fn for leaf in _tensors(result) if leaf.grad_fn is not None]
        seen = set(stack)  # the nodes, not their ids: see unreached._leaves
        begin, gaps, check = self.begin, self.gaps, self.check
        untagged = -1 if gaps else end - start
        # The sequence number is read first: it rules out most nodes (leaves,
        # the previous op's node) without reading, or creating, their metadata dict.
        while stack:
            node = stack.pop()
            number = sequence_nr_getter(type(node))(node)
            if number < begin or number >= 2**63:  # made before the block, or a leaf
                continue
            if number < start and not gaps:  # made by an earlier call, tagged then
                continue
            found = where if where is not None and number >= start else self.location_of(node, number, start, where)
            if found is None:
                continue
            metadata = node_metadata(node)
            if SOURCE_KEY in metadata:
                continue
            metadata[SOURCE_KEY] = found
            if check is not None:
                metadata[CHECK_KEY] = check
            if start <= number < end:
                untagged -= 1
                if not untagged:
                    return
            for child, _ in node.next_functions:
                if child is not None and child not in seen:
                    seen.add(child)
                    stack.append(child)


def _all_known(finite: dict[int, weakref.ref[torch.Tensor]], values: Any) -> bool:
    """Whether every tensor in ``values`` holds no NaN or Inf for sure: it cannot (an integer index, a mask), or the block found it finite.

    A loop, not `_tensors` and a generator: it runs for every op that keeps its inputs' values.

    Examples:
        >>> _all_known({}, (torch.arange(2), [3, "x"])), _all_known({}, (torch.ones(2),))
        (True, False)
    """
    for value in values:
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() or value.is_complex():
                reference = finite.get(id(value))
                if reference is None or reference() is not value:
                    return False
        elif isinstance(value, (tuple, list)):
            if not _all_known(finite, value):
                return False
        elif isinstance(value, dict) and not _all_known(finite, value.values()):
            return False
    return True


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (tuple, list)):
        for item in value:
            yield from _tensors(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors(item)


@contextmanager
def capture_source(*, stack: bool = False, values: bool = True) -> Iterator[None]:
    """Tag every backward node created inside the block with the user's line that created it.

    Args:
        stack: Keep every user frame (innermost first), not only the
            innermost: `gradexport.to_networkx` adds ``source_stack``.
        values: Check each floating-point result for NaN and Inf until the
            first (one ``sum`` per result: see `gradexport.tracing.forward_values`);
            ``False`` leaves the values alone and ``find_nonfinite`` reports no forward origin.

    Frames of torch and of gradexport are skipped. Nodes created on another
    thread are not tagged. A custom ``autograd.Function``'s node and a
    ``torch.compile`` region's node get the line that called them (the mode
    causes no graph break: under Dynamo it only calls the op); nodes of a
    checkpointed region keep the lines of the checkpointed function.

    The block also keeps the first call whose floating-point result held a
    NaN or Inf, with its inputs (see `gradexport.tracing.forward_values`):
    `gradexport.find_nonfinite` reports it as ``forward_origin``.

    Examples:
        >>> import torch, gradexport
        >>> layer = torch.nn.Linear(2, 1)
        >>> with gradexport.tools.capture_source():
        ...     out = layer(torch.ones(1, 2))
        >>> gradexport.to_networkx(out).nodes["n1"]["source_code"]
        'out = layer(torch.ones(1, 2))'
    """
    global USED
    USED = True
    if not _depth[0]:
        CUTS.clear()
    _depth[0] += 1
    mode = _SourceMode(stack, values)
    try:
        with mode:
            yield
    finally:
        _depth[0] -= 1


class CallSite(NamedTuple):
    """Where user code made a call: its file, line and function (what `capture_source` would name)."""

    filename: str
    line: int
    function: str


_T = TypeVar("_T")
_callers: dict[CallSite, Callable[..., Any]] = {}


def user_call_site() -> CallSite | None:
    """The innermost user frame of the caller (torch's and gradexport's frames skipped), or ``None`` where there is none.

    A walk of cached verdicts, as `capture_source` does for every op: cheap enough for once per training step.

    Examples:
        >>> site = user_call_site()
        >>> site is None or site.line > 0
        True
    """
    frame = _user_frame(sys._getframe(1))
    return None if frame is None else CallSite(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def call_from(site: CallSite | None, function: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """``function(*args, **kwargs)``, called from a frame that says it is ``site`` (plainly where ``site`` is ``None``).

    A call run again later, from elsewhere (the flight recorder re-runs a bad
    step inside ``optimizer.step()``), then gets from `capture_source` the
    lines it got the first time: ops of torch's own modules are named by the
    user frame that called the model. No public API sets a frame's file and
    line, so the frame's code is compiled at ``site``'s line of ``site``'s
    file (one code object per site, kept), as Jinja2 does for its template
    tracebacks.

    Examples:
        >>> call_from(CallSite("train.py", 3, "train"), user_call_site)
        CallSite(filename='train.py', line=3, function='train')
    """
    if site is None:
        return function(*args, **kwargs)
    caller = _callers.get(site)
    if caller is None:
        namespace: dict[str, Any] = {}
        exec(compile("\n" * (site.line - 1) + "def _call(function, args, kwargs): return function(*args, **kwargs)", site.filename, "exec"), namespace)
        code = namespace["_call"].__code__
        caller = _callers[site] = FunctionType(code.replace(co_name=site.function), {})
    result: _T = caller(function, args, kwargs)
    return result


def source_of(node: Node) -> _Where:
    """The ``(code, line)`` pairs captured for ``node`` (innermost first), or ``()``."""
    return node_metadata(node).get(SOURCE_KEY, ())


def _line_text(filename: str, line: int) -> str:
    """The text of a source line, or ``""`` where there is none to read.

    ``linecache`` lets ``os.stat``'s `UnicodeEncodeError` through for a file
    name the file system cannot hold (``compile(source, "\\ud800.py", "exec")``).

    Examples:
        >>> _line_text("\\ud800.py", 1)
        ''
    """
    try:
        return linecache.getline(filename, line).strip()
    except (ValueError, OSError):  # UnicodeEncodeError is a ValueError
        return ""


def _shown_path(filename: str, cwd: str) -> str:
    if filename.startswith(cwd):
        return filename[len(cwd) :]
    return filename


def line_attributes(filename: str, line: int, function: str, code: str) -> dict[str, Any]:
    """``source``, ``source_code`` and ``source_function`` of one line, its path relative to the working directory when inside it.

    Examples:
        >>> import os
        >>> line_attributes(os.path.join(os.getcwd(), "model.py"), 9, "forward", "h = self.lin(x)")["source"]
        'model.py:9'
    """
    return {"source": f"{_shown_path(filename, os.getcwd() + os.sep)}:{line}", "source_code": code, "source_function": function}


def source_attributes(where: _Where) -> dict[str, Any]:
    """The node attributes for a captured location (see `capture_source`).

    Examples:
        >>> code = source_attributes.__code__
        >>> attributes = source_attributes(((code, code.co_firstlineno),))
        >>> attributes["source"].endswith(f"lines.py:{code.co_firstlineno}"), attributes["source_function"]
        (True, 'source_attributes')
    """
    if not where:
        return {}
    cwd = os.getcwd() + os.sep
    code, line = where[0]
    attributes = line_attributes(code.co_filename, line, code.co_name, _line_text(code.co_filename, line))
    if len(where) > 1:
        attributes["source_stack"] = [f"{_shown_path(c.co_filename, cwd)}:{n} in {c.co_name}" for c, n in where]
    return attributes
