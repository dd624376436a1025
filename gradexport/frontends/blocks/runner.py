"""Running a page's blocks: in order, in one namespace, each page in a fresh folder, optionally in a forked child.

Every host runs its blocks here, so that a time limit, an output cap, a
warning or a traceback behave the same in MkDocs, Sphinx and ``render-md``.

Examples:
    >>> from gradexport.frontends.blocks.markdown import find_blocks
    >>> blocks = find_blocks(['```gradexport show="output"', "print(6 * 7)", "```"], "page.md")
    >>> [result.output for result in run_blocks(blocks, "page.md", "page.md")]
    ['42\\n']
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import io
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from ...core.errors import ExampleError
from .spec import Block, BlockOptions

__all__ = ["BlockResult", "BlockRunner", "report_warnings", "run_blocks"]


@dataclass(frozen=True)
class BlockResult:
    """What running a block produced."""

    #: Everything the block printed to stdout.
    output: str
    #: Diagram text per format: Mermaid source, or an ``<svg>`` element.
    diagrams: dict[str, str]
    #: The warnings the block raised, as ``"Category: message"``; they end its output too, and
    #: the host logs them (`report_warnings`).
    warnings: tuple[str, ...] = ()


def report_warnings(block: Block, result: BlockResult, shown_as: str, *, strict: bool, inform: Callable[[str], None], warn: Callable[[str], None]) -> None:
    """Log each warning of ``result`` naming the page and the block's line: with ``warn`` (a warning of the
    build, which a strict build stops on) when ``strict``, else with ``inform``.

    Examples:
        >>> from gradexport.frontends.blocks.spec import BlockOptions
        >>> block = Block(2, 5, "", "x = 1\\n", BlockOptions(frozenset(), ("svg",), None), 4)
        >>> report_warnings(block, BlockResult("", {}, ("FutureWarning: careful",)), "page.md", strict=False, inform=print, warn=None)
        page.md:3: the gradexport block on this line warned: FutureWarning: careful
    """
    for text in result.warnings:
        (warn if strict else inform)(f"{shown_as}:{block.start + 1}: the gradexport block on this line warned: {text}")


def run_blocks(
    blocks: list[Block],
    path: str,
    shown_as: str,
    *,
    max_output: int = 0,
    on_block: Callable[[int], None] | None = None,
    setting: str = "option {}",
) -> list[BlockResult]:
    """Run ``blocks`` in order in one fresh namespace and render their diagrams.

    ``path`` is the Markdown file (tracebacks show its lines); ``shown_as`` names
    the page in error messages. Printed output beyond ``max_output`` characters
    (0: no cap) is dropped and a note says so. ``on_block(i)`` is called as
    block ``i`` starts. ``setting`` names a host's setting in messages (``"plugin option {}"``).
    A warning the block raises ends its output, as a notebook shows it. Run this inside `gradexport.streams.run_with_large_stack`
    so that the namespace, and every graph in it, is freed on the large stack;
    the hosts run it through `BlockRunner`.

    Raises:
        ExampleError: when a block raises, with the traceback of its own frames.
    """
    namespace: dict[str, Any] = {"__name__": "__gradexport_example__"}
    results = []
    for number, block in enumerate(blocks):
        if on_block is not None:
            on_block(number)
        output, errors = _CappedOutput(max_output, setting), _CappedOutput(max_output, setting)
        log = sys.stderr
        try:
            with contextlib.redirect_stdout(output), contextlib.redirect_stderr(errors), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("default")
                value = _execute(block, path, namespace)
                if block.options.graph is not None:
                    value = eval(compile(block.options.graph, "<graph option>", "eval"), namespace)
            diagrams = {}
            if "diagram" in block.options.show and value is not None:
                diagrams = _render(value, block.options, namespace)
        except (Exception, SystemExit) as error:  # noqa: BLE001 - sys.exit() in an example is a failure too, not the build's exit
            _pass_on(errors, log)
            raise ExampleError(f"{shown_as}:{block.start + 1}: the gradexport block on this line failed:\n" + _format_traceback(error, path)) from None
        _pass_on(errors, log)
        warned = tuple(f"{warning.category.__name__}: {warning.message}" for warning in caught)
        # A traceback printed by the block names the page by its place in the docs, not on the build machine.
        printed = _ADDRESS.sub(" at 0x…", output.text() + "".join(f"{text}\n" for text in warned)).replace(path, shown_as)
        results.append(BlockResult(printed, diagrams, warned))
    return results


def _pass_on(errors: _CappedOutput, log: Any) -> None:
    """What a block wrote to ``sys.stderr`` (capped like its output), on to the build's log."""
    text = errors.text() if errors.written else ""
    if text:
        with contextlib.suppress(OSError, ValueError):
            log.write(text)
            log.flush()


class _CappedOutput(io.StringIO):
    """Keeps the first ``limit`` characters written (all when ``limit`` is 0) and counts the rest."""

    def __init__(self, limit: int, setting: str):
        super().__init__()
        self.limit = limit
        self.setting = setting
        self.written = 0

    def write(self, text: str) -> int:
        self.written += len(text)
        room = len(text) if not self.limit else self.limit - self.tell()
        if room > 0:
            super().write(text[:room])
        return len(text)

    def text(self) -> str:
        kept = self.getvalue()
        if self.written > len(kept):
            kept += f"\n[output cut: the block printed {self.written:,} characters; the first {len(kept):,} are shown ({self.setting.format('max_output')})]\n"
        return kept


class BlockRunner:
    """Runs pages' blocks as every host does: each page in a fresh temporary working directory and, with ``isolate``, in a child process.

    The child is forked from the build on the first page (so torch and
    gradexport are already imported) and serves the following pages too, so
    what one page warmed up (imports, torch's lazy initialisation) the next
    finds ready, as in the build process itself; each page still gets a fresh
    namespace. It sends back each block's output and diagrams. That gives
    every block a time limit of ``timeout`` seconds (0: none), and a block
    that ends its process (``os._exit(0)``, a crash) fails the build rather
    than ending it; after either, the next page gets a new child. Without
    ``isolate`` the blocks run in the build process, with no time limit.

    Examples:
        >>> from gradexport.frontends.blocks.markdown import find_blocks
        >>> blocks = find_blocks(['```gradexport show="output"', "print(6 * 7)", "```"], "page.md")
        >>> with BlockRunner(timeout=10) as runner:
        ...     [result.output for result in runner.run(blocks, "page.md", "page.md")]
        ['42\\n']
    """

    def __init__(self, *, timeout: float = 60, max_output: int = 100_000, isolate: bool = True, setting: str = "option {}"):
        self.timeout = timeout
        self.setting = setting
        self.max_output = max_output
        self.isolate = isolate
        self._child: Any = None
        self._connection: Any = None
        self._owner = os.getpid()

    def run(self, blocks: list[Block], path: str, shown_as: str) -> list[BlockResult]:
        """Run one page's blocks (see `run_blocks`) in a new temporary working directory, removed afterwards.

        Raises:
            ExampleError: when a block raises, runs too long or ends the
                process; the message names the page and the block's line.
        """
        with tempfile.TemporaryDirectory(prefix="gradexport-page-", ignore_cleanup_errors=True) as folder:
            if self.isolate:
                return self._run_in_child(blocks, path, shown_as, folder)
            previous = os.getcwd()
            os.chdir(folder)
            try:
                stack = importlib.import_module("gradexport.tracing.stack").run_with_large_stack
                return stack(run_blocks, blocks, path, shown_as, max_output=self.max_output, setting=self.setting)
            finally:
                os.chdir(previous)

    def _run_in_child(self, blocks: list[Block], path: str, shown_as: str, folder: str) -> list[BlockResult]:
        if self._owner != os.getpid():
            # Forked with the runner (a parallel Sphinx reader): the child and its pipe are the parent's.
            self._child = self._connection = None
            self._owner = os.getpid()
        if self._child is None:
            context = multiprocessing.get_context("fork")
            self._connection, child_end = context.Pipe()
            self._child = context.Process(target=_serve_pages, args=(child_end,), daemon=True)
            self._child.start()
            child_end.close()
        self._connection.send((blocks, path, shown_as, folder, self.max_output, self.setting))
        running = 0  # the block the child is running
        started = time.monotonic()
        while True:
            wait = None if not self.timeout else max(0.0, started + self.timeout - time.monotonic())
            if not self._connection.poll(wait):
                self.close()
                raise ExampleError(
                    f"{shown_as}:{blocks[running].start + 1}: the gradexport block on this line ran longer than "
                    f"{self.timeout:g} s and was stopped ({self.setting.format('timeout')}; 0 turns the limit off)"
                )
            try:
                kind, payload = self._connection.recv()
            except EOFError:
                self._child.join()
                status = self._child.exitcode
                self.close()
                raise ExampleError(
                    f"{shown_as}:{blocks[running].start + 1}: the gradexport block on this line ended the process "
                    f"that runs the examples (exit status {status}; os._exit(), a crash or a signal) before it "
                    "finished; a block must return normally"
                ) from None
            if kind == "block":
                running, started = payload, time.monotonic()
            elif kind == "error":
                raise ExampleError(payload)
            else:
                return payload

    def close(self) -> None:
        """End the child process and every process it started (its process group: Graphviz's ``dot``, a block's own), if there is one."""
        if self._child is not None and self._owner == os.getpid():
            self._connection.close()
            with contextlib.suppress(OSError):
                os.killpg(self._child.pid, signal.SIGKILL)  # the child leads its own group (_serve_pages)
            self._child.kill()
            self._child.join()
            self._child = self._connection = None

    def __enter__(self) -> BlockRunner:
        return self

    def __exit__(self, *exception: object) -> None:
        self.close()


#: How often the child checks that the build still runs (seconds).
_PARENT_CHECK_S = 0.2


def _watch_parent(parent: int) -> None:
    """In the child: once the build process is gone (killed, even with SIGKILL), kill the child's whole process group.

    A thread polling ``getppid`` (the child is re-parented when the build
    dies) rather than ``PR_SET_PDEATHSIG``, which fires when the *thread* that
    forked ends (``mkdocs serve`` builds on passing threads) and is Linux only.
    """
    while os.getppid() == parent:
        time.sleep(_PARENT_CHECK_S)
    with contextlib.suppress(OSError):
        os.killpg(0, signal.SIGKILL)
    os._exit(1)


def _end_group(signum: int, frame: object) -> None:
    """In the child, on SIGTERM: kill the child's whole process group, the child included."""
    os.killpg(0, signal.SIGKILL)


class _CappedDescriptors:
    """In the child: file descriptors 1 and 2 (``os.write(1, ...)``, a C library's output, ``dot``'s messages) drained
    through a pipe into the build's standard error, at most ``limit`` bytes per block (0: all) with a note for the rest."""

    def __init__(self, limit: int):
        self.limit, self.passed, self.dropped = limit, 0, 0
        self.setting = "option {}"
        self.lock = threading.Lock()
        self.log = os.dup(2)
        read_end, write_end = os.pipe()
        os.dup2(write_end, 1)
        os.dup2(write_end, 2)
        os.close(write_end)
        threading.Thread(target=self._drain, args=(read_end,), daemon=True).start()

    def _drain(self, read_end: int) -> None:
        while chunk := os.read(read_end, 1 << 16):
            with self.lock:
                room = len(chunk) if not self.limit else max(0, self.limit - self.passed)
                if room:
                    os.write(self.log, chunk[:room])
                self.passed += min(room, len(chunk))
                self.dropped += len(chunk) - min(room, len(chunk))

    def next_block(self, limit: int, setting: str) -> None:
        """Start counting again for the next block; say how much the last one lost (``setting`` names the cap in the note)."""
        with self.lock:
            if self.dropped:
                os.write(
                    self.log,
                    f"\n[gradexport: a block wrote {self.dropped:,} more bytes to file descriptor 1 or 2; cut ({self.setting.format('max_output')})]\n".encode(),
                )
            self.limit, self.passed, self.dropped, self.setting = limit, 0, 0, setting


def _serve_pages(connection: Any) -> None:
    """The forked child: run each page sent, send back its results, and leave without tearing anything down.

    It leads its own process group, so that `BlockRunner.close` (after a
    timeout) and the parent watch (`_watch_parent`, when the build is
    killed) end every process a block started, ``dot`` included. A SIGTERM
    ends the group too: an interrupted build (Ctrl-C, SIGINT) exits through
    ``multiprocessing``'s exit hook, which sends SIGTERM to this process
    alone, and the parent watch dies with it.
    """
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    signal.signal(signal.SIGTERM, _end_group)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    descriptors = _CappedDescriptors(0)
    stack = importlib.import_module("gradexport.tracing.stack").run_with_large_stack
    try:
        while True:
            try:
                blocks, path, shown_as, folder, max_output, setting = connection.recv()
            except EOFError:
                break
            try:
                os.chdir(folder)

                def on_block(number: int, limit: int = max_output, setting: str = setting) -> None:
                    descriptors.next_block(limit, setting)
                    connection.send(("block", number))

                results = stack(run_blocks, blocks, path, shown_as, max_output=max_output, on_block=on_block, setting=setting)
                descriptors.next_block(max_output, setting)
                connection.send(("done", results))
            except ExampleError as error:
                connection.send(("error", str(error)))
            except BaseException as error:  # noqa: BLE001 - everything is reported to the build
                trace = "".join(traceback.format_exception(error))
                connection.send(("error", f"{shown_as}: running the gradexport blocks failed:\n{trace}"))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        # Skip interpreter teardown: freeing a deep graph there could overflow the stack.
        os._exit(0)


# Python's default reprs (``<SumBackward0 object at 0x7f…>``) change on every
# run; masking the address keeps the built site the same from build to build.
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def _execute(block: Block, path: str, namespace: dict[str, Any]) -> Any:
    """Run a block; return the value of its last line if that is an expression."""
    # Padding the code to its place in the Markdown file makes every line number
    # (in tracebacks and syntax errors) a line of that file.
    tree = ast.parse("\n" * (block.line - 1) + block.code, filename=path)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    assert last is None or isinstance(last, ast.Expr)
    exec(compile(tree, path, "exec"), namespace)
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), path, "eval"), namespace)


def _format_traceback(error: BaseException, path: str) -> str:
    tb: TracebackType | None = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename not in (path, "<graph option>"):
        tb = tb.tb_next  # drop gradexport's own frames: the reader wants the example's
    return "".join(traceback.format_exception(type(error), error, tb))


def _render(value: Any, options: BlockOptions, namespace: dict[str, Any]) -> dict[str, str]:
    """The block's diagrams, from one trace of its roots; a replay record's nodes carry the page's names for them."""
    if isinstance(value, importlib.import_module("gradexport.backward.replay_record").Replay):
        value = importlib.import_module("gradexport.backward.steps").name_nodes(value, namespace)
    texts = importlib.import_module("gradexport.api.export").render(value, options.formats, **dict(options.export))
    if "svg" in texts:
        texts["svg"] = texts["svg"][texts["svg"].index("<svg") :]  # inline: drop the XML prolog and DOCTYPE
    return texts
