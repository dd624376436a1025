"""FSDP2 (``fully_shard``) and DTensor tensor parallelism on two CPU processes (gloo, 127.0.0.1): the graph, unreached, find_nonfinite, watch and compare_ranks.

One spawn of two ranks runs every check and writes what it saw; the test
compares it with what torch itself did on each rank (``.grad`` after
backward, the gradients' values, the collectives' error).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from gloo import run_two_ranks
from torch import nn

import gradexport
from gradexport.tracing._torch import TORCH_VERSION

pytestmark = pytest.mark.skipif(TORCH_VERSION < (2, 6), reason="torch.distributed.fsdp.fully_shard is public from torch 2.6")


class Sharded(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.never = nn.Linear(4, 4)  # no rank calls it: the same on every rank, so FSDP is content

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(self.a(x).relu())


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(4, 4)
        self.extra = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if x.sum() > 0:  # a data-dependent branch: only rank 0 takes it
            h = h + self.extra(x)  # @divergent
        return h


class TensorParallel(nn.Module):
    """Two layers split across the ranks with DTensor (column-wise, then row-wise), and one no rank calls."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(4, 8)
        self.down = nn.Linear(8, 4)
        self.spare = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(self.up(x).relu())


def _names_without_grad(model: nn.Module) -> list[str]:
    return sorted(name for name, parameter in model.named_parameters() if parameter.grad is None)


def _worker(rank: int, port: int, folder: str) -> None:
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    result: dict[str, object] = {}
    try:
        model = Sharded()
        fully_shard(model.a)
        fully_shard(model)
        result["sharded"] = all(isinstance(parameter, DTensor) for parameter in model.parameters())
        try:
            gradexport.watch(model, bad_steps=Path(folder) / "bad")
        except gradexport.errors.ArgumentValueError as refused:
            result["bad_steps"] = str(refused)
        x = torch.full((2, 4), 0.5) * (rank + 1)
        with gradexport.capture_modules(), gradexport.tools.capture_source():
            loss = model(x).sum()
        graph = gradexport.to_networkx(loss, module=model)
        result["ops"] = sorted({str(data["op"]) for _, data in graph.nodes(data=True) if data["kind"] == "backward"})
        result["leaves"] = sorted(name for _, names in graph.nodes(data="names") if names for name in names)
        result["a_module"] = sorted({str(data.get("module")) for _, data in graph.nodes(data=True) if data.get("op") == "AddmmBackward0"})
        report = gradexport.tools.unreached(loss, module=model)
        result["unreached"] = [[record.name, record.reason] for record in report.unreached]
        ranks = gradexport.tools.compare_ranks(graph)
        result["same"] = [dict(ranks), ranks.divergent]
        found = gradexport.find_nonfinite(model(x).mul(0).sqrt().sum(), module=model)  # d sqrt(y)/dy is infinite at 0
        result["nonfinite"] = None if found is None else [found.first.op, found.first.module, sorted(found.first.parameters)]
        model.zero_grad(set_to_none=True)  # find_nonfinite's backward left non-finite gradients
        with gradexport.watch(model) as watched:
            model(x).sum().backward()
            watched.step()
        result["no_grad"] = _names_without_grad(model)
        result["grad_types"] = sorted({type(parameter.grad).__name__ for parameter in model.parameters() if parameter.grad is not None})
        table = watched.history.param_table("norm")
        result["watched"] = dict(zip(table.columns, table.rows[0]))
        result["torch_norms"] = {name: None if p.grad is None else float(p.grad.full_tensor().norm()) for name, p in model.named_parameters()}

        branchy = Branchy()
        fully_shard(branchy)
        inputs = torch.ones(2, 4) * (1 if rank == 0 else -1)
        with gradexport.capture_modules(), gradexport.tools.capture_source():
            out = branchy(inputs).sum()
        divergent = gradexport.tools.compare_ranks(gradexport.to_networkx(out, module=branchy))
        result["divergent"] = [[p.name, list(p.used_on), list(p.unused_on), p.source] for p in divergent.divergent]
        result["explain"] = divergent.explain()

        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

        parallel = parallelize_module(TensorParallel(), init_device_mesh("cpu", (2,)), {"up": ColwiseParallel(), "down": RowwiseParallel()})
        with gradexport.capture_modules(), gradexport.tools.capture_source():
            tp_loss = parallel(torch.ones(2, 4)).sum()
        tp_graph = gradexport.to_networkx(tp_loss, module=parallel)
        tp_result: dict[str, object] = {"leaves": sorted(name for _, names in tp_graph.nodes(data="names") if names for name in names)}
        tp_result["unreached"] = [[record.name, record.reason] for record in gradexport.tools.unreached(tp_loss, module=parallel).unreached]
        tp_result["explain"] = gradexport.tools.compare_ranks(tp_graph).explain()
        with gradexport.watch(parallel) as tp_watched:
            tp_loss.backward()
            tp_watched.step()
        tp_table = tp_watched.history.param_table("norm")
        tp_result["watched"] = dict(zip(tp_table.columns, tp_table.rows[0]))
        tp_result["torch_norms"] = {name: None if p.grad is None else float(p.grad.full_tensor().norm()) for name, p in parallel.named_parameters()}
        result["tensor_parallel"] = tp_result
    finally:
        Path(folder, f"rank{rank}.json").write_text(json.dumps(result, default=repr))
        dist.destroy_process_group()


def test_fsdp2_and_dtensor_graph_unreached_nonfinite_watch_and_divergent_ranks(tmp_path: Path) -> None:
    run_two_ranks(_worker, tmp_path)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    divergent_line = next(number for number, line in enumerate(Path(__file__).read_text().splitlines(), 1) if line.endswith("# @divergent"))
    for result in ranks:
        assert result["sharded"], "fully_shard made every parameter a DTensor"
        assert "not a sharded one (FSDP" in result["bad_steps"]  # its re-run would gather weights from every rank
        assert result["ops"] == ["AddmmBackward0", "ReluBackward0", "SumBackward0", "TBackward0"]
        assert result["a_module"] == ["a", "b"]
        # The graph's leaves (FSDP's unsharded parameters, named as the sharded ones) are those torch gave a gradient.
        assert result["leaves"] == sorted(name for name, norm in result["torch_norms"].items() if norm is not None)
        assert sorted(name for name, _ in result["unreached"]) == result["no_grad"] == ["never.bias", "never.weight"]
        assert {reason for _, reason in result["unreached"]} == {"module_not_called"}
        assert result["same"] == [{}, []]
        assert result["nonfinite"] == ["SqrtBackward0", None, ["a.bias", "a.weight", "b.bias", "b.weight"]]
        assert result["grad_types"] == ["DTensor"]
        # watch records the whole gradient's norm, as torch has it once the shards are put together.
        assert result["watched"].keys() == result["torch_norms"].keys()
        for name, norm in result["torch_norms"].items():
            assert result["watched"][name] == (None if norm is None else pytest.approx(norm, rel=1e-6)), name
        assert result["divergent"] == [
            ["extra.bias", [0], [1], f"tests/test_fsdp.py:{divergent_line}"],
            ["extra.weight", [0], [1], f"tests/test_fsdp.py:{divergent_line}"],
        ]
        assert f"extra.weight: used on rank 0 (at tests/test_fsdp.py:{divergent_line}), not on rank 1" in result["explain"]
    assert ranks[0]["torch_norms"] == ranks[1]["torch_norms"], "every rank records the same whole gradients"
    for result in ranks:
        parallel = result["tensor_parallel"]
        assert parallel["leaves"] == sorted(name for name, norm in parallel["torch_norms"].items() if norm is not None)
        assert parallel["unreached"] == [["spare.weight", "module_not_called"], ["spare.bias", "module_not_called"]]
        assert [name for name, norm in parallel["torch_norms"].items() if norm is None] == ["spare.weight", "spare.bias"]
        assert parallel["explain"] == "every rank uses the same parameters"
        for name, norm in parallel["torch_norms"].items():
            assert parallel["watched"][name] == (None if norm is None else pytest.approx(norm, rel=1e-6)), name
