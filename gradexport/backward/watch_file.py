"""The file `gradexport.watch` writes, and `load_watch`, which reads it back as a `WatchHistory`.

The format is JSON Lines (one JSON object per line, UTF-8), append-only:

1. a header, ``{"format": "gradexport-watch", "version": 1, "parameters": [...],
   "modules": [...], "layers": [...], "every": 1, "rank": 0, "world_size": 1,
   "recorded": "...", "thresholds": {...}}``: the parameter names (as
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
   output received none. Non-finite numbers are written as JSON's common
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

    def __init__(self, header: dict[str, Any], records: list[dict[str, Any]]) -> None:
        self.header = header
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
        parameter's statistics (`param_stats`); every node of a module gets
        ``module_grad_norm`` = its module's output-gradient norm; every edge
        that enters a module from outside it (the gradient arriving at that
        module's output) gets ``grad_norm`` = the module's norm, and
        ``grad`` = ``{"norm": ...}``, which `gradexport.to_html` and the other
        writers colour edges by (``grad_norms=True``).
        """
        if not self.graphs:
            raise ArgumentKeyError("nothing was traced: the watch recorded no graph (trace=False, or no step ran)")
        step = self.steps[-1] if step is None and self.steps else step
        traced = self.graphs[0]
        for record in self.graphs:
            if step is None or record["step"] <= step:
                traced = record
        graph = cast("nx.MultiDiGraph[str]", nx.node_link_graph(traced["graph"], directed=True, multigraph=True, **EDGES_KEYWORD))
        graph.graph["watch_step"] = step
        if step is None or step not in self.steps:
            return graph
        stats = self.param_stats(step)
        norms = self.module_norms(step)
        for _, data in graph.nodes(data=True):
            names = [name for name in data.get("names", []) if name in stats]
            if names:
                data["watch"] = stats[names[0]]
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
    ignored; any other line that does not parse raises `gradexport.errors.GraphFormatError`.
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
    """
    try:
        lines = Path(path).read_bytes().split(b"\n")
    except OSError as error:
        raise file_error(error, path, "load_watch") from error
    records: list[dict[str, Any]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            if number == len(lines):
                break  # the torn last line of a killed writer: no newline after it
            raise GraphFormatError(f"{str(path)!r}, line {number}: not JSON") from None
    return history_from_records(records)
