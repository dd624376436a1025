"""Module boxes and folded modules on real architectures: titles, membership, collapse's depth, hostile names.

The reference is the model itself (``named_modules``, each class) and the real
consumers: mermaid.js's parser, pydot and Graphviz's ``dot``.
"""

from __future__ import annotations

import math
import re
import xml.etree.ElementTree as ElementTree

import networkx as nx
import pydot
import pytest
import torch
from examples_budget import budget
from format_fixtures import mermaid_shown, names, needs_dot, needs_mermaid, parse_mermaid, render_with_dot
from hypothesis import HealthCheck, assume, example, given, settings
from model_zoo import REAL_MODELS, ZOO
from test_formats_dot import label_lines
from torch import nn

import gradexport
from gradexport.formats.labels import MAX_LINE_CHARS, element_id, printable


def traced(name: str) -> tuple[nn.Module, nx.MultiDiGraph]:
    model, inputs = ZOO[name]()
    with gradexport.capture_modules():
        output = model(inputs)
    return model, gradexport.to_networkx(output.sum(), module=model)


def expected_title(model: nn.Module, path: str) -> str:
    """The title a box of ``path`` must show, from the model itself."""
    cls = type(model.get_submodule(path)).__name__
    return cls if path == "" else f"{path}: {cls}"


def expected_box(data: dict) -> str | None:
    """The module whose box a node sits in: its own, or for a folded module its parent's."""
    path = data.get("module")
    if path is None:
        return None
    if data["kind"] == "module":
        return None if path == "" else path.rpartition(".")[0]
    return path


def mermaid_boxes(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(title of each subgraph, innermost subgraph title of each node) as mermaid.js parses ``text``."""
    (result,) = parse_mermaid([text])
    assert result["ok"], (result.get("error"), text[:2000])
    titles = {sub["id"]: mermaid_shown(sub["title"])[0] for sub in result["subgraphs"]}
    # mermaid.js lists a subgraph's direct members; sub-boxes first, so the innermost one is the last seen.
    member_of: dict[str, str] = {}
    for sub in result["subgraphs"]:
        for node in sub["nodes"]:
            if node not in titles:
                member_of[node] = titles[sub["id"]]
    return titles, member_of


def dot_boxes(text: str) -> tuple[dict[str, str], dict[str, str]]:
    """(label of each cluster, innermost cluster label of each node) as pydot reads ``text``."""
    (graph,) = pydot.graph_from_dot_data(text)
    titles: dict[str, str] = {}
    member_of: dict[str, str] = {}
    # {rank="same"; ...} groups name nodes declared in their box; they are no box
    pending = [(sub, None) for sub in graph.get_subgraphs() if sub.get("rank") is None]
    while pending:
        sub, _ = pending.pop()
        title = label_lines(sub.get("label"))[0]
        titles[sub.get_name()] = title
        for node in sub.get_nodes():
            member_of[node.get_name().strip('"')] = title
        pending.extend((child, title) for child in sub.get_subgraphs())
    return titles, member_of


@pytest.mark.parametrize("depth", [None, 0, 1, 2, 3])
@pytest.mark.parametrize("name", sorted(ZOO))
def test_every_module_box_is_titled_and_holds_its_nodes(name: str, depth: int | None) -> None:
    model, graph = traced(name)
    if depth is not None:
        graph = gradexport.collapse(graph, depth)
    mermaid_text = gradexport.to_mermaid(graph)
    dot_text = gradexport.to_dot(graph)
    for titles, member_of in (mermaid_boxes(mermaid_text), dot_boxes(dot_text)):
        assert all(titles.values()), titles  # no box without a title (mermaid.js rejects `g0[""]`)
        for node, data in graph.nodes(data=True):
            box = expected_box(data)
            if box is None:
                assert element_id(node) not in member_of, (node, data)
            else:
                assert member_of[element_id(node)] == expected_title(model, box), (node, data)
    if depth == 1 and name == "resnet_like":  # the flatten made by ResNetLike.forward sits in the model's box
        (flatten,) = [node for node, op in graph.nodes(data="op") if op == "ViewBackward0" or op == "ReshapeAliasBackward0"]
        assert mermaid_boxes(mermaid_text)[1][flatten] == "ResNetLike"
    if depth is not None:  # Graphviz takes minutes over the full graphs' nested clusters on a busy machine
        render_with_dot(dot_text)


def test_module_classes_come_from_the_model_and_survive_collapse_and_json() -> None:
    model, graph = traced("resnet_like")
    classes = {name: type(module).__name__ for name, module in model.named_modules()}
    assert graph.graph["module_classes"] == classes
    folded = gradexport.collapse(graph, 1)
    assert folded.graph["module_classes"] == classes
    assert gradexport.from_json(gradexport.to_json(folded)).graph["module_classes"] == classes


def folded_paths(graph: nx.MultiDiGraph) -> dict[str, int]:
    return {data["module"]: data["num_nodes"] for _, data in graph.nodes(data=True) if data["kind"] == "module"}


def nodes_under(graph: nx.MultiDiGraph, path: str) -> int:
    return sum(1 for _, module in graph.nodes(data="module") if module is not None and (module == path or module.startswith(path + ".")))


def test_depth_opens_levels_and_a_module_without_submodules_stays_one_node() -> None:
    model, graph = traced("resnet_like")
    two = folded_paths(gradexport.collapse(graph, 2))
    # conv1, bn1 and fc have no submodules: one node each at depth 2, as layer1.0 (level 2) is.
    assert {"conv1", "bn1", "fc", "layer1.0", "layer1.1", "layer2.0", "layer2.1"} <= set(two)
    assert all(count == nodes_under(graph, path) for path, count in two.items())
    assert not {"", "layer1", "layer2"} & set(two)  # opened: their boxes hold what they made themselves
    one = folded_paths(gradexport.collapse(graph, 1))
    children = {name for name, _ in model.named_children() if nodes_under(graph, name)}
    assert set(one) == children


def test_gpt_blocks_show_at_depth_three_and_by_name() -> None:
    model, graph = traced("gpt_like")
    blocks = {f"transformer.h.{index}" for index in range(len(model.transformer["h"]))}
    at_three = folded_paths(gradexport.collapse(graph, 3))
    assert blocks | {"lm_head", "transformer.ln_f", "transformer.wte", "transformer.wpe"} == set(at_three)
    by_name = gradexport.collapse(graph, modules=["transformer.h.*"])
    assert set(folded_paths(by_name)) == blocks
    assert all(count == nodes_under(graph, path) for path, count in folded_paths(by_name).items())
    assert any(path == "lm_head" for _, path in by_name.nodes(data="module"))  # not folded: left as it was
    assert by_name.graph["collapsed_modules"] == ["transformer.h.*"]
    # Composes: folding the blocks by name, then to depth 1, is depth 1.
    direct, composed = gradexport.collapse(graph, 1), gradexport.collapse(by_name, 1)
    assert dict(direct.nodes(data=True)) == dict(composed.nodes(data=True))
    # "*" means the model's modules, outermost first; "" is the model.
    assert set(folded_paths(gradexport.collapse(graph, modules="*"))) == {"transformer", "lm_head"}
    assert set(folded_paths(gradexport.collapse(graph, modules=[""]))) == {""}


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((nx.MultiDiGraph(), "1"), TypeError, r"^collapse: depth must be an int .*got '1'$"),
        ((nx.MultiDiGraph(), math.nan), TypeError, r"^collapse: depth must be an int .*got nan$"),
        ((nx.MultiDiGraph(), 1.5), TypeError, r"^collapse: depth must be an int .*got 1.5$"),
        ((nx.MultiDiGraph(), True), TypeError, r"^collapse: depth must be an int .*got True$"),
        ((nx.MultiDiGraph(), 10**100), ValueError, r"^collapse: depth must be from 0 to 10000 .*got 1000000000"),
        ((nx.MultiDiGraph(), -1), ValueError, r"^collapse: depth must be from 0 to 10000 .*got -1$"),
        ((nx.DiGraph(), 1), TypeError, r"^collapse: graph must be a networkx.MultiDiGraph .*got DiGraph$"),
        ((nx.MultiDiGraph(),), TypeError, r"^collapse: give depth .* or modules"),
    ],
)
def test_bad_collapse_arguments_get_a_one_line_error(arguments: tuple, error: type, message: str) -> None:
    with pytest.raises(error, match=message) as raised:
        gradexport.collapse(*arguments)
    assert "\n" not in str(raised.value)
    with pytest.raises(TypeError, match=r"^collapse: modules must hold str values, such as \[.layers\.\*.\], not 3 \(int\)"):
        gradexport.collapse(nx.MultiDiGraph(), modules=["a", 3])


# --- hostile module names ---------------------------------------------------------


class Holder(nn.Module):
    def __init__(self, key: str) -> None:
        super().__init__()
        self.parts = nn.ModuleDict({key: nn.Linear(2, 2)})
        self.key = key

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.parts[self.key](x).tanh()


def holder_graph(key: str) -> tuple[nn.Module, nx.MultiDiGraph]:
    try:
        model = Holder(key)
    except KeyError:  # torch refuses the name ("." inside, "" or an existing attribute)
        assume(False)
    with gradexport.capture_modules():
        output = model(torch.ones(1, 2))
    return model, gradexport.to_networkx(output.sum(), module=model)


def spaced(line: str) -> str:
    """A line with runs of spaces as one (Graphviz writes a run as a space and no-break spaces)."""
    return re.sub(" +", " ", line.replace("\xa0", " ")).strip()


def shown_title(path: str) -> str:
    title = printable(f"{path}: Linear")
    return title if len(title) <= MAX_LINE_CHARS else title[: MAX_LINE_CHARS - 1] + "…"


HOSTILE_KEYS = ["a\x01b", "\ufffe", "a\x00b", "\ud800", "line\nbreak", "a\\nb", "#", "x" * 20_000, '"]; end']


@needs_dot
@settings(max_examples=budget(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=names)
@example(key="a\x01b")
@example(key="\ufffe")
@example(key="a\x00b")
@example(key="\ud800")
@example(key="line\nbreak")
@example(key="x" * 20_000)
def test_any_module_name_gives_well_formed_dot_and_svg_showing_it(key: str) -> None:
    _, graph = holder_graph(key)
    path = f"parts.{key}"
    for drawn, title in ((graph, shown_title(path)), (gradexport.collapse(graph, 2), shown_title(path))):
        text = gradexport.to_dot(drawn)
        assert max(len(token) for token in re.findall(r'"(?:[^"\\]|\\.)*"', text)) < 16_384
        dot_boxes(text)  # pydot reads it
        svg = render_with_dot(text)
        root = ElementTree.fromstring(svg)  # well-formed XML
        shown = {element.text for element in root.iter() if element.tag.endswith("}text")}
        assert spaced(title) in {spaced(line) for line in shown if line}
    folded_id = element_id(f"module:{path}")
    assert re.fullmatch(r"u_[A-Za-z0-9_]{0,34}[0-9a-f]{16}", folded_id)


@needs_mermaid
def test_any_module_name_parses_in_mermaid_and_shows_literally() -> None:
    drawn: list[tuple[str, str, str]] = []

    @settings(max_examples=budget(60), deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
    @given(key=names)
    def collect(key: str) -> None:
        _, graph = holder_graph(key)
        drawn.append((key, "box", gradexport.to_mermaid(graph)))
        drawn.append((key, "folded", gradexport.to_mermaid(gradexport.collapse(graph, 2))))

    collect()
    for key in HOSTILE_KEYS:
        _, graph = holder_graph(key)
        drawn.append((key, "box", gradexport.to_mermaid(graph)))
        drawn.append((key, "folded", gradexport.to_mermaid(gradexport.collapse(graph, 2))))
    results = parse_mermaid([text for *_, text in drawn])
    for (key, how, text), result in zip(drawn, results, strict=True):
        assert result["ok"], (key, result.get("error"), text)
        title = shown_title(f"parts.{key}")
        if how == "box":
            shown = [mermaid_shown(sub["title"]) for sub in result["subgraphs"]]
        else:
            shown = [mermaid_shown(vertex["text"]) for vertex in result["vertices"].values() if vertex["classes"] == ["module"]]
        assert [title] in [lines[:1] for lines in shown], (key, shown)
        assert all(len(lines) == 1 for lines in shown) if how == "box" else True  # never a line break in a title


def test_folded_module_ids_are_readable_short_and_stable() -> None:
    assert element_id("module:layer1.0") == element_id("module:layer1.0")
    assert element_id("module:layer1.0").startswith("u_module_layer1_0_")
    assert element_id("module:layer1.0") != element_id("module:layer1_0")
    assert len(element_id("module:" + "x" * 10_000)) < 60
    _, graph = traced("resnet_like")
    (parsed,) = pydot.graph_from_dot_data(gradexport.to_dot(gradexport.collapse(graph, 1)))
    labels = {node.get_name().strip('"'): label_lines(node.get_label()) for node in parsed.get_subgraphs()[0].get_nodes()}
    assert labels[element_id("module:relu")] == ["relu: ReLU", "folded: 1 node"]  # the stem's one ReluBackward0
    assert labels[element_id("module:layer1")] == ["layer1: Sequential", f"folded: {nodes_under(graph, 'layer1')} nodes"]


@needs_dot
def test_box_depth_boxes_only_the_outer_levels_and_narrows_a_cnn() -> None:
    model, graph = traced("resnet_like")
    _, member_of = mermaid_boxes(gradexport.to_mermaid(graph, box_depth=1))
    for node, data in graph.nodes(data=True):
        box = expected_box(data)
        if box is not None:
            assert member_of[element_id(node)] == expected_title(model, ".".join(box.split(".")[:1])), (node, data)

    def width(**options: object) -> float:
        svg = ElementTree.fromstring(render_with_dot(gradexport.to_dot(graph, **options)))
        return float(svg.get("width").removesuffix("pt"))

    # Before leaves shared their op's rank, box_depth=1 was how to undo the staircase (3,713 against
    # 10,034 pt); now both are one column.
    assert width(box_depth=1) < 1_500 and width() < 1_500
    with pytest.raises(ValueError, match="box_depth must be a whole number >= 0 or None, got -1"):
        gradexport.to_dot(graph, box_depth=-1)


def dot_layout(dot_text: str) -> dict:
    """Graphviz's own layout of ``dot_text`` (``dot -Tjson``): the page's bounding box and every box's."""
    import json
    import subprocess

    result = subprocess.run(["dot", "-Tjson"], input=dot_text.encode(), capture_output=True, check=True)
    return json.loads(result.stdout)


@needs_dot
@pytest.mark.parametrize("name", sorted(REAL_MODELS))
def test_the_default_picture_of_a_real_model_stacks_its_blocks_and_reads_at_one_to_one(name: str) -> None:
    """Issue 24: resnet18's boxed SVG was 10,034 pt wide, GPT-2's 14,394 pt (its first screen an empty box).

    Each block sat one step right of the one before, because a parameter's
    leaf hung one rank below its op, into the next block's first rank. Now the
    blocks of a stage (``layer1.0``, ``layer1.1``; ``transformer.h.0`` ...) are
    stacked: they share their horizontal extent, as Graphviz lays them out.
    """
    model, inputs = REAL_MODELS[name]()
    with gradexport.capture_modules():
        output = model(inputs)
    graph = gradexport.to_networkx(output.sum(), module=model)
    layout = dot_layout(gradexport.to_dot(graph))
    x0, y0, x1, y1 = map(float, layout["bb"].split(","))
    width, height = x1 - x0, y1 - y0
    assert width < 1_500, (width, height)  # measured before: 10,034 / 14,394 / 8,726 pt; after: 1,341 / 868 / 661
    assert height > 2 * width  # a column read top to bottom, not a row
    repeated = re.compile(r"^(?:transformer\.h|layers|layer\d)\.\d+: ")
    blocks = [tuple(map(float, box["bb"].split(","))) for box in layout["objects"] if repeated.match(box.get("label", ""))]
    assert len(blocks) >= 8
    lefts, rights = [box[0] for box in blocks], [box[2] for box in blocks]
    assert max(lefts) < min(rights)  # one column shared by every block: no staircase
