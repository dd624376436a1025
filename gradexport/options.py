"""The option types of the export functions, for code that passes options around.

The export functions take these fields as keyword arguments
(`ExportKeywords`); each is declared once in `gradexport.core.options`, and
each format declares the ones it honours (`FormatOptions`, in `gradexport.api.registry`).

Examples:
    >>> from gradexport.options import DiagramOptions
    >>> DiagramOptions(direction="LR").direction
    'LR'
"""

from .core.options import DiagramOptions, ExportKeywords, ExportOptions, FoldOptions, FormatOptions, RenderOptions, TraceOptions

__all__ = ["DiagramOptions", "ExportKeywords", "ExportOptions", "FoldOptions", "FormatOptions", "RenderOptions", "TraceOptions"]
