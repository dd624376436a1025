"""The package's version, read by ``pyproject.toml`` (``[tool.setuptools.dynamic]``) and re-exported as ``gradexport.__version__``.

Examples:
    >>> import gradexport
    >>> gradexport.__version__ == __version__
    True
"""

__all__ = ["__version__"]

__version__ = "0.2.0.dev0"
