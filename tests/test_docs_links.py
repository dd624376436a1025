"""The learner's path reaches the debugging guide: every blog, concept, try-it and home page links to it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).parents[1] / "docs"
PAGES = [
    "index.md",
    "try-it.md",
    *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "blog").glob("*.md")),
    *sorted(str(p.relative_to(DOCS)) for p in (DOCS / "concepts").glob("*.md")),
]


@pytest.mark.parametrize("page", PAGES)
def test_page_links_to_the_debugging_guide(page: str) -> None:
    text = (DOCS / page).read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    targets = {(DOCS / page).parent.joinpath(link.split("#")[0]).resolve() for link in links if not link.startswith("http")}
    assert (DOCS / "guides" / "debugging.md").resolve() in targets, page
