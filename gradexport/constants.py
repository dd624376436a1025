"""The fixed vocabularies: node kinds, special node kinds, and the view ops `gradexport.records`' helpers hide.

Examples:
    >>> from gradexport.constants import KINDS
    >>> sorted(KINDS)[:2]
    ['backward', 'leaf']
"""

from .analysis.simplify import VIEW_OPS
from .tracing.graph import KINDS, SPECIAL_KINDS

__all__ = ["KINDS", "SPECIAL_KINDS", "VIEW_OPS"]
