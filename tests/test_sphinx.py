"""The Sphinx host: reST and MyST pages, errors, warnings, parallel and incremental builds, built by sphinx-build itself."""

from __future__ import annotations

import html
import re
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from block_fixtures import CHAIN, node_names
from browser_fixtures import block_outside, browser, serve_folder, viewer_frame  # noqa: F401  (browser is a fixture)

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
MERMAID_JS = REPO / "node_modules" / "mermaid" / "dist" / "mermaid.min.js"


def make_project(folder: Path, pages: dict[str, str], conf: str = "") -> Path:
    """A Sphinx project with ``pages`` (``index.rst`` lists the others); return its source folder."""
    source = folder / "src"
    source.mkdir(parents=True)
    (source / "conf.py").write_text(f'extensions = ["myst_parser", "gradexport.sphinx"]\ngradexport_mermaid_js = {str(MERMAID_JS)!r}\n{conf}', encoding="utf-8")
    others = [Path(name).stem for name in pages if name != "index.rst"]
    index = pages.get("index.rst", "Index\n=====\n")
    toctree = "".join(f"   {name}\n" for name in others)
    (source / "index.rst").write_text(f"{index}\n\n.. toctree::\n\n{toctree}" if others else index, encoding="utf-8")
    for name, text in pages.items():
        if name != "index.rst":
            (source / name).write_text(text, encoding="utf-8")
    return source


def sphinx_build(source: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """Run ``sphinx-build`` (of the interpreter running the tests) into ``source/../html``."""
    command = [sys.executable, "-m", "sphinx", "-b", "html", *options, str(source), str(source.parent / "html")]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=False)


def rst_block(code: str, *options: str) -> str:
    lines = "".join(f"   {option}\n" for option in options)
    return f".. gradexport::\n{lines}\n" + textwrap.indent(code, "   ")


RST_PAGE = f"Page\n====\n\nProse before.\n\n{rst_block(CHAIN, ':formats: svg mermaid', ':direction: LR')}\nProse after.\n"
MYST_PAGE = f"# MyST page\n\n```{{gradexport}}\n:formats: svg html\nimport warnings\nwarnings.warn('careful', UserWarning)\n{CHAIN}```\n"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A reST and a MyST page built with -W (a block's warning must not fail it) and the furo theme."""
    source = make_project(tmp_path_factory.mktemp("site"), {"index.rst": RST_PAGE, "myst.md": MYST_PAGE}, 'html_theme = "furo"\n')
    built = sphinx_build(source, "-W")
    assert built.returncode == 0, built.stdout + built.stderr
    return source.parent / "html"


def test_rest_and_myst_pages_show_code_output_and_the_graph_torch_made(site):
    expected = node_names(CHAIN)
    for page in ("index.html", "myst.html"):
        text = (site / page).read_text(encoding="utf-8")
        svg = re.search(r'<div class="gradexport-diagram gradexport-svg">(<svg.*?</svg>)\s*</div>', text, re.DOTALL)
        assert svg, page
        labels = set(re.findall(r"<text[^>]*>([^<]*)</text>", svg[1]))
        assert expected <= {html.unescape(label) for label in labels}, (page, expected, labels)
        assert "printed by the block" in text and "x.exp()" in html.unescape(text)
    mermaid = re.search(r'<pre class="mermaid">(.*?)</pre>', (site / "index.html").read_text(encoding="utf-8"), re.DOTALL)
    assert mermaid and all(name in html.unescape(mermaid[1]) for name in expected)


def test_a_blocks_warning_is_shown_with_its_output_and_does_not_fail_minus_w(site):
    text = (site / "myst.html").read_text(encoding="utf-8")
    assert "UserWarning: careful" in text


def test_mermaid_is_served_from_the_site_and_only_where_a_page_needs_it(site):
    assert (site / "_static" / "gradexport" / "mermaid.min.js").read_bytes() == MERMAID_JS.read_bytes()
    assert '_static/gradexport/mermaid.min.js"' in (site / "index.html").read_text(encoding="utf-8")
    assert "mermaid.min.js" not in (site / "myst.html").read_text(encoding="utf-8")  # an SVG alone


@pytest.mark.parametrize(
    ("name", "page", "directive_line", "raising_line"),
    [
        ("page.rst", "Page\n====\n\n" + rst_block("x = 1\ny = 2\nraise ValueError('boom')\n", ":show: code"), 4, 9),
        ("page.md", "# Page\n\n```{gradexport}\n:show: code\nx = 1\n\nraise ValueError('boom')\n```\n", 3, 7),
    ],
)
def test_a_raising_block_fails_the_build_with_its_page_line_and_the_users_traceback(tmp_path, name, page, directive_line, raising_line):
    built = sphinx_build(make_project(tmp_path, {name: page}))
    assert built.returncode != 0
    report = built.stdout + built.stderr
    failure = re.search(rf"{re.escape(name)}:{directive_line}: the gradexport block on this line failed:\n(.*?)ValueError: boom", report, re.DOTALL)
    assert failure, report
    assert f'{name}", line {raising_line}, in <module>' in failure[1] and "raise ValueError('boom')" in failure[1]
    assert "gradexport/frontends" not in failure[1]  # the user's frames only


@pytest.mark.parametrize(
    ("name", "page"),
    [
        ("page.rst", "Page\n====\n\n" + rst_block("x = 1\n", ":colour: red")),
        ("page.md", "# Page\n\n```{gradexport}\n:colour: red\nx = 1\n```\n"),
    ],
)
def test_an_unknown_option_fails_the_build_naming_the_known_ones(tmp_path, name, page):
    built = sphinx_build(make_project(tmp_path, {name: page}))
    assert built.returncode != 0
    assert f"{name}:" in built.stderr and "unknown option ':colour: red' on a gradexport block" in built.stderr, built.stderr
    assert "formats=" in built.stderr and "direction" in built.stderr


@pytest.mark.parametrize(("option", "conf"), [(":warnings: strict", ""), ("", 'gradexport_warnings = "strict"\n')])
def test_a_warning_fails_minus_w_where_the_block_or_the_configuration_asks(tmp_path, option, conf):
    page = "Page\n====\n\n" + rst_block("import warnings\nwarnings.warn('careful', FutureWarning)\n", ":show: code output", option)
    built = sphinx_build(make_project(tmp_path, {"page.rst": page}, conf), "-W")
    assert built.returncode != 0
    assert "page.rst:4: the gradexport block on this line warned: FutureWarning: careful" in built.stderr, built.stderr


def test_a_parallel_build_runs_each_pages_blocks_in_its_reading_process(tmp_path):
    code = "import os\nprint('page', {number}, 'run by a child of', os.getppid())\n"
    pages = {f"page{number}.rst": f"Page {number}\n=======\n\n" + rst_block(code.format(number=number), ":show: output") for number in range(8)}
    built = sphinx_build(make_project(tmp_path, pages), "-j", "2", "-W")  # -W: Sphinx warns of an extension not parallel-safe
    assert built.returncode == 0, built.stdout + built.stderr
    readers = set()
    for number in range(8):
        shown = html.unescape((tmp_path / "html" / f"page{number}.html").read_text(encoding="utf-8"))
        printed = re.search(rf"page {number} run by a child of (\d+)", shown)
        assert printed, number
        readers.add(printed[1])
    assert len(readers) >= 2  # read serially, every block would run in one child of the one build process


def test_a_raising_block_fails_a_parallel_build_too(tmp_path):
    pages = {f"page{number}.rst": f"Page {number}\n=======\n\n" + rst_block(f"print({number})\n", ":show: output") for number in range(8)}
    pages["page5.rst"] = "Page 5\n======\n\n" + rst_block("x = 1\nraise KeyError('gone')\n")
    built = sphinx_build(make_project(tmp_path, pages), "-j", "2")
    assert built.returncode != 0
    assert "page5.rst:4: the gradexport block on this line failed" in built.stderr, built.stderr
    assert 'page5.rst", line 7, in <module>' in built.stderr and "KeyError: 'gone'" in built.stderr


def test_an_incremental_build_reruns_only_the_blocks_that_changed(tmp_path):
    runs = tmp_path / "runs.txt"

    def page(word: str, prose: str) -> str:
        code = f"with open({str(runs)!r}, 'a') as log:\n    print({word!r}, file=log)\n"
        return f"Page {word}\n======\n\n{prose}\n\n" + rst_block(code, ":show: code")

    source = make_project(tmp_path, {"first.rst": page("first", "Prose."), "second.rst": page("second", "Prose.")})
    assert sphinx_build(source).returncode == 0
    assert sorted(runs.read_text().split()) == ["first", "second"]
    (source / "first.rst").write_text(page("first", "Other prose, same block."), encoding="utf-8")
    built = sphinx_build(source)
    assert built.returncode == 0 and "first" in built.stdout  # Sphinx read the page again...
    assert sorted(runs.read_text().split()) == ["first", "second"]  # ...and ran none of its blocks
    (source / "second.rst").write_text(page("second", "Prose.").replace("file=log)", "file=log, end='\\n')"), encoding="utf-8")
    assert sphinx_build(source).returncode == 0
    assert sorted(runs.read_text().split()) == ["first", "second", "second"]


GALLERY_EXAMPLE = '''"""
The chain rule
==============

Two graphs: one shown, one left as a block's value.
"""

import torch

import gradexport

x = torch.ones(3, requires_grad=True)
loss = (x.exp() * 2).sum()
view = gradexport.show(loss)

# %%
# A graph as the last value of a block.
gradexport.to_networkx(x.sin().sum())
'''


def test_a_gallery_example_gets_its_graphs_as_pictures_and_thumbnail(tmp_path):
    pytest.importorskip("sphinx_gallery")
    conf = (
        'extensions = ["sphinx_gallery.gen_gallery", "gradexport.sphinx"]\n'
        'sphinx_gallery_conf = {"examples_dirs": "examples", "gallery_dirs": "auto_examples", "image_scrapers": ("matplotlib", "gradexport")}\n'
    )
    source = make_project(tmp_path, {"index.rst": "Gallery\n=======\n\n.. toctree::\n\n   auto_examples/index\n"}, conf)
    (source / "examples").mkdir()
    (source / "examples" / "README.txt").write_text("Examples\n========\n", encoding="utf-8")
    (source / "examples" / "plot_chain.py").write_text(GALLERY_EXAMPLE, encoding="utf-8")
    built = sphinx_build(source, "-W")
    assert built.returncode == 0, built.stdout + built.stderr
    images = source / "auto_examples" / "images"
    expected = [node_names(CHAIN), node_names("import torch\nx = torch.ones(3, requires_grad=True)\nx.sin().sum()")]
    for number, names in enumerate(expected, 1):
        labels = set(re.findall(r"<text[^>]*>([^<]*)</text>", (images / f"sphx_glr_plot_chain_{number:03}.svg").read_text(encoding="utf-8")))
        assert names <= {html.unescape(label) for label in labels}, (number, labels)
    assert (images / "thumb" / "sphx_glr_plot_chain_thumb.svg").read_bytes() == (images / "sphx_glr_plot_chain_001.svg").read_bytes()
    example_page = (tmp_path / "html" / "auto_examples" / "plot_chain.html").read_text(encoding="utf-8")
    assert "sphx_glr_plot_chain_001.svg" in example_page and "sphx_glr_plot_chain_002.svg" in example_page
    assert "sphx_glr_plot_chain_thumb.svg" in (tmp_path / "html" / "auto_examples" / "index.html").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def site_url(site: Path) -> Iterator[str]:
    with serve_folder(site) as url:
        yield url


@pytest.mark.browser
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_page_draws_its_diagrams_offline_and_readable_in_chromium(site_url, browser, scheme):
    outside = block_outside(browser)
    page = browser.new_page()
    page.emulate_media(color_scheme=scheme)  # furo's default theme, "auto", follows it
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(site_url + "index.html", wait_until="load")
    page.wait_for_function("document.querySelector('.gradexport-diagram pre.mermaid svg') !== null", timeout=30_000)
    drawn = page.evaluate("[...document.querySelectorAll('.gradexport-diagram pre.mermaid svg .node')].map(node => node.textContent.trim())")
    assert node_names(CHAIN) <= {label.split()[0] for label in drawn if label}, drawn
    colours = page.evaluate(_COLOURS)
    page.close()
    assert not errors and not outside, (errors, outside)
    assert (_luminance(colours["body"]) < 0.2) == (scheme == "dark"), colours  # the theme did switch
    for panel in colours["panels"]:
        assert _luminance(panel) > 0.9, colours
    assert len(colours["texts"]) >= 2 * len(node_names(CHAIN)), colours  # both diagrams' node labels were found
    for text in colours["texts"]:  # Mermaid's labels, the SVG's node text
        assert _luminance(text) < 0.3, colours
    assert min(colours["svg"]) > 20


_COLOURS = """(() => {
  const colour = element => getComputedStyle(element).color;
  const svg = document.querySelector('.gradexport-svg svg').getBoundingClientRect();
  return {
    body: getComputedStyle(document.body).backgroundColor,
    panels: [...document.querySelectorAll('.gradexport-diagram')].map(element => getComputedStyle(element).backgroundColor),
    texts: [...document.querySelectorAll('.gradexport-diagram pre.mermaid .nodeLabel')].map(colour)
      .concat([...document.querySelectorAll('.gradexport-svg svg g.node text')].map(element => getComputedStyle(element).fill)),
    svg: [svg.width, svg.height],
  };
})()"""


def _luminance(css_colour: str) -> float:
    """Relative luminance (0 black to 1 white) of an ``rgb(...)``/``rgba(...)`` colour, as WCAG defines it."""
    red, green, blue = (int(part) / 255 for part in re.findall(r"[\d.]+", css_colour)[:3])
    linear = [part / 12.92 if part <= 0.03928 else ((part + 0.055) / 1.055) ** 2.4 for part in (red, green, blue)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


@pytest.mark.browser
@pytest.mark.parametrize(("scheme", "toggled"), [("light", "dark"), ("dark", "light")])
def test_the_embedded_viewer_follows_furos_theme_and_its_toggle(site_url, browser, scheme, toggled):
    outside = block_outside(browser)
    page = browser.new_page()
    page.emulate_media(color_scheme=scheme)  # furo's "auto" theme follows it
    page.goto(site_url + "myst.html", wait_until="load")
    frame = viewer_frame(page, 30)
    theme = "document.getElementById('gradexport-viewer').dataset.theme"
    frame.wait_for_function(f"{theme} === '{scheme}'", timeout=30_000)
    # What furo's theme button sets. Set again until the viewer follows: on a loaded machine furo's own start-up
    # script can still write its stored choice ("auto") after the page's load event, over the first toggle.
    deadline = time.monotonic() + 30
    while frame.evaluate(theme) != toggled and time.monotonic() < deadline:
        page.evaluate(f"document.body.dataset.theme = '{toggled}'")
        page.wait_for_timeout(200)
    assert frame.evaluate(theme) == toggled
    page.close()
    assert not outside
