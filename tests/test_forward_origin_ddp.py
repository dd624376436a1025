"""find_nonfinite on two DistributedDataParallel processes (gloo, 127.0.0.1): a NaN in one rank's batch.

Rank 1's batch holds a NaN: its forward origin is that input. Rank 0's forward
and loss are finite, but DDP's all-reduce averages rank 1's NaN gradients
into every rank's ``.grad``, by no path of rank 0's graph: the report must
name each parameter torch left non-finite there.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import gradexport
from gradexport.frontends.model_explorer_server import free_port


def _worker(rank: int, port: int, folder: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
        ddp = DistributedDataParallel(model)
        batch = torch.randn(3, 4)
        if rank == 1:
            batch[2, 1] = float("nan")
        with gradexport.tools.capture_source():
            loss = ddp(batch).pow(2).mean()
        report = gradexport.find_nonfinite(loss, module=model)
        origin = None if report is None else report.forward_origin
        result = {
            "loss_finite": bool(torch.isfinite(loss)),
            "report": report is not None,
            "origin": None if origin is None else [origin.op, origin.cause, [item.position for item in origin.inputs if not item.finite]],
            "nonfinite_parameters": [] if report is None else sorted(report.nonfinite_parameters),
            "hidden_parameters": [] if report is None else sorted(report.hidden_parameters),
            "torch_nonfinite_grads": sorted(name for name, p in model.named_parameters() if p.grad is not None and not bool(torch.isfinite(p.grad).all())),
        }
        Path(folder, f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow
def test_nan_batch_on_one_rank_is_its_forward_origin_and_every_rank_names_the_nan_grads(tmp_path: Path) -> None:
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    mp.spawn(_worker, args=(free_port(), str(tmp_path)), nprocs=2, join=True)
    zero, one = (json.loads((tmp_path / f"rank{rank}.json").read_text()) for rank in (0, 1))
    assert one["origin"] == ["linear", "input", ["0"]] and not one["loss_finite"]
    assert zero["loss_finite"] and zero["origin"] is None and zero["report"]
    for result in (zero, one):
        assert result["torch_nonfinite_grads"]  # torch: the all-reduce spread the NaN to every rank
        assert result["nonfinite_parameters"] == result["torch_nonfinite_grads"]
    assert zero["hidden_parameters"] == zero["torch_nonfinite_grads"]  # rank 0's graph never held a NaN
