"""Reductions over any set of axes (``dim``, ``keepdim``) against float64 numpy.

Every op of ``opset/reductions.py`` on odd shapes, over a middle axis (the strided kernel),
a contiguous run of axes, axes separated by a kept one (a permute first), the last axis (the
row kernel) and every axis; outputs start poisoned (NaN). The data keeps each reference away
from its own cancellation: sums and logs see a positive offset, products values near 1.
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
    stored,
    tensor,
)

from vkumd import ops
from vkumd.compiler.kernels.reduce import reduce_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.registry import OPS

OPS_UNDER_TEST = ["sum", "mean", "max", "min", "prod", "sum_square", "l1_norm", "l2_norm",
                  "logsumexp", "log_sum", "var", "std"]
DIMS = [(1,), (0, 2), (1, 3), None, (2, 3), -1, 0]


def _data(rng: np.random.Generator, op: str, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if op == "prod":
        return stored(np.exp(rng.standard_normal(shape) * 0.05), dtype)
    offset = {"sum": 1.0, "mean": 1.0, "var": 1.0, "std": 1.0, "log_sum": 4.0}.get(op, 0.0)
    return stored(rng.standard_normal(shape) + offset, dtype)


def _expected(op: str, x: np.ndarray, dim, keep: bool, correction: float = 1) -> np.ndarray:
    return OPS[op].reference([x], {"dim": dim, "keepdims": keep, "correction": correction},
                             None)[0]


def _out_shape(shape: tuple[int, ...], dim, keep: bool) -> tuple[int, ...]:
    axes = range(len(shape)) if dim is None else np.atleast_1d(dim) % len(shape)
    return tuple(1 if i in axes else s for i, s in enumerate(shape) if keep or i not in axes)


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("op", OPS_UNDER_TEST)
def test_float32_any_axes(ctx, op: str, dim) -> None:
    rng = np.random.default_rng()
    shape = (3, 7, 5, 9)
    x = _data(rng, op, shape, "float32")
    for keep in (False, True):
        out = poisoned(ctx, _out_shape(shape, dim, keep), "float32")
        got = getattr(ops, op)(tensor(ctx, x, "float32"), dim, keep, out=out)
        assert got is out
        assert_close(got.numpy(), _expected(op, x, dim, keep), "float32", f"{op} {dim} {keep}")


@pytest.mark.parametrize("dtype", FLOATS[1:])
@pytest.mark.parametrize("op", ["sum", "max", "min", "l2_norm", "logsumexp", "var"])
def test_16_bit_types(ctx, op: str, dtype: str) -> None:
    rng = np.random.default_rng()
    for shape, dim in (((4, 33, 6), 1), ((5, 2, 7, 3), (0, 2)), ((3, 130), -1)):
        x = _data(rng, op, shape, dtype)
        out = poisoned(ctx, _out_shape(shape, dim, False), dtype)
        got = getattr(ops, op)(tensor(ctx, x, dtype), dim, out=out).numpy()
        # One rounding to the output type; the comparisons are exact in float32.
        expected = stored(_expected(op, x, dim, False), dtype)
        assert_close(got, expected, "float32" if op in ("max", "min") else dtype,
                     f"{op} {dtype} {shape} {dim}")


@pytest.mark.usefixtures("row_path")
def test_last_axis_every_row_path(ctx) -> None:
    rng = np.random.default_rng()
    for shape in ((3, 7), (2, 4099), (5, 256)):
        for op in OPS_UNDER_TEST:
            x = _data(rng, op, shape, "float32")
            got = getattr(ops, op)(tensor(ctx, x, "float32"), out=poisoned(ctx, shape[:1]))
            assert_close(got.numpy(), _expected(op, x, -1, False), "float32", f"{op} {shape}")


def test_planner_reads_the_middle_axis_in_place(ctx) -> None:
    def kernel(op: str, inner: int) -> str:
        return reduce_plan(ctx.caps, op, "F32", 3, 7, inner).program.kernel.name
    assert kernel("sum", 1) == "reduce_rows"
    assert kernel("sum", 5) == "reduce_axis"
    assert kernel("prod", 1) == "reduce_axis"  # no lane product in rows.glsl
    with pytest.raises(VkumdValueError, match="2\\^32"):
        reduce_plan(ctx.caps, "sum", "F32", 1 << 16, 1 << 8, 1 << 8)


def test_size_one_axes_do_not_split_a_run(ctx) -> None:
    # (1, 3) around a size-1 axis 2 is one run: no permute, the same answer.
    rng = np.random.default_rng()
    x = _data(rng, "sum", (4, 6, 1, 5, 3), "float32")
    got = ops.sum(tensor(ctx, x, "float32"), (1, 3), out=poisoned(ctx, (4, 1, 3)))
    assert_close(got.numpy(), x.sum(axis=(1, 3)), "float32")


@pytest.mark.parametrize(("shape", "dim"), [
    ((1, 7, 1), (1,)), ((1, 1, 5), None), ((3, 1, 4, 1), (0, 2)), ((2, 1, 3), (1,)),
    ((5,), 0), ((2, 3, 4, 5), (0, 3)), ((2, 3, 4, 5), (0, 1, 3)), ((4, 6, 1, 5, 3), (2,)),
], ids=str)
def test_size_one_and_separated_axes(ctx, shape: tuple[int, ...], dim) -> None:
    rng = np.random.default_rng()
    for op in ("sum", "prod", "max", "var"):
        x = _data(rng, op, shape, "float32")
        for keep in (False, True):
            out = poisoned(ctx, _out_shape(shape, dim, keep), "float32")
            got = getattr(ops, op)(tensor(ctx, x, "float32"), dim, keep, out=out).numpy()
            expected = _expected(op, x, dim, keep)
            if op == "var" and np.isnan(expected).all():  # one element: 0 / 0, as numpy
                assert np.isnan(got).all(), (op, shape, dim)
                continue
            assert_close(got, expected, "float32", f"{op} {shape} {dim} {keep}")


def test_nan_and_infinities_along_a_middle_axis(ctx) -> None:
    x = np.zeros((2, 4, 3), np.float32)
    x[0, 2, 0] = np.nan
    x[1, :, 1] = -np.inf
    x[1, 3, 2] = np.inf
    t = ctx.tensor(x)
    for op in ("max", "min", "logsumexp", "sum"):
        got = getattr(ops, op)(t, 1).numpy()
        expected = _expected(op, x.astype(np.float64), 1, False)
        np.testing.assert_array_equal(got, expected.astype(np.float32), op)


def test_empty_reductions(ctx) -> None:
    x = ctx.empty((3, 0, 2))
    for op, value in (("sum", 0.0), ("prod", 1.0), ("sum_square", 0.0), ("l2_norm", 0.0),
                      ("logsumexp", -np.inf), ("log_sum", -np.inf)):
        got = getattr(ops, op)(x, 1, out=poisoned(ctx, (3, 2))).numpy()
        np.testing.assert_array_equal(got, np.full((3, 2), value, np.float32), op)
    assert ops.max(ctx.empty((0, 4)), 1).shape == (0,)
    for op in ("mean", "max", "min", "var", "std"):
        with pytest.raises(VkumdValueError, match="empty"):
            getattr(ops, op)(x, (0, 1))


def test_variance_correction(ctx) -> None:
    rng = np.random.default_rng()
    x = _data(rng, "var", (5, 6, 7), "float32")
    t = ctx.tensor(x.astype(np.float32))
    for correction in (0, 1, 2.5):
        for op, fn in (("var", np.var), ("std", np.std)):
            got = getattr(ops, op)(t, (0, 2), correction=correction)
            assert_close(got.numpy(), fn(x, axis=(0, 2), ddof=correction), "float32", op)
    one = ctx.tensor(np.array([[2.0], [0.0]], np.float32))
    # n - correction <= 0: numpy's and torch's answers, inf for spread values, NaN for none.
    assert np.isnan(ops.var(one, -1).numpy()).all()
    spread = ctx.tensor(np.array([[1.0, 3.0]], np.float32))
    assert ops.var(spread, -1, correction=2).numpy()[0] == np.inf


def test_keepdim_names(ctx) -> None:
    t = ctx.tensor(np.ones((2, 3, 4), np.float32))
    assert ops.sum(t, (0, 2), True).shape == (1, 3, 1)
    assert ops.sum(t, (0, 2), keepdims=True).shape == (1, 3, 1)
    assert ops.mean(t, [2, 0]).shape == (3,)
    assert ops.max(t, None).shape == ()
    assert ops.sum(t).shape == (2, 3)  # the historical default: the last axis


def test_bad_inputs(ctx) -> None:
    t = ctx.tensor(np.ones((2, 3, 4), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.sum(t, 3)),
        (VkumdValueError, lambda: ops.sum(t, (0, -3))),
        (VkumdTypeError, lambda: ops.sum(t, 1.0)),
        (VkumdTypeError, lambda: ops.mean(t, (0, True))),
        (VkumdTypeError, lambda: ops.prod(ctx.tensor(np.ones((2, 3), np.int32)), 0)),
        (VkumdValueError, lambda: ops.min(ctx.zeros(()), None)),
        (VkumdValueError, lambda: ops.sum(t, 1, True, keepdims=False)),
        (VkumdTypeError, lambda: ops.var(t, 1, correction="1")),
        (VkumdValueError, lambda: ops.l2_norm(t, (0, 2), out=ctx.empty((3, 1)))),
        (VkumdTypeError, lambda: ops.std(t, 1, out=ctx.empty((2, 4), "float16"))),
    ])


def test_traced_and_compiled(ctx) -> None:
    # ops calls and tensor methods with dims trace to the records' attributes; the compiled
    # graph's launches agree with the float64 reference.
    import vkumd

    def fn(x):
        return (ops.var(x, (0, 2), correction=0), x.sum(dim=1), ops.logsumexp(x, None, True),
                ops.min(x, [2, 0], keepdims=True), x.mean(axis=(1, 2)))

    rng = np.random.default_rng()
    x = _data(rng, "sum", (4, 6, 5), "float32")
    tensors = {"x": tensor(ctx, x, "float32")}
    cf = vkumd.compile(fn, tensors)
    want = [np.var(x, axis=(0, 2)), x.sum(1), _expected("logsumexp", x, None, True),
            x.min(axis=(0, 2), keepdims=True), x.mean(axis=(1, 2))]
    for got, w in zip(cf(**tensors), want, strict=True):
        assert_close(got.numpy(), w, "float32")
