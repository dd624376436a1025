"""The ``gradexport`` command: run a function that builds a graph and write its diagrams.

``gradexport path/to/file.py:function --format dot,svg,mermaid,json --output DIR``
(or ``package.module:function``; also ``python -m gradexport``) imports the
file or module, calls the function without arguments and writes one file per
format into DIR, named after the function (``DIR/function.dot``, ``.svg``,
``.mmd``, ``.json``).

What the function returns:

- the roots: a tensor, or a tuple, list or dict of tensors (dict keys name them);
- or a 2-tuple ``(roots, names)`` whose second item names the leaves: an
  ``nn.Module`` (its parameters and buffers), or a dict whose values are all
  leaf tensors (``{"x": x, "y": y}``).

Exit status: 0 on success, 2 on bad usage (a target without ``:``, an unknown
format, a file, module or function that does not exist, a function that
needs arguments, a ``--stem`` that is not a file name), 1 on failure (the
function raised, called ``sys.exit()`` or returned no tensor, Graphviz
failed, a file could not be written), 130 when interrupted (Ctrl-C, or the
function raised ``KeyboardInterrupt``). Errors are one line on stderr;
``--traceback`` adds the full traceback of what the function or the export
raised. The function, the export and the
freeing of the graph run on a thread with a large stack, so a graph tens of
thousands of nodes deep cannot crash the process.

Examples:
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as stderr:
    ...     status = main(["gradexport/examples/blog.py"])
    >>> status, stderr.getvalue()
    (2, "gradexport: error: argument TARGET: 'gradexport/examples/blog.py' has no ':FUNCTION'; write path/to/file.py:function or package.module:function (see gradexport --help)\\n")
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import ModuleType

from ...core.temporaries import handled
from . import check, diff, export, view, watch
from .running import split_result

__all__ = ["COMMANDS", "main", "split_result"]

#: The commands named by their first word (a target always has a ``:``, so it is never taken for one).
#: Each module has a one-line ``SUMMARY`` for ``gradexport --help``, a ``DESCRIPTION`` and a ``main(argv)``.
COMMANDS: dict[str, ModuleType] = {"view": view, "check": check, "diff": diff, "watch": watch}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line with ``argv`` (default: ``sys.argv[1:]``) and return the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with handled():  # SIGINT and SIGTERM: temporaries removed, one line, exit 130 or 143
        if argv and argv[0] in COMMANDS:
            return int(COMMANDS[argv[0]].main(argv[1:]))
        listing = "\n".join(f"  gradexport {name:<6} {module.SUMMARY}" for name, module in COMMANDS.items())
        return export.main(argv, commands=f"commands (gradexport COMMAND --help for each):\n{listing}")
