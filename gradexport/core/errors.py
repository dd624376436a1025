"""Every exception and warning gradexport raises, in one tree.

`GradexportError` is the base of every exception the library raises
itself, and `GradexportWarning` of every warning it issues, so one
``except gradexport.GradexportError`` catches all of them. Each class also
derives from the built-in exception a caller would expect for its case
(``TypeError`` for a wrong argument, ``OSError`` for a file that cannot be
written...), so code that catches the built-in ones keeps working. Errors that
torch itself raises while gradexport runs backward (a graph freed by an earlier
``backward()``, a saved tensor modified in place) pass through unchanged.

```text
GradexportError
├── ArgumentTypeError (TypeError): an argument of the wrong type, an unknown option, one that does not apply
│   └── RootError (also ArgumentValueError): a root that cannot start a backward pass
├── ArgumentValueError (ValueError): a value the function does not accept
│   ├── BlockSyntaxError: a build-time example block whose fence or options cannot be read
│   ├── GraphFormatError: a JSON document that is not a gradexport graph
│   └── GraphTooLargeError: no folding brings the graph within a budget
│       └── ViewerTooLargeError: more than the viewer's page can hold
├── ArgumentKeyError (KeyError): a name that is not in the graph or the record
├── StartGradientError (RuntimeError): torch cannot make a root's start gradient
├── StreamConsumedError (RuntimeError): a one-pass GraphStream read twice
├── ReplayError (RuntimeError): the replay cannot do what the engine would at a node
├── InPlaceError (RuntimeError): backward met a saved tensor modified in place (names node, module, tensor)
├── StepsUnavailableError (RuntimeError): steps=True cannot replay these roots without changing .grad
├── TorchVersionError (RuntimeError): a feature needs a newer torch than the one installed
├── GraphvizNotFoundError (RuntimeError): no Graphviz program to render SVG
├── RenderError (RuntimeError): Graphviz ran and failed
│   └── RenderTimeoutError: Graphviz ran past dot_timeout and was stopped
├── OutputError (OSError): a file or folder that cannot be written
├── MissingFileError (FileNotFoundError): a file that should be there is not
├── UnreadableFileError (OSError): a file that is there but cannot be read (a folder, no permission)
├── ServerError (OSError): a local server that cannot start (a port in use, no answer)
├── ModelExplorerNotInstalledError (ImportError): the explorer extra is missing
├── ExtraNotInstalledError (ImportError): a feature's extra (plot, tensorboard) is missing
└── ExampleError: a build-time example block (MkDocs, Sphinx, render-md) raised, ran too long or ended its process
GradexportWarning (UserWarning)
├── OptionWarning: an option that changes nothing for this graph
├── MermaidSizeWarning: a diagram over mermaid.js's limits
├── DeepGraphWarning (RuntimeWarning): freeing a deep graph may crash the process
├── StructureChangedWarning: a watched model called other modules than before; its graph is traced again
├── UnreproducedStepWarning: the flight recorder saw a bad step it cannot run again, so wrote no bundle
├── GraphvizSizeWarning: a graph so large that Graphviz may take minutes, or a picture folded for that reason
├── GraphvizWarning (RuntimeWarning): Graphviz drew the picture and printed a warning
├── ModuleNotCapturedWarning: module= named no node, since the forward pass ran outside capture_modules
└── GradexportDeprecationWarning (DeprecationWarning): an old name or spelling, with the new one
```

Examples:
    >>> import gradexport
    >>> try:
    ...     gradexport.to_networkx(42)
    ... except gradexport.GradexportError as error:
    ...     type(error).__name__, isinstance(error, TypeError)
    ('RootError', True)
"""

from __future__ import annotations

import os

from .reports import in_module

__all__ = [
    "ArgumentKeyError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "BlockSyntaxError",
    "DeepGraphWarning",
    "ExampleError",
    "ExtraNotInstalledError",
    "GradexportDeprecationWarning",
    "GradexportError",
    "GradexportWarning",
    "GraphFormatError",
    "GraphTooLargeError",
    "GraphvizNotFoundError",
    "GraphvizSizeWarning",
    "GraphvizWarning",
    "InPlaceError",
    "MermaidSizeWarning",
    "MissingFileError",
    "ModelExplorerNotInstalledError",
    "ModuleNotCapturedWarning",
    "OptionWarning",
    "OutputError",
    "RenderError",
    "RenderTimeoutError",
    "ReplayError",
    "RootError",
    "ServerError",
    "StartGradientError",
    "StepsUnavailableError",
    "StreamConsumedError",
    "StructureChangedWarning",
    "TorchVersionError",
    "UnreadableFileError",
    "UnreproducedStepWarning",
    "ViewerTooLargeError",
    "file_error",
]


class GradexportError(Exception):
    """The base of every exception gradexport raises (the message says what went wrong and what to do)."""


class ArgumentTypeError(GradexportError, TypeError):
    """An argument of the wrong type, an unknown option, or an option that does nothing for the call."""


class ArgumentValueError(GradexportError, ValueError):
    """An argument of the right type with a value the function does not accept."""


class ArgumentKeyError(GradexportError, KeyError):
    """A name or id that is not in the graph or the record asked."""

    def __str__(self) -> str:  # the message as written, not KeyError's repr of it
        return str(self.args[0]) if self.args else ""


class RootError(ArgumentTypeError, ArgumentValueError):
    """A root cannot start a backward pass (wrong type, no grad, nothing given).

    It is both a ``TypeError`` and a ``ValueError``, so that callers who
    catch either of the built-in errors for bad arguments also catch it.
    """


class BlockSyntaxError(ArgumentValueError):
    """A build-time example block cannot be read: an unknown option, a bad value, a fence never closed; the message names the page and line."""


class GraphFormatError(ArgumentValueError):
    """A JSON document is not a graph of `gradexport.tracing.graph`; the message gives the path to the bad field."""


class GraphTooLargeError(ArgumentValueError):
    """No collapse depth brings the graph within the budget."""


class ViewerTooLargeError(GraphTooLargeError):
    """The graph has more nodes or edges than a page can hold (the message gives the sizes and what to do)."""


class StartGradientError(GradexportError, RuntimeError):
    """torch cannot make a root's start gradient (a non-scalar root without ``grad_outputs``, a wrong shape)."""


class StreamConsumedError(GradexportError, RuntimeError):
    """A `gradexport.streams.GraphStream` was iterated twice; it walks the graph once."""


class ReplayError(GradexportError, RuntimeError):
    """The replay cannot do what the autograd engine would do at a node.

    Attributes:
        node: The graph id of the node (as `gradexport.to_networkx` gives it).
        op: The node's type name, e.g. ``"MulBackward0"``.
    """

    def __init__(self, node: str, op: str, reason: str):
        super().__init__(f"replay: node {node} ({op}): {reason}")
        self.node = node
        self.op = op


class InPlaceError(GradexportError, RuntimeError):
    """Backward reached a node whose saved tensor was modified in place after it was saved.

    torch's own message is kept at the end of this one (and the torch error
    is the ``__cause__``); this one says where: the node, its module and the
    saved tensor, with its versions.

    Attributes:
        node: The graph id of the node that could not read its saved tensor.
        op: Its type name, e.g. ``"ReluBackward0"``.
        module: The module that created it, or ``None`` when not known.
        saved: The name of the saved tensor (``"result"``, ``"self"``), or ``None`` when not found.
        tensor: What torch says the tensor is: ``"float32 [1, 3], output 0 of ReluBackward0"``.
        saved_version: Its version when it was saved, or ``None`` when torch did not say.
        version: Its version now (each in-place operation adds one), or ``None``.
    """

    def __init__(
        self,
        node: str,
        op: str,
        module: str | None,
        saved: str | None,
        tensor: str,
        saved_version: int | None,
        version: int | None,
        torch_message: str,
    ):
        where = f"{node} {op}{in_module(module)}"
        what = f"its saved {saved or 'tensor'} ({tensor})" if tensor else f"its saved {saved or 'tensor'}"
        versions = "" if saved_version is None else f": saved at version {saved_version}, now at version {version}"
        super().__init__(
            f"in-place error at {where}: {what} was modified in place after it was saved{versions}; "
            "make that operation out of place (x = x + 1, not x += 1) or clone the tensor before changing it "
            f"(torch: {torch_message})"
        )
        self.node = node
        self.op = op
        self.module = module
        self.saved = saved
        self.tensor = tensor
        self.saved_version = saved_version
        self.version = version


class StepsUnavailableError(GradexportError, RuntimeError):
    """``steps=True`` cannot replay these roots without changing the user's state."""


class TorchVersionError(GradexportError, RuntimeError):
    """A feature needs a newer torch than the one installed; the message names the feature and the torch it needs.

    Attributes:
        feature: What was asked for (``"replay"``, ``"a GradientEdge root"``...).
        needed: The oldest torch that has it, as ``(major, minor)``.
    """

    def __init__(self, message: str, *, feature: str, needed: tuple[int, int]) -> None:
        super().__init__(message)
        self.feature = feature
        self.needed = needed


class GraphvizNotFoundError(GradexportError, RuntimeError):
    """No Graphviz program to render SVG; the message says how to install one."""


class RenderError(GradexportError, RuntimeError):
    """Graphviz ran but failed; the message carries what it printed."""


class RenderTimeoutError(RenderError):
    """Graphviz ran longer than ``dot_timeout`` seconds and was killed; the message says what draws faster."""


class OutputError(GradexportError, OSError):
    """A diagram file or its folder cannot be written (the message names the path and why)."""


class MissingFileError(GradexportError, FileNotFoundError):
    """A file that should be there is not: a graph file given by path, or a part of this installation."""


class UnreadableFileError(GradexportError, OSError):
    """A file that is there but cannot be read: a folder, a file without read permission, bytes that are not text."""


class ServerError(GradexportError, OSError):
    """A local server cannot start: its port is in use, or it did not answer in time."""


class ModelExplorerNotInstalledError(GradexportError, ImportError):
    """Model Explorer (the ``ai-edge-model-explorer`` package) is not installed."""


class ExtraNotInstalledError(GradexportError, ImportError):
    """A feature needs a package of one of gradexport's extras, and it is not installed; the message names the extra."""


class ExampleError(GradexportError):
    """A build-time example block raised, ran too long or ended its process; the message carries the page, line and traceback."""


class GradexportWarning(UserWarning):
    """The base of every warning gradexport issues."""


class OptionWarning(GradexportWarning):
    """An option was accepted but changes nothing for this graph (the message says what would)."""


class MermaidSizeWarning(GradexportWarning):
    """The diagram is larger than mermaid.js renders with its default limits."""


class DeepGraphWarning(GradexportWarning, RuntimeWarning):
    """Freeing a deep graph on the main thread may crash this process; the message says what to do."""


class StructureChangedWarning(GradexportWarning):
    """A model under `gradexport.watch` called other modules than at the last traced step; its graph is traced again."""


class UnreproducedStepWarning(GradexportWarning):
    """The flight recorder of ``gradexport.watch(bad_steps=...)`` saw a bad step but the model was not called in it with gradients on: no bundle."""


class GraphvizSizeWarning(GradexportWarning):
    """Graphviz may take minutes on a graph this large (or a picture was folded so that it does not); the message says what to do."""


class GraphvizWarning(GradexportWarning, RuntimeWarning):
    """Graphviz drew the picture but printed a warning (a font it lacks, a label it could not fit); the message carries it."""


class ModuleNotCapturedWarning(GradexportWarning):
    """``module=`` named no backward node, since the forward pass ran outside `gradexport.capture_modules`."""


class GradexportDeprecationWarning(GradexportWarning, DeprecationWarning):
    """A name or keyword that moved or was renamed; the message gives the new one."""


def file_error(error: OSError, path: str | os.PathLike[str], caller: str) -> MissingFileError | UnreadableFileError:
    """The error of this tree for an ``OSError`` met while reading ``path`` (raise it ``from`` the original).

    Examples:
        >>> file_error(FileNotFoundError(2, "No such file or directory"), "run.json", "read_json")
        MissingFileError('read_json: run.json does not exist: check the path, or write the file first')
        >>> type(file_error(IsADirectoryError(21, "Is a directory"), "runs", "load_watch")).__name__
        'UnreadableFileError'
    """
    shown = os.fspath(path)
    if isinstance(error, FileNotFoundError):
        return MissingFileError(f"{caller}: {shown} does not exist: check the path, or write the file first")
    reason = error.strerror or type(error).__name__
    return UnreadableFileError(f"{caller}: {shown} cannot be read ({reason}): give the path of a readable file")


# Shown and pickled as gradexport.errors.RootError..., the public module users import them from.
for _name in __all__:
    if isinstance(globals()[_name], type):
        globals()[_name].__module__ = "gradexport.errors"
