"""``mkdocs build --strict`` of the project's site, and what the built pages contain."""

from __future__ import annotations

import html
import json
import re
import sys
import sysconfig

import torch
from site_fixtures import REPO, BuiltSite, built_site  # noqa: F401  (built_site is a fixture)

from gradexport.frontends.mkdocs.blocks import find_blocks

DOCS = REPO / "docs"
MERMAID = re.compile(r'<pre class="mermaid"><code>(.*?)</code></pre>', re.S)


def page_html(site: BuiltSite, markdown: str) -> str:
    path = site.directory / markdown.removesuffix(".md")
    path = site.directory / "index.html" if markdown == "index.md" else path / "index.html"
    return path.read_text(encoding="utf-8")


def mermaid_sources(text: str) -> list[str]:
    return [html.unescape(source) for source in MERMAID.findall(text)]


def test_strict_build_has_no_warnings(built_site):
    assert not re.search(r"^(WARNING|ERROR) ", built_site.log, re.M), built_site.log


def test_every_page_is_built_and_every_example_was_replaced(built_site):
    for markdown in DOCS.rglob("*.md"):
        source = markdown.read_text(encoding="utf-8")
        text = page_html(built_site, markdown.relative_to(DOCS).as_posix())
        assert "gradexport-diagram-" not in text.replace('class="gradexport-diagram', ""), markdown
        blocks = find_blocks(source.splitlines(), markdown.name)
        drawn = [block for block in blocks if block.options.show == {"code", "output", "diagram"} and not block.options.graph]
        if any({"mermaid", "svg"} <= set(block.options.formats) for block in drawn):
            assert '<pre class="mermaid">' in text and 'class="gradexport-diagram gradexport-svg"><svg' in text, markdown


def test_first_example_shows_torchs_own_gradients(built_site):
    text = page_html(built_site, "blog/multiply-then-sum.md")
    torch.manual_seed(6)
    x = torch.randn(4, 4, requires_grad=True)
    y = torch.randn(4, 4, requires_grad=True)
    (x * y).sum().backward()
    for value in (x.grad, y.grad):
        assert html.escape(str(value)) in text
    # The four manual calls gave backward()'s result, and the call outside no_grad left a graph on .grad.
    assert text.count(html.escape("True True")) >= 3
    assert "&lt;CopyBackwards object at" in text


def test_second_example_draws_two_labelled_edges_into_unbind(built_site):
    torch.manual_seed(6)
    x = torch.randn(2, requires_grad=True)
    first, second = x.unbind()
    add = (first + second).grad_fn
    assert [input_nr for _, input_nr in add.next_functions] == [0, 1]

    source = mermaid_sources(page_html(built_site, "blog/unbind-then-add.md"))[0]  # the graph; step pictures follow
    ids = {name: re.search(rf'(\w+)[\[({{]+"[^"]*{name}', source)[1] for name in ("AddBackward0", "UnbindBackward0")}
    labels = re.findall(rf'{ids["AddBackward0"]} -->\|"([^"]*)"\| {ids["UnbindBackward0"]}\b', source)
    assert sorted(label.split("<br")[0] for label in labels) == ["0→0", "1→1"]


def test_mermaid_is_served_from_the_site_and_loaded_first(built_site):
    shipped = built_site.directory / "js" / "mermaid.min.js"
    assert shipped.read_bytes() == (REPO / "node_modules" / "mermaid" / "dist" / "mermaid.min.js").read_bytes()
    for page in built_site.directory.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        if "assets/javascripts/bundle." in text:
            assert -1 < text.find("js/mermaid.min.js") < text.find("assets/javascripts/bundle."), page


def reference_pages(site: BuiltSite) -> dict[str, str]:
    return {path.name: page_html(site, path.name) for path in sorted(DOCS.glob("reference*.md"))}


def test_api_reference_is_generated_from_docstrings(built_site):
    text = page_html(built_site, "reference-graph.md")
    assert 'id="gradexport.to_networkx"' in text
    assert "Build the autograd graph behind" in text  # the first line of to_networkx's docstring


def test_api_reference_documents_every_public_name_once_by_topic(built_site):
    """Split by topic: each name of gradexport.__all__ has its heading on one page; constants and types are on the first."""
    import gradexport

    pages = reference_pages(built_site)
    assert len(pages) >= 6
    for name in gradexport.__all__:
        if name in ("KINDS", "SPECIAL_KINDS", "VIEW_OPS"):
            continue
        ids = {rf'id="gradexport.{name}"', rf'id="gradexport.core.errors.{name}"'}
        where = [page for page, text in pages.items() if any(i in text for i in ids)]
        assert len(where) == 1, (name, where)
        count = sum(text.count(i) for text in pages.values() for i in ids)
        assert count == 1, (name, count)
    first = html.unescape(re.sub(r"<[^>]+>", "", pages["reference.md"]))
    assert f"KINDS = {gradexport.constants.KINDS}" in first and "'copy_slices': " in first and "'TBackward0'" in first
    for alias in ("Roots", "Params", "GradOutputs", "GraphOrRoots", "Diffable", "ExportKeywords"):
        assert f"{alias} = " in first or f"<code>{alias}</code>" in pages["reference.md"], alias


def test_api_reference_hides_internals_and_factory_code(built_site):
    for page, text in reference_pages(built_site).items():
        main = text[text.index("<article") : text.index("</article>")]
        for internal in ("BlockRunner", "run_blocks", "check_command", "to_none_node", "_boolean", "_direction", "the module docstring"):
            assert internal not in main, (page, internal)
    options = html.unescape(re.sub(r"<[^>]+>", "", page_html(built_site, "reference-options.md")))
    assert "direction: str = 'TB'," in options and "option(" not in options


def test_search_index_holds_no_diagram_text(built_site):
    """Diagrams are excluded from Material's search: neither Mermaid source nor Graphviz's SVG text is indexed."""
    index = json.loads((built_site.directory / "search" / "search_index.json").read_text(encoding="utf-8"))
    texts = {entry["location"]: html.unescape(entry["text"]) for entry in index["docs"]}
    graph_page = texts["blog/multiply-then-sum/#the-graph"]
    assert "gradexport.to_networkx(l" in graph_page  # the code is indexed ...
    for location, text in texts.items():
        assert "useMaxWidth" not in text, location  # ... the Mermaid diagrams' front matter is not
        assert "n0->n1" not in text, location  # nor the SVG's edge titles


def test_api_reference_shows_the_public_api_as_written(built_site):
    """No reStructuredText or Sphinx syntax leaks into the page, internals are left out, examples are code."""
    page = "".join(reference_pages(built_site).values())
    text = html.unescape(re.sub(r"<[^>]+>", "", page))
    assert not re.search(r"::[ \t]*$", text, re.MULTILINE), "an RST literal block (`text::`) leaked"
    assert not re.search(r":(func|class|meth|mod|data|attr|exc|obj):`", text), "a Sphinx role leaked"
    for internal in (
        "GraphStream.discover",
        "GraphStream.none_node",
        "frontends.mkdocs.plugin.GradexportPlugin.on_startup",
        "frontends.mkdocs.runner.run_blocks",
    ):
        assert f'id="gradexport.{internal}"' not in page, internal
    # Doctests are rendered as highlighted code, not as prose.
    assert page.count('<span class="gp">&gt;&gt;&gt; </span>') > 20
    # The plugin's block options are a list, one item per option.
    plugin = page_html(built_site, "reference-plugin.md")
    for option in ("show", "formats", "graph"):
        assert re.search(rf"<li>\s*<p>\s*<code>{option}</code>|<li><code>{option}</code>", plugin), option


def test_no_page_shows_the_build_machines_paths(built_site):
    """Printed tracebacks name a page by its place in docs/, not by where the site was built or Python's folders."""
    # The standard library's folder: the debugging guide showed threading.py's frames (issue 37).
    folders = {str(REPO), sys.prefix, sys.base_prefix, *(sysconfig.get_paths()[kind] for kind in ("stdlib", "purelib", "platlib"))}
    for page in built_site.directory.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not [folder for folder in folders if folder in text], page
    assert str(REPO) not in (built_site.directory / "search" / "search_index.json").read_text(encoding="utf-8")
    debugging = html.unescape(re.sub(r"<[^>]+>", "", page_html(built_site, "guides/debugging.md")))
    assert 'File "guides/debugging.md", line' in debugging


def test_sitemap_lists_every_page(built_site):
    sitemap = (built_site.directory / "sitemap.xml").read_text(encoding="utf-8")
    assert sitemap.count("<loc>") == len(list(DOCS.rglob("*.md")))
