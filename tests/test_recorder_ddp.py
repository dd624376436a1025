"""The flight recorder under DistributedDataParallel: two gloo processes on 127.0.0.1, started by the test.

Rank 1's batch holds a NaN at step 2: its loss is NaN, and after DDP's
all-reduce every rank's ``.grad`` is too, so both ranks write a bundle, each
named by its rank. The re-run runs on a copy of the weights (DDP's all-reduce
hooks sit on the real parameters' gradient accumulators), so it starts no
collective and training goes on as without the recorder. Each rank's bundle
holds that rank's own gradients, before the all-reduce: the test compares
them with a plain copy of the model that the test runs on the rank's batch.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
import torch
from gloo import run_two_interpreters

import gradexport

BAD = 2

RANK = textwrap.dedent(
    """
    import json, math, sys, torch, torch.distributed as dist, gradexport
    from torch.nn.parallel import DistributedDataParallel
    rank, port, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)

    def layers():
        return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))

    def run(bad_steps):
        torch.manual_seed(0)
        model = DistributedDataParallel(layers())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        data = torch.Generator().manual_seed(10 + rank)
        local = {}
        watch = gradexport.watch(model, optimizer=optimizer, bad_steps=bad_steps) if bad_steps else None
        if watch is not None:
            watch.start()
        for step in range(4):
            x = torch.randn(8, 4, generator=data)
            if step == %(bad)d and rank == 1:
                x[3, 1] = math.nan
            if step == %(bad)d:  # torch's own gradients of this rank's batch, before any all-reduce
                reference = layers()
                reference.load_state_dict(model.module.state_dict())
                reference(x).pow(2).mean().backward()
                local = {name: param.grad.tolist() for name, param in reference.named_parameters()}
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
        if watch is not None:
            watch.close()
        return model, local

    plain, _ = run(None)
    watched, local = run(folder + "/bad")
    same = all(torch.equal(a.nan_to_num(), b.nan_to_num()) and torch.equal(a.isnan(), b.isnan()) for a, b in zip(plain.parameters(), watched.parameters()))
    with open(f"{folder}/rank{rank}.json", "w") as out:
        json.dump({"same": same, "local": local}, out)
    dist.destroy_process_group()
    """
) % {"bad": BAD}


@pytest.mark.slow  # two fresh interpreters, about 10 s on an idle machine
def test_each_rank_records_its_bad_step_without_a_collective_and_training_is_unchanged(tmp_path: Path) -> None:
    run_two_interpreters(RANK, tmp_path, timeout=180)
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen["same"], f"rank {rank}: training under the recorder differs"
        bundle = gradexport.load_bundle(tmp_path / "bad" / f"bad-step-{BAD:06d}.rank{rank}.json")
        assert bundle.bad.reproduced and bundle.healthy is not None and bundle.healthy.reproduced
        graph = bundle.bad.graph
        for name, values in seen["local"].items():
            (node,) = [node for node, names in graph.nodes(data="names") if names and name in names]
            ((_, _, data),) = graph.in_edges(node, data=True)
            expected = torch.tensor(values)
            recorded = torch.tensor(data["grad"]["values"]) if "values" in data["grad"] else None
            if recorded is not None:
                assert torch.equal(recorded.reshape(expected.shape).isnan(), expected.isnan()), (rank, name)
                assert torch.equal(recorded.reshape(expected.shape).nan_to_num(), expected.nan_to_num()), (rank, name)
            elif expected.isnan().any():  # larger than a bundle keeps values of: its NaN flag, and its norm when finite
                assert data["grad"]["has_nan"], (rank, name)
            else:
                assert data["grad"]["norm"] == pytest.approx(float(expected.norm()), rel=1e-6), (rank, name)
    reasons = {rank: gradexport.load_bundle(tmp_path / "bad" / f"bad-step-{BAD:06d}.rank{rank}.json").bad.reasons for rank in (0, 1)}
    assert reasons[1][0] == "the loss is nan" and not any("loss" in reason for reason in reasons[0])
    assert any("gradient holds NaN" in reason for reason in reasons[0])  # the all-reduce brought rank 1's NaN
    origin = gradexport.load_bundle(tmp_path / "bad" / f"bad-step-{BAD:06d}.rank1.json").bad.forward_origin
    assert origin is not None and origin["cause"] == "input" and origin["module"] == "0"
