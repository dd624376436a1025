"""`gradexport.watch` under DistributedDataParallel: two gloo processes on 127.0.0.1, started by the test.

Each rank records its own view: the parameters' ``.grad`` after backward (DDP's
all-reduced average, so the same on both ranks) and its modules' output
gradients (its own batch, before any all-reduce). ``ranks="each"`` writes one
file per rank, ``ranks="zero"`` only rank 0's.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from gloo import run_two_interpreters

import gradexport

RANK = textwrap.dedent(
    """
    import json, sys, torch, torch.distributed as dist, gradexport
    from torch.nn.parallel import DistributedDataParallel
    rank, port, folder = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    local = {}
    def hook(module, args, out, name):
        out.register_hook(lambda grad: local.__setitem__(name, float(torch.linalg.vector_norm(grad))))
    for name, module in model.named_modules():
        module.register_forward_hook(lambda m, a, o, name=name: hook(m, a, o, name))
    data = torch.Generator().manual_seed(10 + rank)  # each rank its own batches
    expected = []
    with gradexport.watch(model, optimizer=optimizer, path=f"{folder}/each.jsonl", ranks="each"), \\
         gradexport.watch(model, optimizer=optimizer, path=f"{folder}/zero.jsonl"):
        for step in range(4):
            optimizer.zero_grad()
            model(torch.randn(8, 4, generator=data)).pow(2).mean().backward()
            expected.append({"grad": {n: float(torch.linalg.vector_norm(p.grad)) for n, p in model.named_parameters()}, "local": dict(local)})
            optimizer.step()
    with open(f"{folder}/expected{rank}.json", "w") as out:
        json.dump(expected, out)
    dist.destroy_process_group()
    """
)


@pytest.mark.slow  # two fresh interpreters, about 10 s on an idle machine
def test_each_rank_records_its_own_gradients_and_writes_by_option(tmp_path: Path) -> None:
    run_two_interpreters(RANK, tmp_path)
    assert sorted(path.name for path in tmp_path.glob("*.jsonl")) == ["each.rank0.jsonl", "each.rank1.jsonl", "zero.jsonl"]
    histories = [gradexport.records.load_watch(tmp_path / f"each.rank{rank}.jsonl") for rank in (0, 1)]
    expected = [json.loads((tmp_path / f"expected{rank}.json").read_text()) for rank in (0, 1)]
    for rank, (history, want) in enumerate(zip(histories, expected)):
        assert history.header["rank"] == rank and history.header["world_size"] == 2
        assert "after its all-reduce" in history.header["recorded"]
        for step, values in enumerate(want):
            stats = history.param_stats(step)
            for name, norm in values["grad"].items():
                assert stats[name]["norm"] == pytest.approx(norm, rel=1e-6)
            norms = history.module_norms(step)
            for name, norm in values["local"].items():
                assert norms[name] == pytest.approx(norm, rel=1e-6)
    # after the all-reduce the parameters' gradients agree; the modules' local output gradients do not
    flat = [[value for row in history.param_table("norm").rows for value in row] for history in histories]
    assert flat[0] == pytest.approx(flat[1], rel=1e-6)
    assert histories[0].module_norms(0)["module.0"] != pytest.approx(histories[1].module_norms(0)["module.0"], rel=1e-3)
    assert gradexport.records.load_watch(tmp_path / "zero.jsonl").param_table("norm").rows == histories[0].param_table("norm").rows
