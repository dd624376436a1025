"""Two gloo processes on 127.0.0.1 for the distributed tests: each runs ``worker(rank, port, folder)`` and writes what it saw into ``folder``."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch.multiprocessing as mp


def run_two_interpreters(script: str, folder: Path, timeout: float = 120) -> None:
    """Run ``script`` in two fresh interpreters as ranks 0 and 1 (``sys.argv``: rank, port, folder); a rank that fails fails the caller."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ranks = [subprocess.Popen([sys.executable, "-c", script, str(rank), port, str(folder)], env=env, stderr=subprocess.PIPE) for rank in (0, 1)]
    for process in ranks:
        _, err = process.communicate(timeout=timeout)
        assert process.returncode == 0, err.decode()[-3000:]


def run_two_ranks(worker: Callable[[int, int, str], None], folder: Path) -> None:
    """Spawn ranks 0 and 1 of ``worker`` and wait for both; a rank's exception fails the caller."""
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    mp.spawn(worker, args=(port, str(folder)), nprocs=2, join=True)
