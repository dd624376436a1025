"""``python -m benchmarks.watch`` runs (small models, one round): every row has its three timings and the file's bytes."""

from __future__ import annotations

from benchmarks.watch import measure


def test_the_watch_benchmark_measures_every_model() -> None:
    rows = measure(rounds=1, steps=2, scale=8)
    assert [row["model"].split()[0] for row in rows] == ["MLP", "TransformerEncoder", "ResNet-style"]
    for row in rows:
        assert row["plain_ms"] > 0 and row["ratio_every1"] > 0 and row["ratio_every10"] > 0 and row["ratio_every1_recorder"] > 0
        assert row["bytes_per_step"] > 100 and row["graph_bytes"] > row["bytes_per_step"]
