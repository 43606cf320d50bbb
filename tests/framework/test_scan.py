"""``ops.cumsum`` and ``ops.cumprod`` against float64 numpy: every dtype, any axis, exclusive
and reversed, rows shorter and much longer than a workgroup, a compiled graph, the ONNX
CumSum and CumProd nodes and bad inputs.

Outputs start poisoned (NaN, or a sentinel for int32). Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, stored, tensor

import vkumd
from vkumd import ops
from vkumd.compiler.kernels import scan as scan_kernel
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.opset.scan import scan_reference

# (shape, axis): one element, odd rows, rows of several workgroup blocks, other axes.
CASES = [((1,), 0), ((7,), -1), ((5, 13), -1), ((3, 1000), 1), ((2, 4099), -1), ((9, 4), 0),
         ((3, 6, 5), 1), ((4, 3, 2, 8), 0)]
FLAGS = [(False, False), (True, False), (False, True), (True, True)]
OPS = {"cumsum": (np.cumsum, 0.0), "cumprod": (np.cumprod, 1.0)}


def _values(rng: np.random.Generator, op: str, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "int32":
        return rng.integers(-3, 4, shape).astype(np.float64)
    if op == "cumprod":  # products of factors near 1 stay in range over thousands of terms
        return stored(rng.uniform(0.99, 1.01, shape) * rng.choice([-1, 1], shape), dtype)
    return stored(rng.standard_normal(shape), dtype)


def _run(ctx, op: str, x: np.ndarray, dtype: str, axis: int, exclusive: bool,
         reverse: bool) -> np.ndarray:
    if dtype == "int32":
        out = ctx.tensor(np.full(x.shape, -12345, np.int32))
        src = ctx.tensor(x.astype(np.int32))
    else:
        out, src = poisoned(ctx, x.shape, dtype), tensor(ctx, x, dtype)
    got = getattr(ops, op)(src, axis=axis, exclusive=exclusive, reverse=reverse, out=out)
    assert got.dtype.name == dtype
    return got.numpy()


@pytest.mark.parametrize(("exclusive", "reverse"), FLAGS, ids=str)
@pytest.mark.parametrize(("shape", "axis"), CASES, ids=str)
@pytest.mark.parametrize("dtype", [*FLOATS, "int32"])
@pytest.mark.parametrize("op", list(OPS))
def test_matches_float64(ctx, op: str, dtype: str, shape: tuple[int, ...], axis: int,
                         exclusive: bool, reverse: bool) -> None:
    rng = np.random.default_rng()
    x = _values(rng, op, dtype, shape)
    got = _run(ctx, op, x, dtype, axis, exclusive, reverse)
    combine, identity = OPS[op]
    want = scan_reference(x, combine, identity, axis, exclusive, reverse)
    what = f"{op} {dtype} {shape} axis={axis} exclusive={exclusive} reverse={reverse}"
    if dtype == "int32":
        np.testing.assert_array_equal(got, want.astype(np.int64).astype(np.int32), what)
    else:
        # A running sum's late entries can be small differences of large partial sums:
        # judged by the norm of the whole result, as a reduction's error is.
        assert_close(got, want, dtype, what)


@pytest.mark.parametrize("width", [1, 128, 256], ids=lambda w: f"width{w}")
@pytest.mark.parametrize("op", list(OPS))
def test_other_workgroup_widths(ctx, monkeypatch: pytest.MonkeyPatch, op: str,
                                width: int) -> None:
    # The planner gives a GPU 128 lanes and lavapipe one subgroup; each width the kernel
    # may get scans the same (rows shorter than, equal to and many times the block).
    monkeypatch.setattr(scan_kernel, "scan_width", lambda caps: width)
    rng = np.random.default_rng()
    combine, identity = OPS[op]
    for shape, exclusive, reverse in [((3, 5), True, False), ((2, 256), False, True),
                                      ((2, 3001), True, True)]:
        x = _values(rng, op, "float32", shape)
        got = _run(ctx, op, x, "float32", -1, exclusive, reverse)
        want = scan_reference(x, combine, identity, -1, exclusive, reverse)
        assert_close(got, want, "float32", f"{op} width {width} {shape}")


def test_int32_wraps_as_numpy(ctx) -> None:
    x = np.array([2**31 - 2, 1, 1, 1, -5], np.int32)
    got = ops.cumsum(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.cumsum(x, dtype=np.int32))


def test_non_finite_values_propagate(ctx) -> None:
    x = np.array([[1.0, np.inf, 2.0, -np.inf, 3.0], [1.0, 2.0, np.nan, 4.0, 5.0]], np.float32)
    with np.errstate(invalid="ignore"):  # inf - inf is NaN, in numpy as in the kernel
        want_sum = np.cumsum(x, axis=-1)
        want_prod = np.flip(np.cumprod(np.flip(x, -1), axis=-1), -1)
    np.testing.assert_array_equal(ops.cumsum(ctx.tensor(x)).numpy(), want_sum)
    np.testing.assert_array_equal(ops.cumprod(ctx.tensor(x), reverse=True).numpy(), want_prod)


def test_compiled_graph(ctx) -> None:
    x = np.random.default_rng().standard_normal((4, 9, 5)).astype(np.float32)
    compiled = vkumd.compile(lambda x: ops.cumsum(x * 0.5, axis=1, exclusive=True), {"x": x},
                             ctx=ctx)
    want = scan_reference(x * 0.5, np.cumsum, 0.0, 1, True, False)
    assert_close(compiled(x=x).numpy(), want, "float32", "graph")


def _onnx_model(op_type: str, axis: int, **attrs):
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper
    graph = helper.make_graph(
        [helper.make_node(op_type, ["x", "axis"], ["y"], **attrs)], op_type,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])],
        [helper.make_tensor("axis", TensorProto.INT64, [], [axis])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(("op_type", "axis", "exclusive", "reverse"),
                         [("CumSum", 1, 0, 0), ("CumSum", -1, 1, 1), ("CumProd", 0, 0, 1),
                          ("CumProd", 2, 1, 0)])
def test_onnx_nodes(ctx, op_type: str, axis: int, exclusive: int, reverse: int) -> None:
    import vkumd.onnx
    model = _onnx_model(op_type, axis, exclusive=exclusive, reverse=reverse)
    x = np.random.default_rng().uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)
    got = np.asarray(got[next(iter(got))] if isinstance(got, dict) else got)
    combine, identity = OPS["cumsum" if op_type == "CumSum" else "cumprod"]
    want = scan_reference(x, combine, identity, axis % 3, bool(exclusive), bool(reverse))
    assert_close(got, want, "float32", f"{op_type} axis={axis}")


def test_onnx_run_time_axis_is_specialized_per_call(ctx) -> None:
    # The axis is needed at import: the loader specializes the graph on the value each call
    # gives (NeedsConstant), so both axes compute what they should.
    pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper

    import vkumd.onnx
    graph = helper.make_graph(
        [helper.make_node("CumSum", ["x", "axis"], ["y"])], "cumsum",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4]),
         helper.make_tensor_value_info("axis", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])])
    model = vkumd.onnx.load(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)]),
                            ctx=ctx)
    x = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    for axis in (0, 1):
        got = model(x=x, axis=np.int64(axis))
        got = np.asarray(got[next(iter(got))] if isinstance(got, dict) else got)
        assert_close(got, np.cumsum(x.astype(np.float64), axis=axis), "float32", f"axis {axis}")


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)], ids=str)
def test_empty(ctx, shape: tuple[int, ...]) -> None:
    assert ops.cumsum(ctx.empty(shape), axis=0).shape == shape


@pytest.mark.parametrize("op", list(OPS))
def test_bad_inputs(ctx, op: str) -> None:
    fn = getattr(ops, op)
    x = ctx.tensor(np.zeros((5, 7), np.float32))
    cases = [
        (VkumdTypeError, lambda: fn(np.zeros((5, 7), np.float32))),
        (VkumdTypeError, lambda: fn(ctx.tensor(np.zeros((5, 7), np.uint8)))),
        (VkumdValueError, lambda: fn(ctx.tensor(np.float32(1.0)))),
        (VkumdValueError, lambda: fn(x, axis=2)),
        (VkumdTypeError, lambda: fn(x, axis=0.0)),
        (VkumdTypeError, lambda: fn(x, exclusive=1)),
        (VkumdTypeError, lambda: fn(x, reverse="yes")),
        (VkumdValueError, lambda: fn(x, out=ctx.empty((7, 5)))),
        (VkumdValueError, lambda: fn(x, out=x)),
        (VkumdTypeError, lambda: fn(x, out=ctx.empty((5, 7), "int32"))),
    ]
    assert_each_raises(ctx, cases, op)
