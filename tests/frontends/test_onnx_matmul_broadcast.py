"""ONNX MatMul whose batch dimensions broadcast (ones on either side against larger ones):
each operand is broadcast to the full batch, then one batched matmul; against float64 numpy
on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402


@pytest.mark.parametrize("a_shape, b_shape", [((3, 1, 5, 7), (1, 2, 7, 9)),
                                              ((1, 4, 3, 5), (3, 1, 5, 2)),
                                              ((2, 1, 1, 3, 5), (2, 3, 5, 5, 6))])
def test_matmul_broadcast_batches_match_numpy(ctx, a_shape, b_shape) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal(a_shape).astype(np.float32)
    b = rng.standard_normal(b_shape).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["y"])], "bcast",
        [helper.make_tensor_value_info("a", T.FLOAT, a_shape),
         helper.make_tensor_value_info("b", T.FLOAT, b_shape)],
        [helper.make_tensor_value_info("y", T.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = np.asarray(vkumd.onnx.load(model, ctx=ctx)(a=a, b=b)["y"])
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert got.shape == want.shape
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-5
