"""The quantization converters (ops_quant.py) on small models against float64 numpy, and
their refusals with the node named. ONNX's own node tests of these operators run in
test_onnx_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402


def _model(node, inputs: dict[str, tuple[int, list]], out_type: int,
           inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(k, t, s) for k, (t, s) in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_dequantize_per_axis_from_a_model(ctx) -> None:
    rng = np.random.default_rng()
    scale = rng.uniform(0.01, 0.1, 5).astype(np.float32)
    zero = rng.integers(-10, 10, 5).astype(np.int8)
    node = helper.make_node("DequantizeLinear", ["x", "s", "z"], ["y"], axis=1)
    m = _model(node, {"x": (T.INT8, [3, 5, 9])}, T.FLOAT, {"s": scale, "z": zero})
    x = rng.integers(-128, 128, (3, 5, 9)).astype(np.int8)
    got = vkumd.onnx.load(m, ctx=ctx)(x=x)["y"]
    want = (x.astype(np.float64) - zero.reshape(1, 5, 1)) * scale.reshape(1, 5, 1)
    np.testing.assert_allclose(got, want, rtol=2e-7)


def test_matmul_integer_from_a_model(ctx) -> None:
    rng = np.random.default_rng()
    node = helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])
    za, zb = np.array(3, np.uint8), np.array(250, np.uint8)
    m = _model(node, {"a": (T.UINT8, [7, 13]), "b": (T.UINT8, [13, 5])}, T.INT32,
               {"za": za, "zb": zb})
    a = rng.integers(0, 256, (7, 13)).astype(np.uint8)
    b = rng.integers(0, 256, (13, 5)).astype(np.uint8)
    got = vkumd.onnx.load(m, ctx=ctx)(a=a, b=b)["y"]
    want = (a.astype(np.int64) - 3) @ (b.astype(np.int64) - 250)
    np.testing.assert_array_equal(got, want)


def test_matmul_integer_past_exact_float32_sums_is_refused(ctx) -> None:
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"], name="the_node")
    m = _model(node, {"a": (T.UINT8, [2, 300]), "b": (T.UINT8, [300, 2])}, T.INT32, {})
    with pytest.raises(VkumdError, match="the_node") as info:
        vkumd.onnx.load(m, ctx=ctx)
    assert "exact over at most 258" in str(info.value)


def test_quantize_to_int16_is_refused(ctx) -> None:
    node = helper.make_node("QuantizeLinear", ["x", "s"], ["y"], name="the_node",
                            output_dtype=T.INT16)
    m = _model(node, {"x": (T.FLOAT, [4])}, T.INT16, {"s": np.array(0.1, np.float32)})
    with pytest.raises(VkumdError, match="the_node"):
        vkumd.onnx.load(m, ctx=ctx)
