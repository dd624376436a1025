"""Running a page's blocks: the block engine's runner (`gradexport.frontends.blocks.runner`), which every host shares."""

from __future__ import annotations

from ..blocks.runner import BlockResult, BlockRunner, run_blocks

__all__ = ["BlockResult", "BlockRunner", "run_blocks"]
