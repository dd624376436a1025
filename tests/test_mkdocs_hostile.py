"""The MkDocs plugin against misbehaving pages: hidden fences, endless or exiting blocks, floods of output, drafts."""

from __future__ import annotations

import os
import re
from pathlib import Path

import markdown
import pytest
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort
from test_mkdocs_plugin import build_error, build_site, make_site

from gradexport.frontends.mkdocs.blocks import find_blocks


def with_options(config: Path, **options: object) -> Path:
    """Add plugin options to a site from make_site."""
    lines = "".join(f"      {name}: {value}\n" for name, value in options.items())
    config.write_text(config.read_text().replace("      mermaid_js:", lines + "      mermaid_js:"), encoding="utf-8")
    return config


HIDING_PAGE = """\
# Where fences hide

```gradexport
marker = 0
```

<!-- a one-line comment does not hide what follows -->

```gradexport
marker = 1
```

<!--
```gradexport
marker = 2
```
-->

An indented code block shows a fence as text:

    ```gradexport
    marker = 3
    ```

!!! note

    ```gradexport
    marker = 4
    ```

    In the admonition, deeper still is code:

        ```gradexport
        marker = 5
        ```

=== "Tab"

    ```gradexport
    marker = 6
    ```

- a list item

    ```gradexport
    marker = 7
    ```

````markdown
```gradexport
marker = 8
```
````

text <!-- not a comment for Markdown when it does not start the line

```gradexport
marker = 9
```

-->
"""


def rendered_as_fences(page: str) -> set[int]:
    """The markers Python-Markdown itself shows as highlighted Python, outside HTML comments."""
    html = markdown.markdown(
        page.replace("```gradexport", "```python"),
        extensions=["admonition", "pymdownx.superfences", "pymdownx.tabbed"],
        extension_configs={"pymdownx.tabbed": {"alternate_style": True}},
    )
    visible = re.sub(r"(?s)<!--.*?-->", "", html)
    return {int(number) for number in re.findall(r'<div class="highlight"><pre>.*?marker.*?(\d+)', visible)}


def test_only_fences_that_markdown_renders_are_blocks():
    found = {int(block.code.split("=")[1]) for block in find_blocks(HIDING_PAGE.splitlines(), "page.md")}
    assert found == rendered_as_fences(HIDING_PAGE) == {0, 1, 4, 6, 7, 9}


def test_hidden_blocks_do_not_run_and_stay_as_written(tmp_path):
    page = (
        "# Page\n\n<!--\n```gradexport\nraise RuntimeError('ran inside a comment')\n```\n-->\n\n"
        "Shown as an example of the syntax:\n\n    ```gradexport\n    raise RuntimeError('ran inside indented code')\n    ```\n"
    )
    site = build_site(make_site(tmp_path, {"index.md": page}))
    text = (site / "index.html").read_text(encoding="utf-8")
    assert "<pre><code>```gradexport\nraise RuntimeError('ran inside indented code')\n```" in text
    comment = text[text.index("<!--") : text.index("-->")]
    assert "raise RuntimeError('ran inside a comment')" in comment


def test_an_endless_block_is_stopped_naming_page_and_line(tmp_path, caplog):
    page = "# Page\n\n```gradexport\nx = 1\n```\n\n```gradexport\nwhile True:\n    x += 1\n```\n"
    message = build_error(with_options(make_site(tmp_path, {"guide/loop.md": page}), timeout=1), caplog)
    assert "guide/loop.md:7: the gradexport block on this line ran longer than 1 s and was stopped" in message
    assert "plugin option timeout" in message


def test_the_time_limit_is_per_block(tmp_path):
    block = "```gradexport\nimport time\ntime.sleep(0.6)\n```\n\n"
    build_site(with_options(make_site(tmp_path, {"index.md": "# Page\n\n" + block * 3}), timeout=1))


@pytest.mark.parametrize(
    "call, message",
    [
        ("import os\nos._exit(0)", r"index\.md:7: the gradexport block on this line ended the process .*\(exit status 0;"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", r"index\.md:7: .*ended the process .*exit status -9"),
        ("import sys\nsys.exit(0)", r"index\.md:7: the gradexport block on this line failed:.*SystemExit: 0"),
    ],
)
def test_a_block_that_exits_fails_the_build(tmp_path, caplog, call, message):
    page = f"# Page\n\n```gradexport\nx = 1\n```\n\n```gradexport\n{call}\n```\n"
    assert re.search(message, build_error(make_site(tmp_path, {"index.md": page}), caplog), re.S)


def test_printed_output_is_capped_with_a_visible_note(tmp_path):
    page = "# Page\n\n```gradexport show=\"output\"\nprint('x' * 5000)\nprint('never shown')\n```\n"
    site = build_site(with_options(make_site(tmp_path, {"index.md": page}), max_output=1000))
    text = (site / "index.html").read_text(encoding="utf-8")
    assert "x" * 1000 in text and "x" * 1001 not in text and "never shown" not in text
    assert "[output cut: the block printed 5,013 characters; the first 1,000 are shown (plugin option max_output)]" in text


def test_twenty_megabytes_of_output_do_not_make_a_twenty_megabyte_page(tmp_path):
    page = "# Page\n\n```gradexport show=\"output\"\nfor _ in range(20):\n    print('y' * 1_000_000)\n```\n"
    site = build_site(make_site(tmp_path, {"index.md": page}))
    assert (site / "index.html").stat().st_size < 500_000
    assert "the first 100,000 are shown" in (site / "index.html").read_text(encoding="utf-8")


def test_draft_pages_run_their_blocks_when_served_not_when_built(tmp_path, caplog):
    pages = {"index.md": "# Home\n", "draft.md": "# Draft\n\n```gradexport\nraise RuntimeError('draft block ran')\n```\n"}
    config_file = make_site(tmp_path, pages)
    config_file.write_text(config_file.read_text() + "draft_docs: |\n  draft.md\n", encoding="utf-8")
    site = build_site(config_file)  # `mkdocs build` leaves drafts out, so their blocks do not run
    assert not (site / "draft").exists()
    config = load_config(str(config_file), site_dir=str(tmp_path / "served"))
    with caplog.at_level("ERROR"), pytest.raises(Abort):
        build(config, serve_url="http://127.0.0.1:8000/")  # what `mkdocs serve` does
    assert "draft.md:3: the gradexport block on this line failed" in caplog.text and "draft block ran" in caplog.text


@pytest.mark.parametrize("isolate", ["true", "false"])
def test_each_page_runs_in_its_own_temporary_folder(tmp_path, monkeypatch, isolate):
    monkeypatch.chdir(tmp_path)
    # isolate in the code too: the plugin's results cache lives as long as the process, across these builds
    code = f"import os  # {isolate}\nopen('written.txt', 'w').close()\nprint(os.getcwd(), os.getpid())\n"
    block = f'```gradexport show="output"\n{code}```\n'
    site = build_site(with_options(make_site(tmp_path, {"a.md": "# A\n\n" + block, "b.md": "# B\n\n" + block}), isolate=isolate))
    folders, pids = [], []
    for page in ("a", "b"):
        text = (site / page / "index.html").read_text(encoding="utf-8")
        folder, pid = re.search(r"<code>(\S*gradexport-page-\S+) (\d+)", text).groups()
        folders.append(folder)
        pids.append(int(pid))
    assert folders[0] != folders[1] and not any(Path(folder).exists() for folder in folders)
    assert Path.cwd() == tmp_path and not list(tmp_path.rglob("written.txt"))
    if isolate == "true":
        assert os.getpid() not in pids and pids[0] == pids[1]  # one child serves the whole build
    else:
        assert pids == [os.getpid(), os.getpid()]


@pytest.mark.parametrize("option, value", [("timeout", -1), ("max_output", -5)])
def test_negative_limits_are_refused(tmp_path, caplog, option, value):
    config = with_options(make_site(tmp_path, {"index.md": "# Page\n"}), **{option: value})
    assert f"plugins.gradexport.{option}: give a number >= 0 (0 turns it off), got {value}" in build_error(config, caplog)
