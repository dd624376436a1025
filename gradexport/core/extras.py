"""The optional packages behind some features, and the error that names the extra to install.

Examples:
    >>> import_extra("json", "plot", "gradexport.records.plot_flow").__name__
    'json'
    >>> try:
    ...     import_extra("no_such_package_here", "plot", "gradexport.records.plot_flow")
    ... except ImportError as error:
    ...     print(error)
    gradexport.records.plot_flow: needs no_such_package_here (No module named 'no_such_package_here'); install the extra: pip install 'gradexport[plot]'
"""

from __future__ import annotations

import importlib
from types import ModuleType

from .errors import ExtraNotInstalledError

__all__ = ["import_extra"]


def import_extra(module: str, extra: str, caller: str) -> ModuleType:
    """Import ``module``, or raise `ExtraNotInstalledError` naming ``caller`` and the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise ExtraNotInstalledError(f"{caller}: needs {module} ({error}); install the extra: pip install 'gradexport[{extra}]'") from error
