"""The MkDocs plugin: block syntax, execution, embedding, errors and caching, on small sites built in-process."""

from __future__ import annotations

import html
import json
import re
import textwrap
from pathlib import Path

import pytest
import torch
from mkdocs.commands.build import build
from mkdocs.config import load_config
from mkdocs.exceptions import Abort, PluginError

import gradexport
from gradexport.frontends.mkdocs import plugin as mkdocs_plugin
from gradexport.frontends.mkdocs.blocks import find_blocks, parse_options

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = REPO / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"


def make_site(tmp_path: Path, pages: dict[str, str]) -> Path:
    """Write a small MkDocs Material project; return its mkdocs.yml."""
    docs = tmp_path / "docs"
    for name, text in pages.items():
        (docs / name).parent.mkdir(parents=True, exist_ok=True)
        (docs / name).write_text(textwrap.dedent(text), encoding="utf-8")
    config = tmp_path / "mkdocs.yml"
    config.write_text(
        "site_name: test\n"
        "theme:\n  name: material\n  font: false\n"
        f"plugins:\n  - gradexport:\n      mermaid_js: {MERMAID_JS}\n"
        "markdown_extensions:\n  - pymdownx.superfences\n  - pymdownx.tabbed:\n      alternate_style: true\n",
        encoding="utf-8",
    )
    return config


def build_site(config_file: Path) -> Path:
    config = load_config(str(config_file), site_dir=str(config_file.parent / "site"))
    build(config)
    return Path(config.site_dir)


def build_error(config_file: Path, caplog: pytest.LogCaptureFixture) -> str:
    """Build a site that must fail; return the error MkDocs reported."""
    with caplog.at_level("ERROR"), pytest.raises((Abort, PluginError)) as caught:
        build_site(config_file)
    if isinstance(caught.value, PluginError):  # raised before the build proper (on_config)
        return str(caught.value)
    return "\n".join(record.getMessage() for record in caplog.records if record.levelname == "ERROR")


def test_find_blocks_reads_options_lines_and_indentation():
    lines = [
        "# Page",  # 1
        '```gradexport show="code output" formats="svg"',  # 2
        "x = 1",  # 3
        "```",  # 4
        "!!! note",  # 5
        "    ```gradexport",  # 6
        "    if x:",  # 7
        "        y = 2",  # 8
        "    ```",  # 9
    ]
    first, second = find_blocks(lines, "page.md")
    assert (first.start, first.end, first.line, first.code) == (1, 4, 3, "x = 1\n")
    assert first.options.show == {"code", "output"} and first.options.formats == ("svg",)
    assert (second.indent, second.line, second.code) == ("    ", 7, "if x:\n    y = 2\n")
    assert second.options.formats == ("mermaid", "svg") and second.options.graph is None


def test_blocks_inside_other_fences_are_text():
    lines = ["````markdown", "```gradexport", "raise SystemExit", "```", "````", "~~~", "```gradexport", "~~~"]
    assert find_blocks(lines, "page.md") == []


@pytest.mark.parametrize(
    ("info", "message"),
    [
        ('colour="red"', "unknown option 'colour=red'"),
        ("direction", "unknown option 'direction'"),
        ('show="code picture"', "each part must be one of code, output, diagram"),
        ('formats="png"', "give one or more of mermaid, svg, html, dot, json, each once"),
        ('show="code', "cannot read the options"),
    ],
)
def test_bad_options_name_the_page_and_line(info, message):
    with pytest.raises(PluginError, match="page.md:4") as caught:
        parse_options(info, ("mermaid",), "page.md:4")
    assert message in str(caught.value)


def test_unclosed_block_is_an_error():
    with pytest.raises(PluginError, match="page.md:2: the gradexport block opened here is never closed"):
        find_blocks(["text", "```gradexport", "x = 1"], "page.md")


def test_blocks_share_a_namespace_and_show_output_and_diagram(tmp_path):
    page = """\
        # Example

        ```gradexport show="code output"
        import torch
        torch.manual_seed(6)
        x = torch.randn(4, 4, requires_grad=True)
        y = torch.randn(4, 4, requires_grad=True)
        ```

        ```gradexport formats="mermaid"
        l = (x * y).sum()
        l.backward()
        print(x.grad)
        l
        ```
        """
    site = build_site(make_site(tmp_path, {"index.md": page}))
    text = (site / "index.html").read_text(encoding="utf-8")

    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    (x * y).sum().backward()
    assert html.escape(str(x.grad)) in text  # the printed value, as torch prints it
    # The diagram names the nodes torch recorded.
    loss = (x * y).sum()
    mul = loss.grad_fn.next_functions[0][0]
    diagram = text[text.index('<pre class="mermaid">') :]
    assert type(loss.grad_fn).__name__ in diagram and type(mul).__name__ in diagram
    leaves = [node for node, _ in mul.next_functions if type(node).__name__ == "AccumulateGrad"]
    assert diagram.count(":::leaf") == len(leaves) == 2
    assert text.count('<pre class="mermaid">') == 1  # only the block with a last expression draws
    assert "gradexport-diagram-" not in text.replace('class="gradexport-diagram', "")  # no placeholder left
    assert (site / "js" / "mermaid.min.js").read_bytes() == MERMAID_JS.read_bytes()
    head = text[: text.index("</head>")]
    assert "js/mermaid.min.js" in head, "mermaid.js must load before Material's bundle, which otherwise fetches one"


def test_blocks_inside_a_definition_run(tmp_path):
    """A block indented under a definition (``:   `` of def_list) runs like one in an admonition (issue 37)."""
    page = """\
        Term
        :   Its definition, with an example.

            ```gradexport formats="mermaid"
            import torch
            a = torch.ones(2, requires_grad=True)
            print(type(a.exp().grad_fn).__name__)
            a.exp().sum()
            ```
        """
    config = make_site(tmp_path, {"index.md": page})
    config.write_text(config.read_text(encoding="utf-8") + "  - def_list\n", encoding="utf-8")
    text = (build_site(config) / "index.html").read_text(encoding="utf-8")
    torch_name = type(torch.ones(2, requires_grad=True).exp().grad_fn).__name__
    definition = text[text.index("<dd>") : text.index("</dd>")]
    assert "gradexport show=" not in definition
    assert f"<code>{torch_name}\n</code>" in definition.replace("<span>", "").replace("</span>", "")  # its output
    assert '<pre class="mermaid">' in definition


def test_two_formats_become_tabs_with_inline_svg(tmp_path):
    page = """\
        ```gradexport show="diagram" graph="{'total': a.exp().sum()}"
        import torch
        a = torch.ones(2, requires_grad=True)
        ```
        """
    site = build_site(make_site(tmp_path, {"index.md": page}))
    text = (site / "index.html").read_text(encoding="utf-8")
    assert 'class="tabbed-set' in text and ">Mermaid</label>" in text and ">Graphviz (SVG)</label>" in text
    svg = text[text.index('<div class="gradexport-diagram gradexport-svg">') :]
    assert svg.index("<svg") < svg.index("ExpBackward0") < svg.index("</svg>")
    assert "import torch" not in text  # show="diagram" hides the code


def test_failing_block_stops_the_build_with_page_line_and_traceback(tmp_path, caplog):
    page = """\
        # Title

        ```gradexport
        import torch
        w = torch.ones(2)
        loss = (w * missing_name).sum()
        ```
        """
    message = build_error(make_site(tmp_path, {"guide/page.md": page}), caplog)
    assert "guide/page.md:3: the gradexport block on this line failed" in message
    assert f'File "{(tmp_path / "docs" / "guide" / "page.md").resolve()}", line 6' in message
    assert "loss = (w * missing_name).sum()" in message  # the traceback quotes the Markdown line
    assert message.rstrip().endswith("NameError: name 'missing_name' is not defined")
    assert "frontends/mkdocs" not in message  # only the example's own frames


def test_a_value_that_is_not_a_graph_root_fails_clearly(tmp_path, caplog):
    config = make_site(tmp_path, {"index.md": "```gradexport\nimport torch\ntorch.ones(3)\n```\n"})
    assert re.search(r"(?s)index.md:1: .*RootError: .*does not require grad", build_error(config, caplog))


def test_two_formats_need_content_tabs(tmp_path, caplog):
    config = make_site(tmp_path, {"index.md": "```gradexport\nx = 1\n```\n"})
    config.write_text(config.read_text().replace("  - pymdownx.tabbed:\n      alternate_style: true\n", ""))
    assert re.search("index.md: a gradexport block shows two formats.*pymdownx.tabbed", build_error(config, caplog))


def test_missing_mermaid_says_run_npm_ci(tmp_path, caplog):
    config = make_site(tmp_path, {"index.md": "text\n"})
    config.write_text(config.read_text().replace(str(MERMAID_JS), "no/such/mermaid.min.js"))
    assert re.search(r"mermaid.js not found at .*no/such/mermaid.min.js: run `npm ci`", build_error(config, caplog))


def test_results_are_cached_until_the_page_or_the_library_changes(tmp_path, monkeypatch):
    runs = tmp_path / "runs.txt"
    page = f"```gradexport show=\"output\"\nprint(open({str(runs)!r}, 'a').write('run\\n'))\n```\n"
    config_file = make_site(tmp_path, {"index.md": page})
    config = load_config(str(config_file), site_dir=str(tmp_path / "site"))
    build(config)
    build(config)
    assert runs.read_text() == "run\n"

    forgotten = []
    monkeypatch.setattr(mkdocs_plugin, "library_fingerprint", lambda: "edited")
    monkeypatch.setattr(mkdocs_plugin, "_forget_library", lambda: forgotten.append(True))
    build(config)
    assert runs.read_text() == "run\nrun\n" and forgotten == [True]

    (tmp_path / "docs" / "index.md").write_text(page + "\nmore text\n```gradexport\nx = 1\n```\n")
    build(config)
    assert runs.read_text() == "run\nrun\nrun\n"


def test_sys_exit_in_an_example_fails_the_page_not_the_process(tmp_path, caplog):
    config = make_site(tmp_path, {"index.md": "text\n\n```gradexport\nimport sys\nsys.exit(3)\n```\n"})
    message = build_error(config, caplog)
    assert "index.md:3: the gradexport block on this line failed" in message and "SystemExit: 3" in message


def test_a_syntax_error_points_at_the_markdown_line(tmp_path, caplog):
    config = make_site(tmp_path, {"index.md": "# Title\n\n```gradexport\nx = 1\ny = (\n```\n"})
    message = build_error(config, caplog)
    assert "index.md:3: the gradexport block on this line failed" in message
    assert re.search(r'File ".*index.md", line 5\n.*\n.*\nSyntaxError', message), message


def test_a_warning_in_an_example_is_shown_and_does_not_fail_a_strict_build(tmp_path, caplog):
    page = "text\n\n```gradexport show=\"code output\"\nimport warnings\nwarnings.warn('careful', FutureWarning)\n```\n"
    config = load_config(str(make_site(tmp_path, {"index.md": page})), site_dir=str(tmp_path / "site"), strict=True)
    with caplog.at_level("INFO"):
        build(config)
    logged = [record for record in caplog.records if "careful" in record.getMessage()]
    assert [(record.levelname, record.getMessage()) for record in logged] == [
        ("INFO", "index.md:3: the gradexport block on this line warned: FutureWarning: careful")
    ]
    assert "FutureWarning: careful" in html.unescape((tmp_path / "site" / "index.html").read_text(encoding="utf-8"))


@pytest.mark.parametrize(("fence", "plugin_option"), [('warnings="strict"', ""), ("", "      warnings: strict\n")])
def test_a_warning_fails_a_strict_build_where_the_block_or_the_config_asks(tmp_path, caplog, fence, plugin_option):
    page = f"text\n\n```gradexport show=\"code\" {fence}\nimport warnings\nwarnings.warn('careful', FutureWarning)\n```\n"
    config_file = make_site(tmp_path, {"index.md": page})
    config_file.write_text(config_file.read_text(encoding="utf-8").replace("\nmarkdown_extensions", f"\n{plugin_option}markdown_extensions"), encoding="utf-8")
    config = load_config(str(config_file), site_dir=str(tmp_path / "site"), strict=True)
    with caplog.at_level("WARNING"), pytest.raises(Abort, match="1 warnings in strict mode"):
        build(config)
    assert "index.md:3: the gradexport block on this line warned: FutureWarning: careful" in caplog.text


def test_serve_watches_the_library():
    class Server:
        watched: list[str] = []

        def watch(self, path: str) -> None:
            self.watched.append(path)

    server = Server()
    assert mkdocs_plugin.GradexportPlugin().on_serve(server, config=None, builder=None) is server
    assert server.watched == [str(Path(gradexport.__file__).resolve().parent)]


def test_every_registered_format_either_sits_in_a_page_or_is_refused_with_its_reason():
    from gradexport.api.registry import FORMATS
    from gradexport.frontends.mkdocs.embed import FORMATS as EMBEDDED
    from gradexport.frontends.mkdocs.embed import NOT_EMBEDDED

    assert set(EMBEDDED) | set(NOT_EMBEDDED) == set(FORMATS) and not set(EMBEDDED) & set(NOT_EMBEDDED)
    with pytest.raises(PluginError, match="give one or more of mermaid, svg, html, dot, json"):
        parse_options('formats="model-explorer"', ("mermaid",), "page.md:1")


def test_dot_and_json_show_as_highlighted_text(tmp_path):
    page = """\
        ```gradexport formats="dot json" show="diagram"
        import torch
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum()
        ```
        """
    site = build_site(make_site(tmp_path, {"index.md": page}))
    html_text = (site / "index.html").read_text(encoding="utf-8")
    assert html_text.count('class="tabbed-set') == 1  # two formats: two tabs
    dot = re.search(r'<code class="language-dot">(.*?)</code>', html_text, re.DOTALL)
    json_text = re.search(r'<code class="language-json">(.*?)</code>', html_text, re.DOTALL)
    assert dot and "MulBackward0" in html.unescape(dot[1]) and "0→0" in html.unescape(dot[1])
    assert json_text and json.loads(html.unescape(json_text[1]))["multigraph"] is True
