"""Hostile roots and params: cycles, colliding names, params that are not names of tensors."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch
from torch_versions import needs_input_metadata

import gradexport
from gradexport.errors import RootError
from gradexport.streams import collect_roots


def test_a_root_list_that_contains_itself_is_refused_without_growing_memory():
    # In a child whose address space is capped 2 GiB above what torch needs, so
    # that a regression fails this test instead of calling the OOM killer.
    script = textwrap.dedent(
        """
        import resource, torch, gradexport
        size = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmSize:"))
        limit = size * 1024 + 2 * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        y = torch.ones(2, requires_grad=True) * 2
        roots = [y]
        roots.append(roots)
        try:
            gradexport.to_networkx(roots)
        except gradexport.errors.RootError as error:
            print(error)
        nested = {"a": [y]}
        nested["a"].append({"b": nested})
        try:
            gradexport.streams.collect_roots(nested)
        except gradexport.errors.RootError as error:
            print(error)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        "to_networkx: root '1' (roots[1]) is a list that contains itself; pass a collection without cycles",
        "gradexport: root 'a.1.b' (roots['a'][1]['b']) is a dict that contains itself; pass a collection without cycles",
    ]


def test_the_same_collection_twice_is_not_a_cycle():
    y = torch.ones(2, requires_grad=True) * 2
    shared = [y]
    roots = collect_roots({"first": shared, "second": (shared, shared)})
    assert [root.name for root in roots] == ["first.0", "second.0.0", "second.1.0"]
    assert all(root.node is y.grad_fn for root in roots)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda y, z: {1: y, "1": z}, r"two roots are both named '1' \(roots\[1\] and roots\['1'\]\)"),
        (lambda y, z: {"a.b": y, "a": {"b": z}}, r"both named 'a\.b' \(roots\['a\.b'\] and roots\['a'\]\['b'\]\)"),
    ],
)
def test_colliding_root_names_are_refused_naming_both_places(make, message):
    y = torch.ones(2, requires_grad=True) * 2
    z = torch.ones(2, requires_grad=True) * 3
    with pytest.raises(RootError, match=message):
        gradexport.to_networkx(make(y, z))


def test_distinct_keys_still_name_the_roots_as_before():
    y = torch.ones(2, requires_grad=True) * 2
    z = torch.ones(2, requires_grad=True) * 3
    graph = gradexport.to_networkx({"a": {"b": y}, "c": [z]})
    assert [root["name"] for root in graph.graph["roots"]] == ["a.b", "c.0"]


ACCEPTS = r"to_networkx: params takes a mapping of names to tensors or \(name, tensor\) pairs, as model\.named_parameters\(\) gives"


@pytest.mark.parametrize(
    "params, detail",
    [
        (["x"], r"item 0 is 'x', not a \(name, tensor\) pair"),
        ("x", "got a str"),
        (3, "got a int"),
        ([("x", None, 1)], r"item 0 is \('x', None, 1\), not a \(name, tensor\) pair"),
        ({1: None}, "the name 1 is a int, not a str"),
    ],
)
def test_bad_params_say_what_params_takes(params, detail):
    x = torch.ones(1, requires_grad=True)
    with pytest.raises(TypeError, match=f"^{ACCEPTS}; {detail}$"):
        gradexport.to_networkx(x * 2, params=params)


def test_a_tensor_as_params_is_a_clear_error_whatever_its_shape():
    for x in (torch.tensor(1.0, requires_grad=True), torch.ones(2, requires_grad=True)):
        with pytest.raises(TypeError, match=f"^{ACCEPTS}; got a Tensor$"):
            gradexport.to_networkx(x * 2, params=x)
        with pytest.raises(TypeError, match=r"item 0 is a tensor of shape \[.*\], not a \(name, tensor\) pair"):
            gradexport.to_networkx(x * 2, params=[x])


def test_params_mapping_to_non_tensors():
    x = torch.ones(1, requires_grad=True)
    with pytest.raises(TypeError, match=r"^to_networkx: params\['x'\] is a str, not a tensor$"):
        gradexport.to_networkx(x * 2, params={"x": "x"})
    with pytest.raises(TypeError, match=r"^record_gradients: params\['w'\] is a float"):
        gradexport.record_gradients((x * 2).sum(), params=[["w", 1.0]])


@needs_input_metadata
def test_replay_names_the_params_that_are_no_tensors():
    x = torch.ones(1, requires_grad=True)
    with pytest.raises(TypeError, match=r"^replay: params\['w'\] is a float"):
        gradexport.replay((x * 2).sum(), params=[["w", 1.0]])


def test_pairs_given_as_lists_name_leaves_like_named_parameters():
    model = torch.nn.Linear(2, 1)
    loss = model(torch.ones(1, 2)).sum()
    from_lists = gradexport.to_networkx(loss, params=[list(pair) for pair in model.named_parameters()])
    from_torch = gradexport.to_networkx(loss, params=model.named_parameters())
    assert [from_lists.nodes[n].get("names") for n in from_lists] == [from_torch.nodes[n].get("names") for n in from_torch]
    assert sorted(name for n in from_torch for name in from_torch.nodes[n].get("names", ())) == ["bias", "weight"]
