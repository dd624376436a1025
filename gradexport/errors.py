"""Every exception and warning gradexport raises, in one tree (see `gradexport.core.errors` for the tree drawn).

`gradexport.GradexportError` and `gradexport.GradexportWarning`, the two
roots, are also in the top tier; catch those unless you need one case.

Examples:
    >>> import gradexport
    >>> from gradexport.errors import RootError
    >>> try:
    ...     gradexport.to_networkx(42)
    ... except RootError as error:
    ...     isinstance(error, TypeError), isinstance(error, gradexport.GradexportError)
    (True, True)
"""

from .core import errors as _tree
from .core.errors import *  # noqa: F403 (the classes of the tree, as its __all__ lists them)

__all__ = [name for name in _tree.__all__ if isinstance(getattr(_tree, name), type)]
