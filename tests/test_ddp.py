"""DistributedDataParallel on two CPU processes (gloo, 127.0.0.1): the unused parameters per rank and the rank whose graph differs."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist
from gloo import run_two_ranks
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gradexport


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = nn.Linear(3, 3)
        self.never = nn.Linear(3, 3)  # no rank calls it: DDP raises on the next forward
        self.extra = nn.Linear(3, 3)  # only a rank whose batch sums above 0 calls it

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        if x.sum() > 0:  # a data-dependent branch
            h = h + self.extra(x)
        return h


def _worker(rank: int, port: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        model = Branchy()
        ddp = DistributedDataParallel(model)
        x = torch.ones(2, 3) * (1 if rank == 0 else -1)
        with gradexport.capture_modules(), gradexport.tools.capture_source():
            loss = ddp(x).pow(2).mean()
        graph = gradexport.to_networkx(loss, module=model)
        report = gradexport.tools.unreached(loss, module=model)
        differing = gradexport.tools.compare_ranks(graph)
        loss.backward()
        no_grad = sorted(name for name, p in model.named_parameters() if p.grad is None)
        try:
            ddp(x)
            error = ""
        except RuntimeError as raised:
            error = str(raised)
        result = {
            "error": error,
            "unreached": [[record.name, record.reason] for record in report.unreached],
            "no_grad": no_grad,
            "differing": {
                str(other): sorted({str(data.get("module")) for _, data in merged.nodes(data=True) if data["diff"] in ("added", "removed")})
                for other, merged in differing.items()
            },
            "described": {str(other): gradexport.records.describe_diff(merged) for other, merged in differing.items()},
        }
        Path(folder, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def test_ddp_unused_parameters_and_the_differing_rank(tmp_path: Path) -> None:
    run_two_ranks(_worker, tmp_path)
    ranks = [json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1)]
    for rank, result in enumerate(ranks):
        assert "Expected to have finished reduction" in result["error"], result["error"]
        assert sorted(name for name, _ in result["unreached"]) == result["no_grad"]
    assert ranks[0]["unreached"] == [["never.weight", "module_not_called"], ["never.bias", "module_not_called"]]
    assert sorted(ranks[1]["unreached"]) == sorted(
        [["never.weight", "module_not_called"], ["never.bias", "module_not_called"], ["extra.weight", "module_not_called"], ["extra.bias", "module_not_called"]]
    )
    # Both ranks find that rank 1's graph lacks the branch through `extra`.
    for result in ranks:
        assert list(result["differing"]) == ["1"]
        assert "extra" in result["differing"]["1"]
        assert "test_ddp.py:" in result["described"]["1"]
