"""bench/check.py: the 25% floor, missing ratios, and both benchmarks' JSON formats."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _check():
    spec = importlib.util.spec_from_file_location("bench_check", ROOT / "bench" / "check.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_ratio_more_than_25_percent_below_its_baseline_fails() -> None:
    check = _check()
    lines = check.compare({"a": 1.0, "b": 0.4, "c": 2.0}, {"a": 0.76, "b": 0.29}, 0.25)
    assert [line.split()[0] for line in lines] == ["ok", "FAIL", "FAIL"]
    assert "missing" in lines[2]


def test_ratios_from_model_and_graph_reports() -> None:
    check = _check()
    assert check.ratios_of({"ratios": {"short/1/compiled_vs_ort": 0.5}}) == {
        "short/1/compiled_vs_ort": 0.5}
    # Beside its paths a workload carries plain numbers and lists (error, ops), skipped.
    graph = {"workloads": {"bert": {"eager": {}, "compiled": {"speedup": {"median": 2.5}},
                                    "relative_error": 1e-7, "ops": ["matmul"]}}}
    assert check.ratios_of(graph) == {"bert/compiled_vs_eager": 2.5}


def test_the_baseline_names_the_model_benchmark() -> None:
    data = json.loads((ROOT / "bench" / "baseline.json").read_text())
    ratios = data["benchmarks"]["bench/model.py"]["ratios"]
    assert ratios and all(v > 0 for v in ratios.values())
