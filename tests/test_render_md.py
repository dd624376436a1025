"""``gradexport render-md``: Markdown pages' blocks run into plain Markdown with the pictures beside it, checked by mermaid.js and Chromium."""

from __future__ import annotations

import html
import re
from pathlib import Path

import markdown
import pytest
from block_fixtures import CHAIN, node_names
from browser_fixtures import block_outside, browser, serve_folder  # noqa: F401  (browser is a fixture)
from format_fixtures import parse_mermaid

from gradexport.frontends.cli import main

PAGE = f"""\
# A page

Prose stays as it was.

```gradexport formats="svg mermaid html"
{CHAIN}```

- In a list:

    ```gradexport show="output"
    print("indented", x.shape)
    ```
"""


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("render")
    (folder / "docs" / "guide").mkdir(parents=True)
    (folder / "docs" / "guide" / "page.md").write_text(PAGE, encoding="utf-8")
    (folder / "docs" / "index.md").write_text("# No blocks\n", encoding="utf-8")
    assert main(["render-md", str(folder / "docs" / "index.md"), str(folder / "docs" / "guide" / "page.md"), "-o", str(folder / "out")]) == 0
    return folder / "out"


@pytest.mark.slow
def test_blocks_become_plain_markdown_with_the_pictures_beside_the_page(rendered):
    page = (rendered / "guide" / "page.md").read_text(encoding="utf-8")
    assert page.startswith("# A page\n\nProse stays as it was.\n\n```python\nimport torch\n")
    assert "```text\nprinted by the block\n```" in page and "    ```text\n    indented torch.Size([3])\n    ```" in page
    assert "![Autograd graph (Graphviz (SVG))](page-1.svg)" in page and "](page-2.html)" in page
    labels = {html.unescape(label) for label in re.findall(r"<text[^>]*>([^<]*)</text>", (rendered / "guide" / "page-1.svg").read_text())}
    assert node_names(CHAIN) <= labels
    assert "<html" in (rendered / "guide" / "page-2.html").read_text(encoding="utf-8").lower()
    assert (rendered / "index.md").read_text(encoding="utf-8") == "# No blocks\n"


@pytest.mark.slow
def test_the_mermaid_fence_parses_with_mermaid_js(rendered):
    fences = re.findall(r"```mermaid\n(.*?)\n```", (rendered / "guide" / "page.md").read_text(encoding="utf-8"), re.DOTALL)
    assert len(fences) == 1
    (parsed,) = parse_mermaid(fences)
    assert parsed["ok"], parsed
    shown = {vertex["text"] for vertex in parsed["vertices"].values()}
    assert all(any(name in text for text in shown) for name in node_names(CHAIN)), shown


def test_a_failing_block_exits_1_with_page_line_and_traceback_and_writes_nothing(tmp_path, capsys):
    (tmp_path / "page.md").write_text("# Page\n\n```gradexport\nx = 1\n1 / 0\n```\n", encoding="utf-8")
    assert main(["render-md", str(tmp_path / "page.md"), "-o", str(tmp_path / "out")]) == 1
    error = capsys.readouterr().err
    assert f"{tmp_path / 'page.md'}:3: the gradexport block on this line failed" in error
    assert 'page.md", line 5, in <module>' in error and "ZeroDivisionError" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("option", "status"), [([], 0), (["--warnings", "strict"], 1)])
def test_warnings_are_printed_and_fail_only_when_asked(tmp_path, capsys, option, status):
    (tmp_path / "page.md").write_text("```gradexport show=\"output\"\nimport warnings\nwarnings.warn('careful')\n```\n", encoding="utf-8")
    assert main(["render-md", str(tmp_path / "page.md"), "-o", str(tmp_path / "out"), *option]) == status
    assert "page.md:1: the gradexport block on this line warned: UserWarning: careful" in capsys.readouterr().err
    assert "UserWarning: careful" in (tmp_path / "out" / "page.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("argv", "message"), [(["missing.md"], "no such file: missing.md"), (["--formats", "png"], "give one or more of")])
def test_bad_usage_exits_2(tmp_path, capsys, argv, message):
    (tmp_path / "page.md").write_text("text\n", encoding="utf-8")
    pages = argv if argv[0] != "--formats" else [str(tmp_path / "page.md"), *argv]
    assert main(["render-md", *pages, "-o", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.browser
def test_the_markdown_shows_its_picture_in_chromium_offline(rendered, browser):
    """The Markdown as a generator would publish it (Python-Markdown's HTML), served locally: the SVG loads."""
    body = markdown.markdown((rendered / "guide" / "page.md").read_text(encoding="utf-8"), extensions=["fenced_code"])
    (rendered / "guide" / "page.html").write_text(f"<!DOCTYPE html><html><body>{body}</body></html>", encoding="utf-8")
    outside = block_outside(browser)
    with serve_folder(rendered) as url:
        page = browser.new_page()
        page.goto(f"{url}guide/page.html", wait_until="load")
        sizes = page.evaluate("[...document.images].map(image => [image.getAttribute('src'), image.naturalWidth, image.naturalHeight])")
        page.close()
    assert sizes and all(width > 20 and height > 20 for _, width, height in sizes), sizes
    assert not outside
