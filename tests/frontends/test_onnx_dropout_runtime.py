"""ONNX Dropout whose ratio and training_mode are graph inputs: exact (the input, a mask of
ones) where training_mode is false or the ratio 0, each value imported once; a random mask
(training_mode true, ratio > 0) refused at the call, naming the ratio."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402

SHAPE = (3, 5, 7)


def _model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Dropout", ["x", "r", "t"], ["y", "z"], seed=0),
         helper.make_node("Mul", ["y", "y"], ["w"])], "dropout",
        [helper.make_tensor_value_info("x", T.FLOAT, SHAPE),
         helper.make_tensor_value_info("r", T.FLOAT, ()),
         helper.make_tensor_value_info("t", T.BOOL, ())],
        [helper.make_tensor_value_info("w", T.FLOAT, SHAPE),
         helper.make_tensor_value_info("z", T.BOOL, SHAPE)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.mark.parametrize("ratio, training", [(0.3, False), (0.0, True), (0.0, False)])
def test_identity_cases_are_exact(ctx, ratio: float, training: bool) -> None:
    rng = np.random.default_rng()
    model = vkumd.onnx.load(_model(), ctx=ctx)
    for _ in range(2):  # a second call reuses the import of these values
        x = rng.standard_normal(SHAPE).astype(np.float32)
        got = model(x=x, r=np.array(ratio, np.float32), t=np.array(training))
        want = x.astype(np.float64) ** 2
        assert np.max(np.abs(got["w"] - want) / np.maximum(want, 1e-30)) < 1e-6
        assert got["z"].dtype == np.bool_ and got["z"].all()


def test_a_random_mask_is_refused(ctx) -> None:
    model = vkumd.onnx.load(_model(), ctx=ctx)
    x = np.ones(SHAPE, np.float32)
    with pytest.raises(UnsupportedModelError, match=r"training_mode is true with ratio 0\.5"):
        model(x=x, r=np.array(0.5, np.float32), t=np.array(True))
    got = model(x=x, r=np.array(0.5, np.float32), t=np.array(False))  # still usable
    np.testing.assert_array_equal(got["w"], x)
