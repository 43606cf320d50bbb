"""bench/scale.py's arithmetic on a made-up report (the clusters themselves run in
``python bench/scale.py``; the Ray tests cover the code that starts them)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "scale.py"


def _load():
    spec = importlib.util.spec_from_file_location("bench_scale", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scale = _load()
REPORT = {
    "sentences": 40, "chunks": 5,
    "single": [{"wall_s": 2.0, "cpu_s": 1.5, "node_cpu_s": 1.6},
               {"wall_s": 4.0, "cpu_s": 1.5, "node_cpu_s": 1.8}],
    "runs": [{"actors": 1, "wall_s": 2.5, "per_actor": [5], "actor_cpu_s": 1.4,
              "cluster_cpu_s": 1.7},
             {"actors": 2, "wall_s": 1.0, "per_actor": [3, 2], "actor_cpu_s": 1.4,
              "cluster_cpu_s": 2.0},
             {"actors": 1, "wall_s": 4.5, "per_actor": [5], "actor_cpu_s": 1.4,
              "cluster_cpu_s": 2.3},
             {"actors": 2, "wall_s": 2.0, "per_actor": [2, 3], "actor_cpu_s": 1.4,
              "cluster_cpu_s": 2.0}],
}


def test_rows_pair_each_ray_run_with_the_same_repeats_single_run() -> None:
    single, one, two = scale.rows_of("c", REPORT)
    assert single["rates"] == [20.0, 10.0] and single["ratio"] == [1.0, 1.0]
    assert one["rates"] == [16.0, 40 / 4.5]
    assert one["ratio"] == pytest.approx([2.0 / 2.5, 4.0 / 4.5])
    # (Ray wall - single wall) per task: 0.5 s / 5 tasks = 100 ms, both repeats.
    assert one["overhead_ms"] == pytest.approx([100.0, 100.0])
    assert one["cpu_ms"] == pytest.approx([20.0, 100.0])
    assert two["ratio"] == pytest.approx([2.0, 2.0]) and two["overhead_ms"] == []
    text = scale.table([single, one, two])
    assert "| c: Ray, 1 actor | 12.4 [8.9-16.0] | 0.84 [0.80-0.89] | 100.0 [100.0-100.0]" in text


def test_probe_table_reports_the_difference_of_the_medians_ingredients() -> None:
    probes = {"ping": [0.002] * 4, "actor_encode": [0.05, 0.06, 0.07, 0.08],
              "local_encode": [0.04, 0.05, 0.06, 0.07], "remote": True}
    text = scale.probe_table({"c": {"probes": [probes]}})
    assert "| c: actor 0 (other node) | 2.00 [2.00-2.00] |" in text
    assert text.rstrip().endswith("| 10.00 [10.00-10.00] |")
