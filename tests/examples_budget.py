"""How many examples a property test draws: its full budget under ``make test``, a fifth under ``make test-quick``.

``make test-quick`` (and ``make test-lowest``) set ``GRADEXPORT_QUICK=1``; the examples stay
derandomized either way (conftest.py), so a quick run draws the first fifth of the full run's examples.
"""

from __future__ import annotations

import os

QUICK = os.environ.get("GRADEXPORT_QUICK") == "1"


def budget(full: int) -> int:
    """``full`` examples, or a fifth of them (at least 10) in the quick set.

    Examples:
        >>> budget(300) in (300, 60)
        True
    """
    return max(10, full // 5) if QUICK else full
