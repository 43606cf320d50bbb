"""``ops.log_softmax`` against float64 numpy: dtypes, odd and long rows, any axis, every
reduction path, non-finite rows, a compiled graph, the ONNX LogSoftmax node and bad inputs.

Outputs start poisoned (NaN). Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (  # noqa: F401  (row_path is a fixture)
    FLOATS,
    assert_close,
    assert_each_raises,
    poisoned,
    row_path,
    sample,
    stored,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.opset.log_softmax import log_softmax_reference

# (shape, axis): odd lengths (VEC 1), multiples of 4 (VEC 4), rows longer than a workgroup.
CASES = [((1,), 0), ((7,), -1), ((3, 1), -1), ((5, 13), -1), ((2, 4099), -1), ((1, 30000), 1),
         ((5, 13), 0), ((3, 6, 5), 1), ((4, 3, 2, 8), 0), ((2, 3, 4, 8), -2)]


@pytest.mark.parametrize(("shape", "axis"), CASES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_float64(ctx, dtype: str, shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    got = ops.log_softmax(tensor(ctx, x, dtype), axis=axis, out=poisoned(ctx, shape, dtype))
    assert got.dtype.name == dtype
    assert_close(got.numpy(), log_softmax_reference(x, axis), dtype, f"{dtype} {shape} {axis}")


@pytest.mark.parametrize("shape", [(3, 7), (4, 64), (3, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_reduction_paths(ctx, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape, scale=4.0)
    got = ops.log_softmax(tensor(ctx, x, "float32"), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), log_softmax_reference(x, -1), "float32", str(shape))


def test_large_and_tiny_values_stay_finite(ctx) -> None:
    # exp overflows for 1e4 and log(softmax) underflows to log(0) for -1e4 apart; the
    # max-shifted form keeps every entry finite and exact to float32.
    rng = np.random.default_rng()
    x = stored(rng.uniform(-1e4, 1e4, (6, 301)), "float32")
    got = ops.log_softmax(ctx.tensor(x.astype(np.float32))).numpy()
    assert np.isfinite(got).all()
    assert_close(got, log_softmax_reference(x, -1), "float32", "large")


def test_non_finite_rows(ctx) -> None:
    x = np.array([[-np.inf] * 5, [0.0, -np.inf, 1.0, 2.0, -np.inf], [np.nan, 0, 1, 2, 3],
                  [0, 1, np.inf, 2, 3]], np.float32)
    got = ops.log_softmax(ctx.tensor(x), out=poisoned(ctx, x.shape, "float32")).numpy()
    want = log_softmax_reference(x.astype(np.float64), -1)
    np.testing.assert_array_equal(got[0], -np.inf)  # log of softmax's zeros
    np.testing.assert_array_equal(np.isneginf(got[1]), np.isneginf(want[1]))
    np.testing.assert_allclose(got[1][np.isfinite(want[1])], want[1][np.isfinite(want[1])],
                               rtol=1e-6)
    assert np.isnan(got[2:]).all()


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (4, 9, 5)).astype(np.float32)
    compiled = vkumd.compile(lambda x: ops.log_softmax(x * 0.5, axis=1), {"x": x}, ctx=ctx)
    want = log_softmax_reference(x.astype(np.float64) * 0.5, 1)
    assert_close(compiled(x=x).numpy(), want, "float32", "graph")


def _onnx_model(opset: int, **attrs):
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node("LogSoftmax", ["x"], ["y"], **attrs)], "log_softmax",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(("opset", "axis"), [(13, None), (13, 0), (13, -2), (11, None),
                                             (11, 0), (11, 2)])
def test_onnx_log_softmax(ctx, opset: int, axis: int | None) -> None:
    import vkumd.onnx
    attrs = {} if axis is None else {"axis": axis}
    model = _onnx_model(opset, **attrs)
    x = np.random.default_rng().standard_normal((3, 4, 5)).astype(np.float32)
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)
    got = np.asarray(got[next(iter(got))] if isinstance(got, dict) else got)
    if opset < 13:  # the trailing axes from `axis` on, flattened into one row
        first = (1 if axis is None else axis) % 3
        flat = x.astype(np.float64).reshape(int(np.prod(x.shape[:first])), -1)
        want = log_softmax_reference(flat, -1).reshape(x.shape)
    else:
        want = log_softmax_reference(x.astype(np.float64), -1 if axis is None else axis)
    assert_close(got, want, "float32", f"opset {opset} axis {axis}")


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)], ids=str)
def test_empty(ctx, shape: tuple[int, ...]) -> None:
    assert ops.log_softmax(ctx.empty(shape)).shape == shape


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.zeros((5, 7), np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.log_softmax(np.zeros((5, 7), np.float32))),
        (VkumdTypeError, lambda: ops.log_softmax(ctx.tensor(np.zeros((5, 7), np.int32)))),
        (VkumdValueError, lambda: ops.log_softmax(ctx.tensor(np.float32(1.0)))),
        (VkumdValueError, lambda: ops.log_softmax(x, axis=2)),
        (VkumdValueError, lambda: ops.log_softmax(x, axis=-3)),
        (VkumdTypeError, lambda: ops.log_softmax(x, axis=1.0)),
        (VkumdTypeError, lambda: ops.log_softmax(x, axis=True)),
        (VkumdValueError, lambda: ops.log_softmax(x, out=ctx.empty((7, 5)))),
        (VkumdValueError, lambda: ops.log_softmax(x, out=x)),
        (VkumdTypeError, lambda: ops.log_softmax(x, out=ctx.empty((5, 7), "float16"))),
    ]
    assert_each_raises(ctx, cases, "log_softmax")
