"""ONNX models with a node whose output size depends on the data (NonZero, Unique,
Compress) run in segments: the device work before it, the node on the host, the rest
imported per shape of its outputs. Checked against ONNX's reference evaluator on models
where the device runs nodes on both sides."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdValueError  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402


def _model(nodes: list[onnx.NodeProto], inputs: dict[str, tuple[int, list[int]]],
           outputs: dict[str, int], inits: dict[str, np.ndarray] | None = None
           ) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
        [helper.make_tensor_value_info(n, t, None) for n, t in outputs.items()],
        [numpy_helper.from_array(v, n) for n, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _check(ctx, model: onnx.ModelProto, feeds: dict[str, np.ndarray],
           loaded: object = None) -> object:
    loaded = loaded or vkumd.onnx.load(model, ctx=ctx)
    got = loaded(**feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    for name, expected in zip(loaded.output_names, want, strict=True):
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-6, atol=1e-6, err_msg=name)
    return loaded


def _compress_between_device_nodes() -> onnx.ModelProto:
    nodes = [helper.make_node("Mul", ["x", "two"], ["doubled"]),
             helper.make_node("Greater", ["gate", "zero"], ["cond"]),
             helper.make_node("Compress", ["doubled", "cond"], ["picked"], axis=1),
             helper.make_node("Relu", ["picked"], ["y"]),
             helper.make_node("Add", ["doubled", "x"], ["tripled"])]
    return _model(nodes, {"x": (T.FLOAT, [3, 7]), "gate": (T.FLOAT, [7])},
                  {"y": T.FLOAT, "tripled": T.FLOAT},
                  {"two": np.float32(2), "zero": np.float32(0)})


def test_device_runs_both_sides_of_a_compress(ctx) -> None:
    rng = np.random.default_rng()
    model = _compress_between_device_nodes()
    x = rng.standard_normal((3, 7)).astype(np.float32)
    loaded = vkumd.onnx.load(model, ctx=ctx)
    for gate in (rng.standard_normal(7), np.ones(7), -np.ones(7), np.ones(7)):
        _check(ctx, model, {"x": x, "gate": gate.astype(np.float32)}, loaded)
        assert loaded.host_steps_run == ["compress"]
        assert loaded.device_nodes_run > 0
    assert loaded.segmented is not None
    assert loaded.segmented.prefix is not None  # Mul and Greater before the step
    # one rest segment per shape of the step's output (the all-true one is reused)
    assert 2 <= len(loaded.segmented._rests) <= 3


def test_nonzero_feeds_device_work_as_int64(ctx) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("NonZero", ["r"], ["idx"]),
             helper.make_node("Cast", ["idx"], ["f"], to=T.FLOAT),
             helper.make_node("Add", ["f", "one"], ["y"])]
    model = _model(nodes, {"x": (T.FLOAT, [4, 5])}, {"y": T.FLOAT, "idx": T.INT64},
                   {"one": np.float32(1)})
    rng = np.random.default_rng()
    for x in (rng.standard_normal((4, 5)), -np.ones((4, 5)), np.ones((4, 5))):
        loaded = _check(ctx, model, {"x": x.astype(np.float32)})
        assert loaded.host_steps_run == ["nonzero"]


@pytest.mark.parametrize("sorted_", [0, 1])
def test_unique_outputs_after_device_work(ctx, sorted_: int) -> None:
    nodes = [helper.make_node("Floor", ["x"], ["fl"]),
             helper.make_node("Unique", ["fl"], ["u", "first", "inverse", "counts"],
                              sorted=sorted_),
             helper.make_node("Mul", ["u", "u"], ["y"])]
    model = _model(nodes, {"x": (T.FLOAT, [5, 3])},
                   {"y": T.FLOAT, "first": T.INT64, "inverse": T.INT64, "counts": T.INT64})
    x = (np.random.default_rng().standard_normal((5, 3)) * 2).astype(np.float32)
    x[1, 1] = np.nan
    loaded = vkumd.onnx.load(model, ctx=ctx)
    got = loaded(x=x)
    values, first, inverse, counts = np.unique(np.floor(x).reshape(-1), return_index=True,
                                               return_inverse=True, return_counts=True)
    if not sorted_:
        order = np.argsort(first)
        values, first, counts = values[order], first[order], counts[order]
        inverse = np.argsort(order)[inverse]
    np.testing.assert_array_equal(got["y"], values * values)
    np.testing.assert_array_equal(got["first"], first)
    np.testing.assert_array_equal(got["inverse"], inverse.reshape(-1))
    np.testing.assert_array_equal(got["counts"], counts)
    assert loaded.device_nodes_run > 0


def test_two_host_steps_in_a_row(ctx) -> None:
    nodes = [helper.make_node("Unique", ["x"], ["u"]),
             helper.make_node("NonZero", ["u"], ["idx"])]
    model = _model(nodes, {"x": (T.FLOAT, [9])}, {"idx": T.INT64})
    x = np.array([0, 3, 3, 0, -1, 2, 2, 0, 5], np.float32)
    loaded = _check(ctx, model, {"x": x})
    assert loaded.host_steps_run == ["unique", "nonzero"]
    assert loaded.device_nodes_run == 0


def test_a_known_input_is_folded_at_import(ctx) -> None:
    nodes = [helper.make_node("NonZero", ["c"], ["idx"]),
             helper.make_node("Cast", ["idx"], ["f"], to=T.FLOAT),
             helper.make_node("Add", ["f", "x"], ["y"])]
    model = _model(nodes, {"x": (T.FLOAT, [1, 2])}, {"y": T.FLOAT},
                   {"c": np.array([0, 1, 0, 1], np.float32)})
    loaded = _check(ctx, model, {"x": np.ones((1, 2), np.float32)})
    assert loaded.segmented is None and loaded.host_steps_run == []


def test_refusals_name_the_problem(ctx) -> None:
    axis = _model([helper.make_node("Unique", ["x"], ["u"], axis=3)],
                  {"x": (T.FLOAT, [2, 3])}, {"u": T.FLOAT})
    with pytest.raises(UnsupportedModelError, match="axis 3 is out of range"):
        vkumd.onnx.load(axis, ctx=ctx)
    long = _model([helper.make_node("Compress", ["x", "c"], ["y"], axis=0)],
                  {"x": (T.FLOAT, [2, 3]), "c": (T.BOOL, [3])}, {"y": T.FLOAT})
    loaded = vkumd.onnx.load(long, ctx=ctx)
    with pytest.raises(VkumdValueError, match="more than the length of axis 0"):
        loaded(x=np.ones((2, 3), np.float32), c=np.ones(3, np.bool_))
    with pytest.raises(VkumdValueError, match="inputs missing"):
        loaded(x=np.ones((2, 3), np.float32))


@pytest.mark.parametrize("center", [0, 1])
def test_non_max_suppression_after_device_work(ctx, center: int) -> None:
    nodes = [helper.make_node("Sigmoid", ["logits"], ["scores"]),
             helper.make_node("NonMaxSuppression", ["boxes", "scores", "limit", "iou",
                                                    "floor"], ["picked"],
                              center_point_box=center)]
    model = _model(nodes, {"boxes": (T.FLOAT, [2, 9, 4]), "logits": (T.FLOAT, [2, 3, 9])},
                   {"picked": T.INT64},
                   {"limit": np.array([4], np.int64), "iou": np.array([0.3], np.float32),
                    "floor": np.array([0.2], np.float32)})
    rng = np.random.default_rng()
    corner = rng.random((2, 9, 2)) * 4
    boxes = np.concatenate([corner, corner + rng.random((2, 9, 2)) * 3], axis=2)
    logits = rng.standard_normal((2, 3, 9))
    loaded = _check(ctx, model, {"boxes": boxes.astype(np.float32),
                                 "logits": logits.astype(np.float32)})
    assert loaded.host_steps_run == ["non_max_suppression"] and loaded.device_nodes_run > 0
