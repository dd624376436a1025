"""The file `gradexport.watch` writes, and `load_watch`, which reads it back as a `WatchHistory`.

The format is JSON Lines (one JSON object per line, UTF-8), append-only:

1. a header, ``{"format": "gradexport-watch", "version": 1, "parameters": [...],
   "modules": [...], "layers": [...], "every": 1, "details_every": 10, "rank": 0,
   "world_size": 1, "recorded": "...", "thresholds": {...}}``: the parameter names (as
   ``model.named_parameters()`` gives them), the module names (as
   ``model.named_modules()``, the model itself as ``""``), the layers (the modules
   that hold parameters themselves, which vanishing is judged among), and what
   the gradients are (``recorded``: before or after DDP's all-reduce);
2. a ``{"kind": "graph", "step": k, "reason": "...", "order": [...], "graph": {...}}``
   line when the graph is traced (at the first recorded step, and again after
   the model's structure changed): ``order`` is the modules in the order their
   forward returned, ``graph`` the traced graph as NetworkX's node-link data;
3. a ``{"kind": "structure", "step": k, "reason": "..."}`` line when the
   modules a step called differ from the traced step's;
4. one ``{"kind": "step", "step": k, "param": {"norm": [...], "mean": [...],
   "mean_abs": [...], "max_abs": [...], "nonfinite": [...], "update_ratio": [...] | null},
   "module": {"norm": [...]}}`` line per recorded step, the lists in the
   header's order, ``null`` where a parameter had no gradient or a module's
   output received none. ``mean``, ``mean_abs``, ``max_abs`` and
   ``update_ratio`` are ``null`` as a whole on a step recorded without its
   details (one in ``details_every``, and every step with a non-finite
   gradient, has them). Non-finite numbers are written as JSON's common
   extension ``NaN``, ``Infinity`` and ``-Infinity`` (Python's `json` reads them).

Each line is written with one ``os.write`` on a file opened for appending
(optionally followed by ``os.fsync``), so a process killed at any moment leaves
every completed line whole; at most the last line is torn (killed inside the
system call, or the machine lost power), and `load_watch` ignores a last line
that does not parse. No completed step is lost.

Examples:
    >>> import json, os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "run.jsonl")
    >>> with WatchFile(path, {"parameters": ["w"], "modules": [""], "layers": [""]}) as out:
    ...     out.write({"kind": "step", "step": 0, "param": {"norm": [2.0]}, "module": {"norm": [1.0]}})
    >>> with open(path, "a") as torn:
    ...     _ = torn.write('{"kind": "step", "st')
    >>> history = load_watch(path)
    >>> history.steps, history.param_table("norm").column("w")
    ([0], [2.0])
"""

from __future__ import annotations

import inspect
import json
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from statistics import median
from typing import Any, NamedTuple, cast

import networkx as nx

from ..core.errors import ArgumentKeyError, GraphFormatError, OutputError, file_error
from ..core.extras import import_extra

# The keyword that names the edges' key of node_link_data: networkx 3.4 renamed `link` to `edges`
# (the old name warns there); 3.2 and 3.3, which pyproject.toml allows, know only `link`.
EDGES_KEYWORD = {"edges": "edges"} if "edges" in inspect.signature(nx.node_link_data).parameters else {"link": "edges"}

__all__ = ["FORMAT", "VERSION", "Table", "WatchFile", "WatchHistory", "history_from_records", "load_watch"]

#: The header's ``format`` value.
FORMAT = "gradexport-watch"
#: The header's ``version``.
VERSION = 1
#: Parameter statistics in a step line, in the order tables and TensorBoard show them.
PARAM_STATS = ("norm", "mean", "mean_abs", "max_abs", "nonfinite", "update_ratio")
#: Default thresholds of the vanishing and exploding judgement (see `WatchHistory.flags`).
THRESHOLDS = {"layers": 1e-3, "own": 1e-2, "explode": 1e3, "baseline_steps": 3}


class WatchFile:
    """An append-only JSON Lines file: one ``os.write`` per line, ``fsync`` after each when asked.

    Opening truncates the file and writes ``header`` (with ``format`` and
    ``version`` added) as its first line.
    """

    def __init__(self, path: str | os.PathLike[str], header: dict[str, Any], *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.fsync = fsync
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
        except OSError as error:
            raise OutputError(f"cannot write the watch file {str(self.path)!r}: {error.strerror}") from error
        self.write({"format": FORMAT, "version": VERSION, **header})

    def write(self, record: dict[str, Any]) -> None:
        """Append ``record`` as one line, in one system call."""
        if self._fd is None:
            raise OutputError(f"the watch file {str(self.path)!r} is closed")
        data = (json.dumps(record, separators=(",", ":"), default=str) + "\n").encode()
        written = os.write(self._fd, data)
        while written < len(data):  # a regular file takes it all at once; a full disk may not
            written += os.write(self._fd, data[written:])
        if self.fsync:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> WatchFile:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class Table(NamedTuple):
    """A pandas-free table: one row per recorded step, one column per parameter or module.

    ``rows[i][j]`` is the value at ``steps[i]`` for ``columns[j]`` (``None``
    where there was none). ``pandas.DataFrame(t.rows, index=t.steps,
    columns=t.columns)`` makes it a data frame.
    """

    steps: list[int]
    columns: list[str]
    rows: list[list[float | None]]

    def column(self, name: str) -> list[float | None]:
        """The values of one column, one per step."""
        try:
            index = self.columns.index(name)
        except ValueError:
            raise ArgumentKeyError(f"no column {name!r}; the columns are {self.columns}") from None
        return [row[index] for row in self.rows]


class WatchHistory:
    """What `gradexport.watch` recorded: per step, per parameter and per module, and the traced graphs.

    Read it from a file with `load_watch`, or take it from a running watch
    as `gradexport.backward.watch.Watch.history`.

    Examples:
        >>> history = history_from_records([
        ...     {"format": "gradexport-watch", "parameters": ["w"], "modules": ["", "0"], "layers": ["0"]},
        ...     {"kind": "step", "step": 0, "param": {"norm": [2.0]}, "module": {"norm": [1.0, 0.5]}},
        ... ])
        >>> history.module_table().rows
        [[1.0, 0.5]]
    """

    def __init__(self, header: dict[str, Any], records: list[dict[str, Any]], *, source: str | None = None) -> None:
        self.header = header
        #: Where the records were read (``'run.jsonl'``), for messages; ``None`` for a live watch.
        self.source = source
        #: The number of a cut-short last line the reader skipped, and whether it began a graph line.
        self.torn_line: tuple[int, bool] | None = None
        self.parameters: list[str] = list(header.get("parameters", []))
        self.modules: list[str] = list(header.get("modules", []))
        self.layers: list[str] = list(header.get("layers", []))
        self.thresholds: dict[str, float] = {**THRESHOLDS, **header.get("thresholds", {})}
        self.records = [record for record in records if record.get("kind") == "step"]
        self.graphs = [record for record in records if record.get("kind") == "graph"]
        #: Where the modules a step called changed: ``[{"step": k, "reason": "..."}]``.
        self.structure_changes = [record for record in records if record.get("kind") == "structure"]
        self.steps: list[int] = [record["step"] for record in self.records]

    def __repr__(self) -> str:
        return f"<WatchHistory: {len(self.steps)} steps, {len(self.parameters)} parameters, {len(self.modules)} modules>"

    @property
    def order(self) -> list[str]:
        """The modules in forward order (the order of the first traced step), then those never called."""
        seen = list(self.graphs[0].get("order", [])) if self.graphs else []
        return seen + [name for name in self.modules if name not in seen]

    def param_table(self, stat: str = "norm") -> Table:
        """One statistic (``norm``, ``mean``, ``mean_abs``, ``max_abs``, ``nonfinite``, ``update_ratio``) per step and parameter."""
        if stat not in PARAM_STATS:
            raise ArgumentKeyError(f"no parameter statistic {stat!r}; there are {list(PARAM_STATS)}")
        rows = [_row(record["param"].get(stat), len(self.parameters)) for record in self.records]
        return Table(list(self.steps), list(self.parameters), rows)

    def module_table(self) -> Table:
        """The norm of the gradient at each module's output, per step and module."""
        rows = [_row(record["module"].get("norm"), len(self.modules)) for record in self.records]
        return Table(list(self.steps), list(self.modules), rows)

    def module_norms(self, step: int) -> dict[str, float | None]:
        """The module output-gradient norms at one recorded step, by module name."""
        return dict(zip(self.modules, _row(self._record(step)["module"].get("norm"), len(self.modules))))

    def param_stats(self, step: int) -> dict[str, dict[str, float | None]]:
        """Every statistic of every parameter at one recorded step: ``{name: {"norm": ..., ...}}``."""
        record = self._record(step)["param"]
        columns = {stat: _row(record.get(stat), len(self.parameters)) for stat in PARAM_STATS}
        return {name: {stat: columns[stat][i] for stat in PARAM_STATS} for i, name in enumerate(self.parameters)}

    def _record(self, step: int) -> dict[str, Any]:
        for record in self.records:
            if record["step"] == step:
                return record
        raise ArgumentKeyError(f"step {step} was not recorded; the recorded steps are {_span(self.steps)}")

    def flags(self, step: int | None = None) -> dict[str, list[str]]:
        """The modules flagged at ``step`` (default: the last recorded step), with why.

        A layer (a module holding parameters itself) is ``"vanishing"`` when
        its output-gradient norm is below ``thresholds["layers"]`` times the
        largest layer's at the same step, or below ``thresholds["own"]`` times
        the median of its own first ``thresholds["baseline_steps"]`` recorded
        steps; any module is ``"exploding"`` when its norm is not finite or
        above ``thresholds["explode"]`` times its own first steps' median.
        Each reason is a short sentence; ``{}`` when nothing is flagged.
        """
        if not self.steps:
            return {}
        step = self.steps[-1] if step is None else step
        norms = self.module_norms(step)
        table = self.module_table()
        first = max(1, int(self.thresholds["baseline_steps"]))
        layer_values = [norm for name in self.layers if (norm := norms.get(name)) is not None and math.isfinite(norm)]
        largest = max(layer_values, default=None)
        found: dict[str, list[str]] = {}
        for column, name in enumerate(self.modules):
            value = norms[name]
            if value is None:
                continue
            early = [got for row in table.rows[:first] if (got := row[column]) is not None and math.isfinite(got)]
            baseline = median(early) if early else None
            reasons = []
            if not math.isfinite(value):
                reasons.append(f"exploding: the gradient norm is {value}")
            elif baseline and value > self.thresholds["explode"] * baseline:
                reasons.append(f"exploding: {value:.3g} is {value / baseline:.3g}x its first steps' {baseline:.3g}")
            if name in self.layers and math.isfinite(value):
                if largest and value < self.thresholds["layers"] * largest:
                    reasons.append(f"vanishing: {value:.3g} is {value / largest:.3g}x the largest layer's {largest:.3g}")
                if baseline and value < self.thresholds["own"] * baseline:
                    reasons.append(f"vanishing: {value:.3g} is {value / baseline:.3g}x its first steps' {baseline:.3g}")
            if reasons:
                found[name] = reasons
        return found

    def flagged(self, kind: str = "vanishing") -> dict[str, list[int]]:
        """The steps at which each module was flagged ``kind`` (``"vanishing"`` or ``"exploding"``)."""
        found: dict[str, list[int]] = {}
        for step in self.steps:
            for name, reasons in self.flags(step).items():
                if any(reason.startswith(kind) for reason in reasons):
                    found.setdefault(name, []).append(step)
        return found

    def graph(self, step: int | None = None) -> nx.MultiDiGraph:
        """The graph traced for ``step`` (default: the last), with that step's values on it.

        Every node that names a parameter (a leaf) gets ``watch`` = that
        parameter's statistics (`param_stats`, those the step holds); every node of a module gets
        ``module_grad_norm`` = its module's output-gradient norm; every edge
        that enters a module from outside it (the gradient arriving at that
        module's output) gets ``grad_norm`` = the module's norm, and
        ``grad`` = ``{"norm": ...}``, which `gradexport.to_html` and the other
        writers colour edges by (``grad_norms=True``).
        """
        if not self.graphs:
            if self.torn_line is not None and self.torn_line[1]:
                raise GraphFormatError(
                    f"graph: {self.source!r}, line {self.torn_line[0]}: the graph line is cut short (the watching process "
                    "was killed while writing it), so no graph was recorded whole; run the watch again"
                )
            raise ArgumentKeyError("nothing was traced: the watch recorded no graph (trace=False, or no step ran)")
        step = self.steps[-1] if step is None and self.steps else step
        traced = self.graphs[0]
        for record in self.graphs:
            if step is None or record["step"] <= step:
                traced = record
        try:
            graph = cast("nx.MultiDiGraph[str]", nx.node_link_graph(traced["graph"], directed=True, multigraph=True, **EDGES_KEYWORD))
        except (KeyError, TypeError, ValueError, AttributeError, nx.NetworkXError) as error:
            where = f"{self.source!r}, " if self.source else ""
            raise GraphFormatError(
                f"graph: {where}the graph line of step {traced['step']} is not NetworkX node-link data "
                f"({type(error).__name__}: {error}); the file was damaged, trace the model again"
            ) from None
        graph.graph["watch_step"] = step
        if step is None or step not in self.steps:
            return graph
        stats = self.param_stats(step)
        norms = self.module_norms(step)
        for _, data in graph.nodes(data=True):
            names = [name for name in data.get("names", []) if name in stats]
            if names:
                # What the step recorded: a step without details has no mean, largest |g| or update ratio.
                data["watch"] = {stat: value for stat, value in stats[names[0]].items() if value is not None}
            if data.get("module") in norms:
                data["module_grad_norm"] = norms[data["module"]]
        for source, target, data in graph.edges(data=True):
            inner, outer = graph.nodes[target].get("module"), graph.nodes[source].get("module")
            if inner in norms and not _inside(outer, inner) and norms[inner] is not None:
                data["grad_norm"] = norms[inner]
                data["grad"] = {"norm": norms[inner]}  # what the viewer and the writers colour edges by
        return graph

    def to_tensorboard(self, logdir: str | os.PathLike[str]) -> Path:
        """Write every recorded value as TensorBoard scalars under ``logdir`` (the ``tensorboard`` extra).

        Tags: ``grad_norm/module/NAME`` (``NAME`` is ``model`` for the model itself),
        ``grad/STAT/PARAM`` for each parameter statistic. Returns the folder.
        """
        import_extra("tensorboard", "tensorboard", "WatchHistory.to_tensorboard")
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(logdir))
        try:
            for record in self.records:
                for tag, value in self.scalars(record):
                    writer.add_scalar(tag, value, record["step"])
        finally:
            writer.close()
        return Path(logdir)

    def scalars(self, record: dict[str, Any]) -> Iterator[tuple[str, float]]:
        """The (tag, value) pairs of one step line, as `to_tensorboard` writes them."""
        for name, value in zip(self.modules, _row(record["module"].get("norm"), len(self.modules))):
            if value is not None:
                yield f"grad_norm/module/{name or 'model'}", value
        for stat in PARAM_STATS:
            for name, value in zip(self.parameters, _row(record["param"].get(stat), len(self.parameters))):
                if value is not None:
                    yield f"grad/{stat}/{name}", value


def _row(values: Sequence[float | None] | None, width: int) -> list[float | None]:
    return list(values) if values is not None else [None] * width


def _inside(module: str | None, outer: str) -> bool:
    return module is not None and (outer == "" or module == outer or module.startswith(outer + "."))


def _span(steps: list[int]) -> str:
    return "none" if not steps else f"{steps[0]} to {steps[-1]} ({len(steps)} steps)"


def history_from_records(records: list[dict[str, Any]]) -> WatchHistory:
    """A `WatchHistory` from the parsed lines of a watch file, the header first."""
    if not records or records[0].get("format") != FORMAT:
        raise GraphFormatError(f"not a gradexport watch file: its first line is not a {FORMAT!r} header")
    return WatchHistory(records[0], records[1:])


def load_watch(path: str | os.PathLike[str]) -> WatchHistory:
    """Read a file written by `gradexport.watch` back as a `WatchHistory`.

    A last line cut short (the process was killed while writing it) is
    ignored; any other line that is not UTF-8, not JSON, not an object or
    not shaped as `gradexport.backward.watch_file` describes raises
    `gradexport.errors.GraphFormatError`, in one line naming the file, the line
    and the field.
    A missing file raises `gradexport.errors.MissingFileError`, one that
    cannot be read `gradexport.errors.UnreadableFileError`.

    Examples:
        >>> import torch, gradexport, tempfile, os
        >>> model = torch.nn.Linear(2, 1)
        >>> path = os.path.join(tempfile.mkdtemp(), "w.jsonl")
        >>> with gradexport.watch(model, path=path) as w:
        ...     model(torch.ones(3, 2)).sum().backward()
        ...     w.step()
        >>> gradexport.records.load_watch(path).param_table("max_abs").rows
        [[3.0, 3.0]]
        >>> with open(path, "a") as damaged:
        ...     _ = damaged.write("[]\\n")
        >>> gradexport.records.load_watch(path)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        gradexport.errors.GraphFormatError: load_watch: '.../w.jsonl', line 4: a JSON array, not an object; ...
    """
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as error:
        raise file_error(error, path, "load_watch") from error
    records: list[dict[str, Any]] = []
    torn: tuple[int, bool] | None = None
    shape: _Shape | None = None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json_object(line)
        except TornJSON as cut:
            if number == len(lines):  # the torn last line of a killed writer: no newline after it
                torn = (number, line.startswith(b'{"kind":"graph"'))
                break
            raise GraphFormatError(_damaged(path, number, str(cut))) from None
        except FileMisfit as misfit:
            raise GraphFormatError(_damaged(path, number, str(misfit))) from None
        try:
            if shape is None:
                shape = _Shape.of_header(record)
            else:
                shape.check(record)
        except FileMisfit as misfit:
            raise GraphFormatError(_damaged(path, number, str(misfit))) from None
        records.append(record)
    if shape is None:
        raise GraphFormatError(_damaged(path, 1, "the file holds no header line"))
    history = WatchHistory(records[0], records[1:], source=str(path))
    history.torn_line = torn
    return history


def _damaged(path: str | os.PathLike[str], number: int, problem: str) -> str:
    return f"load_watch: {os.fspath(path)!r}, line {number}: {problem}; a gradexport.watch file holds one JSON object per line (was it edited or cut?)"


class FileMisfit(Exception):
    """Part of a file that parses but does not fit its format: what is wrong, where (the reader names the file)."""


class TornJSON(FileMisfit):
    """Bytes that do not parse as JSON: cut short if they end a file written line by line, damaged otherwise."""


def json_object(data: bytes) -> dict[str, Any]:
    """``data`` read as one UTF-8 JSON object, or a `FileMisfit` saying why it is not one (shared by the watch and bundle readers).

    Examples:
        >>> json_object(b'{"step": 3}')
        {'step': 3}
        >>> json_object(b"[1]")
        Traceback (most recent call last):
        ...
        gradexport.backward.watch_file.FileMisfit: a JSON array, not an object
    """
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise FileMisfit(f"not UTF-8 text: byte {error.start} ({error.reason})") from None
    try:
        record = json.loads(text)
    except RecursionError:  # json's scanner recurses once per level: about 1,000 levels end it
        raise FileMisfit("nested too deep to read (arrays or objects some thousand levels deep)") from None
    except ValueError as error:
        raise TornJSON(f"not JSON ({error})") from None
    if not isinstance(record, dict):
        raise FileMisfit(f"a JSON {_json_type(record)}, not an object")
    return record


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    return {dict: "object", list: "array", str: "string", type(None): "null"}.get(type(value), type(value).__name__)


class _Shape(NamedTuple):
    """What the header says every later line holds: how many parameters and modules."""

    parameters: int
    modules: int

    @staticmethod
    def of_header(record: dict[str, Any]) -> _Shape:
        if record.get("format") != FORMAT:
            raise FileMisfit(f"not a {FORMAT!r} header (the first line of a watch file)")
        for field in ("parameters", "modules", "layers"):
            names = record.get(field, [])
            if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
                raise FileMisfit(f"{field}: expected a list of names, got {_json_type(names)}")
        thresholds = record.get("thresholds", {})
        if not isinstance(thresholds, dict) or not all(_is_number(value) for value in thresholds.values()):
            raise FileMisfit("thresholds: expected an object of numbers")
        return _Shape(len(record.get("parameters", [])), len(record.get("modules", [])))

    def check(self, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        if not isinstance(kind, str):
            raise FileMisfit(f"kind: expected a string (step, graph or structure), got {_json_type(kind)}")
        if kind in ("step", "graph", "structure"):
            step = record.get("step")
            if not isinstance(step, int) or isinstance(step, bool):
                raise FileMisfit(f"step: expected an integer, got {_json_type(step)}")
        if kind == "step":
            for part, width in (("param", self.parameters), ("module", self.modules)):
                stats = record.get(part)
                if not isinstance(stats, dict):
                    raise FileMisfit(f"{part}: expected an object, got {_json_type(stats)}")
                for stat, values in stats.items():
                    _check_values(f"{part}.{stat}", values, width)
        elif kind == "graph":
            graph, order = record.get("graph"), record.get("order", [])
            if not isinstance(graph, dict):
                raise FileMisfit(f"graph: expected an object (NetworkX node-link data), got {_json_type(graph)}")
            if not isinstance(order, list) or not all(isinstance(name, str) for name in order):
                raise FileMisfit(f"order: expected a list of module names, got {_json_type(order)}")


def _check_values(field: str, values: Any, width: int) -> None:
    if values is None:
        return
    if not isinstance(values, list) or len(values) != width:
        got = f"{len(values)} items" if isinstance(values, list) else _json_type(values)
        raise FileMisfit(f"{field}: expected a list of {width} numbers or nulls, got {got}")
    for index, value in enumerate(values):
        if value is not None and not _is_number(value):
            raise FileMisfit(f"{field}[{index}]: expected a number or null, got {_json_type(value)}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
