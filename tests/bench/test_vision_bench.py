"""bench/vision.py: its arguments, its goal and bound arithmetic on a made-up report, and one
run end to end on tiny ONNX files (vkumd and onnxruntime; ncnn's first run compiles
pipelines for tens of seconds, so the catalogue's models and ncnn run in
``python bench/vision.py`` only)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _load():
    sys.path.insert(0, str(BENCH))  # the script imports goals and vision_peers beside it
    try:
        spec = importlib.util.spec_from_file_location("bench_vision", BENCH / "vision.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(BENCH))
    return module


vision = _load()


def _peer(ms: float, **extra) -> dict:
    return {"ms_per_image": {"median": ms, "min": ms, "max": ms}, "images_per_s": 1e3 / ms,
            **extra}


def test_arguments_are_split_and_checked() -> None:
    args = vision.parse(["--models", "ppocr-cls,x.onnx", "--threads", "2", "--batches", "8"])
    assert args.models == ["ppocr-cls", "x.onnx"] and args.threads == [2]
    assert args.batches == [1, 8] and args.peers == ["vkumd", "onnxruntime", "ncnn"]
    with pytest.raises(SystemExit):
        vision.parse(["--peers", "vkumd,tflite"])


def test_goals_pass_and_miss_with_the_kernel_bound(capsys) -> None:
    row = {"batches": {"1": {"vkumd": _peer(100.0), "onnxruntime": _peer(20.0),
                             "ncnn": _peer(1000.0)}},
           "vkumd": {"profile": {"ops": {"conv2d": 0.07, "max_pool2d": 0.01}}}}
    table = vision.Table()
    vision.goals(table, "m", 1, row)
    (ncnn, ort, bound) = table.rows
    assert ncnn[1].startswith("10.00x faster") and ncnn[3] == "pass"
    assert ort[1].startswith("5.00x its time") and ort[3] == "MISS"
    # 3x onnxruntime's 20 ms allows 60 ms: conv2d alone (70 ms) is over it.
    assert "conv2d alone takes 70.0 ms" in bound[1] and "60.0 ms allowed" in bound[1]
    row["vkumd"]["profile"]["ops"] = {"conv2d": 0.03, "add": 0.02}
    assert "within 60.0 ms" in vision.bound(row, 60.0, 100.0)
    # 2 GFLOP at a 10 GFLOP/s ceiling is at least 200 ms, over the 60 ms allowed.
    row["vkumd"]["flops"] = {"conv2d": 1.5e9, "matmul": 0.5e9}
    assert "takes 200.0 ms, so the goal is out of this driver's reach" in vision.bound(
        row, 60.0, 100.0, ceiling=10.0)
    assert "takes 200.0 ms, within the allowance" in vision.bound(row, 300.0, 100.0, 10.0)


def test_relative_error_is_against_the_references_largest_magnitude() -> None:
    assert vision.rel_error(np.array([1.0, 2.5]), np.array([1.0, 2.0])) == pytest.approx(0.25)
    assert "onnxruntime's is (3,)" in vision.rel_error(np.zeros(2), np.zeros(3))


def _tiny_models(tmp: Path) -> tuple[Path, Path]:
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((5, 3, 3, 3)).astype(np.float32), "w")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    graph = helper.make_graph(
        nodes, "tiny", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 17, 13])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5, 1, 1])], [w])
    good = tmp / "tiny.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), good)
    odd = helper.make_graph(
        [helper.make_node("Nope", ["x"], ["y"], domain="bench.test")], "odd",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 8, 8])])
    bad = tmp / "odd.onnx"
    onnx.save(helper.make_model(odd, opset_imports=[helper.make_opsetid("", 13),
                                                     helper.make_opsetid("bench.test", 1)]), bad)
    return good, bad


@pytest.mark.skipif(importlib.util.find_spec("onnxruntime") is None,
                    reason="the bench's reference peer: pip install onnxruntime")
def test_a_tiny_model_runs_end_to_end_and_an_unknown_op_is_a_row(tmp_path: Path) -> None:
    good, bad = _tiny_models(tmp_path)
    out = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, str(BENCH / "vision.py"), "--models", f"{good},{bad}", "--threads", "1",
         "--repeats", "2", "--peers", "vkumd,onnxruntime", "--json", str(out)],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    run = json.loads(out.read_text())["runs"]["1"]["models"]
    tiny = run[str(good)]
    ours = tiny["batches"]["1"]["vkumd"]
    assert ours["rel_error"] < 1e-5 and ours["rounds"] == 2
    assert tiny["batches"]["8"]["vkumd"]["rel_error"] < 1e-5  # the batch dim is free
    assert tiny["vkumd"]["memory"]["kernels"] >= 2
    assert "conv2d" in tiny["vkumd"]["profile"]["ops"]
    odd = run[str(bad)]["batches"]["1"]
    assert "Nope" in odd["vkumd"]["skipped"] and "Nope" in odd["onnxruntime"]["skipped"]
    assert f"| {good} | 1 | vkumd |" in done.stdout
    assert "vs onnxruntime" in done.stdout  # the goal row
