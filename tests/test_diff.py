"""gradexport.diff: what two graphs of a model share, with the expected differences taken from the models."""

from __future__ import annotations

import random
from collections import OrderedDict
from difflib import SequenceMatcher
from pathlib import Path

import networkx as nx
import pytest
import torch
from torch import nn
from torch.utils import checkpoint

import gradexport
from gradexport.analysis.diff import _Aligner, _automaton_match, differs
from gradexport.core.marks import DIFF_STATES
from gradexport.tracing.graph import trace


def mlp(extra: bool = False, activation: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    torch.manual_seed(0)
    layers: list[tuple[str, nn.Module]] = [("fc1", nn.Linear(6, 8)), ("act1", activation()), ("fc2", nn.Linear(8, 8)), ("act2", activation())]
    if extra:
        layers += [("extra", nn.Linear(8, 8)), ("extra_act", nn.ReLU())]
    layers += [("head", nn.Linear(8, 2))]
    return nn.Sequential(OrderedDict(layers))


INPUTS = torch.randn(5, 6)


def graph_of(model: nn.Module, **options: bool) -> nx.MultiDiGraph:
    with gradexport.capture_modules():
        loss = model(INPUTS).pow(2).sum()
    return gradexport.to_networkx(loss, module=model, **options)


def states(graph: nx.MultiDiGraph) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {state: set() for state in DIFF_STATES}
    for node, state in graph.nodes(data="diff"):
        found[state].add(node)
    return found


def test_every_node_and_edge_of_both_graphs_is_accounted_for() -> None:
    a, b = graph_of(mlp()), graph_of(mlp(extra=True))
    merged = gradexport.diff(a, b)
    kept = {data["a_id"] for _, data in merged.nodes(data=True) if "a_id" in data}
    assert kept == set(a) and {data["b_id"] for _, data in merged.nodes(data=True) if "b_id" in data} == set(b)
    counts = merged.graph["diff"]["edges"]
    assert counts["same"] + counts["changed"] + counts["removed"] == a.number_of_edges()
    assert counts["same"] + counts["changed"] + counts["added"] == b.number_of_edges()
    # Edges between matched nodes keep their next_functions position (key) and input slot.
    for u, v, key, data in merged.edges(keys=True, data=True):
        if data["diff"] in ("same", "changed"):
            source, target = merged.nodes[u], merged.nodes[v]
            assert a.has_edge(source["a_id"], target["a_id"], key) and b.has_edge(source["b_id"], target["b_id"], key)


def test_one_layer_added() -> None:
    a, b = graph_of(mlp()), graph_of(mlp(extra=True))
    merged = gradexport.diff(a, b)
    found = states(merged)
    # Expected from the model: the nodes the new layer's forward created, and its parameters.
    expected = {node for node, data in b.nodes(data=True) if data.get("module") in {"extra", "extra_act"}}
    assert {merged.nodes[node]["b_id"] for node in found["added"]} == expected
    assert len(expected) == 5  # AddmmBackward0, TBackward0, two AccumulateGrad, ReluBackward0
    assert found["removed"] == set() and found["changed"] == set()
    assert len(found["same"]) == a.number_of_nodes()
    text = gradexport.records.describe_diff(merged)
    assert differs(merged) and "5 added" in text and "extra.weight" in text


def test_an_activation_swapped_is_a_changed_op() -> None:
    merged = gradexport.diff(graph_of(mlp()), graph_of(mlp(activation=nn.GELU)))
    found = states(merged)
    assert found["added"] == found["removed"] == set()
    changes = sorted(tuple(merged.nodes[node]["changes"]["op"]) for node in found["changed"])
    assert changes == [("ReluBackward0", "GeluBackward0")] * 2


def test_identical_graphs_are_same_and_exit_zero() -> None:
    a, b = graph_of(mlp()), graph_of(mlp())
    assert set(states(gradexport.diff(a, b))["same"]) == set(gradexport.diff(a, b))
    assert not differs(gradexport.diff(a, b))


def checkpointed(model: nn.Sequential, reentrant: bool) -> nx.MultiDiGraph:
    def middle(t: torch.Tensor) -> torch.Tensor:
        return model.act2(model.fc2(model.act1(t)))

    with gradexport.capture_modules():
        hidden = checkpoint.checkpoint(middle, model.fc1(INPUTS), use_reentrant=reentrant)
        loss = model.head(hidden).pow(2).sum()
    return gradexport.to_networkx(loss, module=model, show_saved=True)


def test_non_reentrant_checkpoint_changes_only_saved_bytes() -> None:
    model = mlp()
    a, b = graph_of(model, show_saved=True), checkpointed(model, reentrant=False)
    merged = gradexport.diff(a, b)
    found = states(merged)
    assert found["added"] == found["removed"] == set()
    assert found["changed"], "checkpointing saves less"
    for node in found["changed"]:
        assert set(merged.nodes[node]["changes"]) <= {"saved_bytes", "saved_bytes_shared"}
        assert merged.nodes[node]["module"] in {"act1", "fc2", "act2"}  # inside the checkpointed region
    assert b.graph["saved_bytes"] < a.graph["saved_bytes"]


def test_reentrant_checkpoint_is_one_replacement() -> None:
    model = mlp()
    a, b = graph_of(model), checkpointed(model, reentrant=True)
    merged = gradexport.diff(a, b)
    (replacement,) = merged.graph["diff"]["replacements"]
    assert replacement["op"] == "CheckpointFunctionBackward"
    # The region: the nodes the checkpointed modules created, and fc2's parameters (not in b's graph at all).
    region = {node for node, data in a.nodes(data=True) if data.get("module") in {"act1", "fc2", "act2"}}
    assert {merged.nodes[node]["a_id"] for node in replacement["region"]} == region
    found = states(merged)
    assert found["removed"] == set(replacement["region"])
    assert found["added"] == {replacement["node"]}
    assert "replaced: " in gradexport.records.describe_diff(merged)


def test_json_files_and_recorded_gradients(tmp_path: Path) -> None:
    def recorded(scale: float) -> nx.MultiDiGraph:
        model = mlp()
        with gradexport.capture_modules():
            loss = model(INPUTS * scale).pow(2).sum()
        return gradexport.record_gradients(loss, module=model)

    a, b = recorded(1.0), recorded(2.0)
    first, second = tmp_path / "a.json", tmp_path / "b.json"
    first.write_text(gradexport.to_json(a), encoding="utf-8")
    second.write_text(gradexport.to_json(b), encoding="utf-8")
    from_files = gradexport.diff(str(first), second)
    assert nx.utils.graphs_equal(from_files, gradexport.diff(a, b))
    found = states(from_files)
    assert found["added"] == found["removed"] == set()
    changed_edges = [data for _, _, data in from_files.edges(data=True) if data["diff"] == "changed"]
    assert changed_edges and all(set(data["changes"]) == {"grad"} for data in changed_edges)
    assert states(gradexport.diff(str(first), str(first)))["same"] == set(from_files)


def test_roots_are_traced_and_bad_input_refused() -> None:
    x = torch.ones(3, requires_grad=True)
    merged = gradexport.diff((x * 2).sum(), (x * 2).sum())
    assert merged.graph["diff"]["nodes"]["same"] == merged.number_of_nodes() == 4
    with pytest.raises(TypeError, match="MultiDiGraph"):
        gradexport.diff(nx.DiGraph(), merged)


def chain(length: int, inserted: int = 0) -> tuple[nx.MultiDiGraph, set[str]]:
    """A chain of identical steps (the same tokens over and over) with ``inserted`` sin() in the middle."""
    x = torch.zeros(1, requires_grad=True)
    y = x
    for step in range(length):
        y = y * 1.5 + 1
        if step == length // 2:
            for _ in range(inserted):
                y = y.sin()
    result = trace(y, params={"x": x})
    sines = {node_id for node, node_id in result.ids.items() if type(node).__name__ == "SinBackward0"}
    return result.graph, sines


def test_insertion_into_a_repetitive_chain() -> None:
    a, _ = chain(300)
    b, sines = chain(300, inserted=3)
    merged = gradexport.diff(a, b)
    found = states(merged)
    assert len(sines) == 3
    assert {merged.nodes[node]["b_id"] for node in found["added"]} == sines
    assert found["removed"] == found["changed"] == set()


def unnamed_chain(length: int, middle: str | None = None) -> nx.MultiDiGraph:
    """A chain of ``x + 1`` with no parameter names (only the root anchors it), ``middle`` applied halfway."""
    y = torch.zeros(1, requires_grad=True)
    for step in range(length):
        y = y + 1
        if step == length // 2 and middle is not None:
            y = getattr(y, middle)()
    return gradexport.to_networkx(y)


@pytest.mark.slow
@pytest.mark.parametrize("length", [10**3, 10**5])
def test_one_change_in_an_unnamed_chain_is_one_change_at_every_size(length: int) -> None:
    # Before: past 4·10^6 pairs of leftover nodes the alignment was skipped and the whole
    # part below the change (half the graph) came out removed and added.
    swapped = gradexport.diff(unnamed_chain(length, "sin"), unnamed_chain(length, "cos"))
    counts = swapped.graph["diff"]["nodes"]
    assert counts == {"same": length + 2, "changed": 1, "added": 0, "removed": 0}
    changed = [data for _, data in swapped.nodes(data=True) if data["diff"] == "changed"]
    assert [data["changes"]["op"] for data in changed] == [["SinBackward0", "CosBackward0"]]
    inserted = gradexport.diff(unnamed_chain(length), unnamed_chain(length, "exp"))
    assert inserted.graph["diff"]["nodes"] == {"same": length + 2, "changed": 0, "added": 1, "removed": 0}
    assert [data["op"] for _, data in inserted.nodes(data=True) if data["diff"] == "added"] == ["ExpBackward0"]


def repetitive(rng: random.Random, alphabet: str, runs: int, longest: int) -> list[str]:
    """Tokens in runs of one letter, as the ops of a chain are: the case difflib's search is quadratic in."""
    tokens: list[str] = []
    for _ in range(rng.randint(0, runs)):
        tokens += [rng.choice(alphabet)] * rng.randint(1, longest)
    return tokens


def test_the_linear_longest_match_is_difflibs() -> None:
    # _Aligner finds some longest matches with a suffix automaton instead of difflib's loop:
    # the match (longest, earliest in a, then in b) and so the whole alignment must be difflib's.
    rng = random.Random(26)
    automaton_used = 0
    for trial in range(3000):
        alphabet = "abcd"[: rng.randint(1, 4)]
        a, b = repetitive(rng, alphabet, 8, 40), repetitive(rng, alphabet, 8, 40)
        reference = SequenceMatcher(None, a, b, autojunk=False)
        alo, blo = rng.randint(0, len(a)), rng.randint(0, len(b))
        ahi, bhi = rng.randint(alo, len(a)), rng.randint(blo, len(b))
        assert _automaton_match(a, b, alo, ahi, blo, bhi) == reference.find_longest_match(alo, ahi, blo, bhi), (a, b, alo, ahi, blo, bhi)
        aligner = _Aligner(a, b)
        assert aligner.get_opcodes() == reference.get_opcodes(), (a, b)
        tokens = len(a) + len(b)
        automaton_used += len(a) * len(b) > 16 * tokens and sum(b.count(token) for token in a) > 16 * tokens
    assert automaton_used > 100
