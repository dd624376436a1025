"""``python -m benchmarks.recorder`` runs (small models, one round): every row has both timings, a bad step and its bundle."""

from __future__ import annotations

import pytest

from benchmarks.recorder import measure


@pytest.mark.slow
def test_the_recorder_benchmark_measures_every_model() -> None:
    rows = measure(rounds=1, steps=2, scale=8)
    assert [row["model"].split()[0] for row in rows] == ["MLP", "TransformerEncoder", "ResNet-style"]
    for row in rows:
        assert row["plain_ms"] > 0 and row["recorder_ms"] > 0 and row["bad_step_ms"] > 0
        assert row["bundle_bytes"] > 1000
