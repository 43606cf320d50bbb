"""The ONNX Reduce* converters on single-node models against float64 numpy: every op, axes
as an attribute (opset 13) and as an input (opset 18), keepdims, noop_with_empty_axes,
reductions over no element (ONNX's identities) and the axes vkumd refuses, with the node
named. ArgMax/ArgMin: tests/framework/test_argmax.py and the node tests."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.graph.registry import OPS  # noqa: E402
from vkumd.onnx import UnsupportedModelError  # noqa: E402

REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
          "ReduceProd": "prod", "ReduceSumSquare": "sum_square", "ReduceL1": "l1_norm",
          "ReduceL2": "l2_norm", "ReduceLogSumExp": "logsumexp", "ReduceLogSum": "log_sum"}


def _model(op: str, shape: tuple[int, ...], axes: list[int] | None, opset: int,
           **attrs) -> onnx.ModelProto:
    inputs, inits = ["x"], []
    if axes is not None and (opset >= 18 or op == "ReduceSum"):
        inputs.append("axes")
        inits.append(numpy_helper.from_array(np.array(axes, np.int64), "axes"))
    elif axes is not None:
        attrs["axes"] = axes
    graph = helper.make_graph(
        [helper.make_node(op, inputs, ["y"], **attrs)], "g",
        [helper.make_tensor_value_info("x", T.FLOAT, list(shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _run(ctx, m: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return np.asarray(vkumd.onnx.load(m, ctx=ctx)(x=x)["y"])


@pytest.mark.parametrize("opset", [13, 18])
@pytest.mark.parametrize("op", list(REDUCE))
def test_matches_float64(ctx, op: str, opset: int) -> None:
    rng = np.random.default_rng()
    x = (rng.uniform(0.5, 1.5, (3, 7, 5, 9))).astype(np.float32)
    for axes, keep in (([1], 1), ([0, -2], 0), ([3, 1], 1), (None, 0)):
        got = _run(ctx, _model(op, x.shape, axes, opset, keepdims=keep), x)
        dim = None if axes is None else tuple(axes)
        want = OPS[REDUCE[op]].reference([x.astype(np.float64)],
                                         {"dim": dim, "keepdims": bool(keep)}, None)[0]
        assert got.shape == want.shape, (op, axes, keep)
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert err < 1e-5, (op, axes, keep, err)


def test_noop_and_empty_sets(ctx) -> None:
    x = np.random.default_rng().standard_normal((2, 3)).astype(np.float32)
    got = _run(ctx, _model("ReduceSum", x.shape, [], 13, noop_with_empty_axes=1), x)
    np.testing.assert_array_equal(got, x)
    empty = np.zeros((2, 0, 4), np.float32)
    for op, value in (("ReduceSum", 0.0), ("ReduceProd", 1.0), ("ReduceMax", -np.inf),
                      ("ReduceMin", np.inf), ("ReduceLogSumExp", -np.inf), ("ReduceL2", 0.0)):
        got = _run(ctx, _model(op, empty.shape, [1], 18, keepdims=1), empty)
        np.testing.assert_array_equal(got, np.full((2, 1, 4), value, np.float32), op)


@pytest.mark.parametrize("axes", [[3], [1, -2]], ids=str)
def test_bad_axes_are_refused(ctx, axes: list[int]) -> None:
    with pytest.raises(UnsupportedModelError, match="ReduceL1"):
        vkumd.onnx.load(_model("ReduceL1", (2, 3, 4), axes, 18), ctx=ctx)
