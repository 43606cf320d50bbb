"""``ops.topk``, ``ops.sort`` and ``ops.hardmax`` against numpy's stable sort and argmax (the
reference for indices): every dtype, any axis, rows longer than a workgroup, ties, NaN and
signed zeros, compiled graphs, the ONNX TopK and Hardmax nodes and bad inputs.

Outputs start poisoned. Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_each_raises, poisoned, tensor

import vkumd
from vkumd import ops
from vkumd.compiler.kernels import scan as scan_kernel
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.opset.topk import hardmax_reference, topk_reference

# (shape, axis, k): k of 1, several, the whole row; rows of several workgroup blocks.
CASES = [((1,), 0, 1), ((7,), -1, 3), ((5, 13), -1, 13), ((3, 1000), 1, 7), ((2, 4099), -1, 4),
         ((9, 4), 0, 2), ((3, 6, 5), 1, 6), ((4, 3, 2, 8), 0, 1)]


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    # Few distinct values, so every row has ties that the index order must break.
    return rng.integers(-20, 21, shape).astype(np.float64) / (1 if dtype == "int32" else 4)


def _input(ctx, x: np.ndarray, dtype: str) -> vkumd.Tensor:
    return ctx.tensor(x.astype(np.int32)) if dtype == "int32" else tensor(ctx, x, dtype)


def _poisoned(ctx, shape: tuple[int, ...], dtype: str) -> vkumd.Tensor:
    if dtype == "int32":
        return ctx.tensor(np.full(shape, -12345, np.int32))
    return poisoned(ctx, shape, dtype)


@pytest.mark.parametrize("largest", [True, False], ids=["largest", "smallest"])
@pytest.mark.parametrize(("shape", "axis", "k"), CASES, ids=str)
@pytest.mark.parametrize("dtype", [*FLOATS, "int32"])
def test_topk_matches_a_stable_sort(ctx, dtype: str, shape: tuple[int, ...], axis: int, k: int,
                                    largest: bool) -> None:
    x = _values(np.random.default_rng(), dtype, shape)
    out_shape = list(shape)
    out_shape[axis] = k
    out = (_poisoned(ctx, tuple(out_shape), dtype), _poisoned(ctx, tuple(out_shape), "int32"))
    values, indices = ops.topk(_input(ctx, x, dtype), k=k, axis=axis, largest=largest, out=out)
    assert values.dtype.name == dtype and indices.dtype.name == "int32"
    want_values, want_indices = topk_reference(x, k, axis, largest)
    np.testing.assert_array_equal(values.numpy(), want_values)
    np.testing.assert_array_equal(indices.numpy(), want_indices)


@pytest.mark.parametrize("width", [1, 128, 256], ids=lambda w: f"width{w}")
def test_other_workgroup_widths(ctx, monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    # The planner gives a GPU 128 lanes and lavapipe one subgroup; the picks across lanes
    # (a shared-memory tree) are the same at every width the kernel may get.
    monkeypatch.setattr(scan_kernel, "scan_width", lambda caps: width)
    rng = np.random.default_rng()
    for shape, k in [((3, 5), 5), ((2, 256), 9), ((2, 3001), 4)]:
        x = _values(rng, "float32", shape)
        values, indices = ops.topk(ctx.tensor(x.astype(np.float32)), k=k)
        want_values, want_indices = topk_reference(x, k, -1, True)
        np.testing.assert_array_equal(values.numpy(), want_values)
        np.testing.assert_array_equal(indices.numpy(), want_indices)
        np.testing.assert_array_equal(ops.hardmax(ctx.tensor(x.astype(np.float32))).numpy(),
                                      hardmax_reference(x, -1))


def test_nan_is_largest_and_zeros_are_equal(ctx) -> None:
    x = np.array([[1, np.nan, 3, -0.0, 0.0, np.inf, np.nan, -np.inf]], np.float32)
    for largest in (True, False):
        values, indices = ops.topk(ctx.tensor(x), k=8, largest=largest)
        want_values, want_indices = topk_reference(x, 8, -1, largest)
        np.testing.assert_array_equal(indices.numpy(), want_indices)
        np.testing.assert_array_equal(values.numpy(), want_values)
    np.testing.assert_array_equal(ops.hardmax(ctx.tensor(x)).numpy(), hardmax_reference(x, -1))


@pytest.mark.parametrize(("shape", "axis", "_k"), CASES, ids=str)
@pytest.mark.parametrize("dtype", [*FLOATS, "int32"])
def test_hardmax_is_the_first_maximum(ctx, dtype: str, shape: tuple[int, ...], axis: int,
                                      _k: int) -> None:
    x = _values(np.random.default_rng(), dtype, shape)
    got = ops.hardmax(_input(ctx, x, dtype), axis=axis, out=_poisoned(ctx, shape, dtype))
    assert got.dtype.name == dtype
    np.testing.assert_array_equal(got.numpy(), hardmax_reference(x, axis))


@pytest.mark.parametrize("descending", [False, True], ids=["ascending", "descending"])
@pytest.mark.parametrize(("shape", "axis"), [((7,), 0), ((5, 13), -1), ((3, 6, 5), 1),
                                             ((2, 1024), 1)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int32"])
def test_sort_is_stable(ctx, dtype: str, shape: tuple[int, ...], axis: int,
                        descending: bool) -> None:
    x = _values(np.random.default_rng(), dtype, shape)
    out = (_poisoned(ctx, shape, dtype), _poisoned(ctx, shape, "int32"))
    values, indices = ops.sort(_input(ctx, x, dtype), axis=axis, descending=descending, out=out)
    order = np.argsort(-x if descending else x, axis=axis, kind="stable")
    np.testing.assert_array_equal(indices.numpy(), order)
    np.testing.assert_array_equal(values.numpy(), np.take_along_axis(x, order, axis))


def test_compiled_graph(ctx) -> None:
    x = _values(np.random.default_rng(), "float32", (4, 9)).astype(np.float32)
    compiled = vkumd.compile(lambda x: ops.topk(x * 2, k=3, axis=0, largest=False), {"x": x},
                             ctx=ctx)
    assert compiled.executor == "compiled"
    values, indices = compiled(x=x)
    want_values, want_indices = topk_reference(x * 2.0, 3, 0, False)
    np.testing.assert_array_equal(values.numpy(), want_values)
    np.testing.assert_array_equal(indices.numpy(), want_indices)
    ordered = vkumd.compile(lambda x: ops.sort(x - 1, axis=0), {"x": x}, ctx=ctx)
    values, indices = ordered(x=x)
    np.testing.assert_array_equal(indices.numpy(), np.argsort(x, axis=0, kind="stable"))
    np.testing.assert_array_equal(values.numpy(), np.sort(x - 1.0, axis=0))
    hot = vkumd.compile(lambda x: ops.hardmax(x + 1, axis=0), {"x": x}, ctx=ctx)
    np.testing.assert_array_equal(hot(x=x).numpy(), hardmax_reference(x + 1.0, 0))


def test_k_zero_and_empty_rows(ctx) -> None:
    values, indices = ops.topk(ctx.tensor(np.ones((3, 4), np.float32)), k=0)
    assert values.shape == indices.shape == (3, 0)
    assert ops.hardmax(ctx.empty((0, 5))).shape == (0, 5)


def _onnx(node, inputs, outputs, opset: int, inits=()):
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import helper
    graph = helper.make_graph([node], "g", inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    return model


def _first(got):
    return [np.asarray(v) for v in got.values()] if isinstance(got, dict) else list(got)


@pytest.mark.parametrize(("axis", "largest"), [(1, 1), (-1, 0), (0, 1)])
def test_onnx_topk(ctx, axis: int, largest: int) -> None:
    pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper

    import vkumd.onnx
    shape, k = [3, 4, 5], 2
    out = list(shape)
    out[axis] = k
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=axis, largest=largest)
    model = _onnx(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                  [helper.make_tensor_value_info("v", TensorProto.FLOAT, out),
                   helper.make_tensor_value_info("i", TensorProto.INT64, out)], 11,
                  [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    x = _values(np.random.default_rng(), "float32", tuple(shape)).astype(np.float32)
    values, indices = _first(vkumd.onnx.load(model, ctx=ctx)(x=x))
    want_values, want_indices = topk_reference(x, k, axis, bool(largest))
    assert indices.dtype == np.int64
    np.testing.assert_array_equal(values, want_values)
    np.testing.assert_array_equal(indices, want_indices)


@pytest.mark.parametrize(("opset", "axis"), [(13, None), (13, 0), (11, None), (11, 2)])
def test_onnx_hardmax(ctx, opset: int, axis: int | None) -> None:
    pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper

    import vkumd.onnx
    node = helper.make_node("Hardmax", ["x"], ["y"], **({} if axis is None else {"axis": axis}))
    model = _onnx(node, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4, 5])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4, 5])], opset)
    x = _values(np.random.default_rng(), "float32", (3, 4, 5)).astype(np.float32)
    (got,) = _first(vkumd.onnx.load(model, ctx=ctx)(x=x))
    if opset < 13:  # the trailing axes from `axis` on, flattened into one row
        first = 1 if axis is None else axis
        want = hardmax_reference(x.reshape(int(np.prod(x.shape[:first])), -1), -1)
        want = want.reshape(x.shape)
    else:
        want = hardmax_reference(x, -1 if axis is None else axis)
    np.testing.assert_array_equal(got, want)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.zeros((5, 7), np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.topk(np.zeros((5, 7), np.float32), k=2)),
        (VkumdTypeError, lambda: ops.topk(ctx.tensor(np.zeros((5, 7), np.uint8)), k=2)),
        (VkumdValueError, lambda: ops.topk(ctx.tensor(np.float32(1.0)), k=1)),
        (VkumdValueError, lambda: ops.topk(x, k=8)),
        (VkumdValueError, lambda: ops.topk(x, k=-1)),
        (VkumdValueError, lambda: ops.topk(ctx.zeros((2, 2000)), k=1025)),
        (VkumdTypeError, lambda: ops.topk(x, k=2.0)),
        (VkumdValueError, lambda: ops.topk(x, k=2, axis=2)),
        (VkumdTypeError, lambda: ops.topk(x, k=2, largest=1)),
        (VkumdTypeError, lambda: ops.topk(x, k=2, out=ctx.empty((5, 2)))),
        (VkumdTypeError, lambda: ops.topk(x, k=2, out=(ctx.empty((5, 2)),
                                                     ctx.empty((5, 2))))),
        (VkumdValueError, lambda: ops.topk(x, k=2, out=(ctx.empty((5, 3)),
                                                      ctx.empty((5, 2), "int32")))),
    ]
    assert_each_raises(ctx, cases, "topk")
    cases = [
        (VkumdTypeError, lambda: ops.hardmax(np.zeros((5, 7), np.float32))),
        (VkumdTypeError, lambda: ops.hardmax(ctx.tensor(np.zeros((5, 7), np.uint8)))),
        (VkumdValueError, lambda: ops.hardmax(ctx.tensor(np.float32(1.0)))),
        (VkumdValueError, lambda: ops.hardmax(x, axis=-3)),
        (VkumdValueError, lambda: ops.hardmax(x, out=x)),
        (VkumdTypeError, lambda: ops.hardmax(x, out=ctx.empty((5, 7), "int32"))),
    ]
    assert_each_raises(ctx, cases, "hardmax")
    cases = [
        (VkumdTypeError, lambda: ops.sort(np.zeros((5, 7), np.float32))),
        (VkumdValueError, lambda: ops.sort(ctx.zeros((2, 1025)))),
        (VkumdValueError, lambda: ops.sort(x, axis=-3)),
        (VkumdTypeError, lambda: ops.sort(x, descending=1)),
        (VkumdValueError, lambda: ops.sort(x, out=(ctx.empty((5, 6)),
                                                   ctx.empty((5, 7), "int32")))),
    ]
    assert_each_raises(ctx, cases, "sort")
