"""``ops.scatter_elements`` and ``ops.scatter_nd`` against float64 references written here as
sequential loops: every reduction and dtype, odd shapes, every axis, duplicate indices
(applied in order: the last wins under ``none``), negative and out-of-range indices (the
update dropped), NaN under max/min, in place, poisoned outputs, a compiled graph and bad
inputs (the ONNX nodes: tests/frontends/test_onnx_index.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from test_gathers import DTYPES, _data, _index
from transformer_checks import TOL, assert_each_raises

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import OPS
from vkumd.testing.numerics import poisoned, rel_error

REDUCTIONS = ["none", "add", "mul", "max", "min"]
COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _apply(out: np.ndarray, target: tuple, update: np.ndarray, reduction: str) -> None:
    out[target] = update if reduction == "none" else COMBINE[reduction](out[target], update)


def scatter_elements_loop(data, ids, updates, axis: int, reduction: str) -> np.ndarray:
    out = data.copy()
    for p in itertools.product(*map(range, ids.shape)):
        i = _index(int(ids[p]), data.shape[axis])
        if i is not None:
            _apply(out, p[:axis] + (i,) + p[axis + 1:], updates[p], reduction)
    return out


def scatter_nd_loop(data, ids, updates, reduction: str) -> np.ndarray:
    out = data.copy()
    depth = ids.shape[-1]
    for p in itertools.product(*map(range, ids.shape[:-1])):
        where = [_index(int(ids[p + (j,)]), data.shape[j]) for j in range(depth)]
        if None not in where:
            _apply(out, tuple(where), updates[p], reduction)
    return out


def _check(got, want: np.ndarray, dtype: str, reduction: str, what: str) -> None:
    """Moves and max/min are exact; sums and products round once per update."""
    values = got.numpy().astype(np.float64)
    assert values.shape == want.shape, what
    if reduction in ("add", "mul") and dtype != "int32":
        assert rel_error(values, want) < 4 * TOL[dtype], what
    else:
        np.testing.assert_array_equal(values, want, err_msg=what)


def _operand(ctx, rng: np.random.Generator, dtype: str, reduction: str, shape):
    """A tensor and the float64 values it holds; for products, values that keep a product
    of a few dozen in range (int32 wraps on overflow, as C does)."""
    if reduction != "mul":
        return _data(ctx, rng, dtype, shape)
    if dtype == "int32":
        values = rng.integers(-2, 3, shape)
        return ctx.tensor(values.astype(np.int32)), values.astype(np.float64)
    t = ctx.tensor(rng.uniform(0.8, 1.25, shape).astype(np.float32), dtype=dtype)
    return t, t.numpy().astype(np.float64)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,index_shape", [
    ((7,), 0, (11,)),
    ((3, 5), 1, (3, 9)),
    ((4, 3, 33), 0, (9, 2, 17)),
    ((4, 3, 33), -1, (4, 3, 40)),
    ((2, 3, 1, 5, 2, 3, 2), 3, (2, 3, 1, 8, 2, 3, 2)),
])
def test_scatter_elements(ctx, dtype: str, reduction: str, shape, axis: int,
                          index_shape) -> None:
    rng = np.random.default_rng()
    data, values = _operand(ctx, rng, dtype, reduction, shape)
    updates, update_values = _operand(ctx, rng, dtype, reduction, index_shape)
    size = shape[axis]
    ids = rng.integers(-size - 2, size + 2, index_shape).astype(np.int32)  # duplicates too
    out = poisoned(ctx, shape, dtype)
    got = ops.scatter_elements(data, ctx.tensor(ids), updates, axis=axis, reduction=reduction,
                               out=out)
    assert got is out
    want = scatter_elements_loop(values, ids, update_values, axis % len(shape), reduction)
    _check(got, want, dtype, reduction, f"{dtype} {reduction}")
    record = OPS["scatter_elements"].reference(
        [values, ids.astype(np.float64), update_values],
        {"axis": axis, "reduction": reduction}, [shape])[0]
    np.testing.assert_array_equal(record, want)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,index_shape", [
    ((7,), (13, 1)),
    ((4, 5), (3, 7, 2)),
    ((4, 3, 33), (6, 1)),
    ((4, 3, 33), (5, 2)),
    ((3, 5, 7), (2, 0)),  # empty tuples: every update covers all of data
])
def test_scatter_nd(ctx, dtype: str, reduction: str, shape, index_shape) -> None:
    rng = np.random.default_rng()
    depth = index_shape[-1]
    update_shape = index_shape[:-1] + shape[depth:]
    data, values = _operand(ctx, rng, dtype, reduction, shape)
    updates, update_values = _operand(ctx, rng, dtype, reduction, update_shape)
    ids = np.zeros(index_shape, np.int32)
    for j, n in enumerate(shape[:depth]):
        ids[..., j] = rng.integers(-n - 1, n + 1, index_shape[:-1])
    out = poisoned(ctx, shape, dtype)
    got = ops.scatter_nd(data, ctx.tensor(ids), updates, reduction=reduction, out=out)
    assert got is out
    want = scatter_nd_loop(values, ids, update_values, reduction)
    _check(got, want, dtype, reduction, f"{dtype} {reduction}")
    record = OPS["scatter_nd"].reference([values, ids.astype(np.float64), update_values],
                                         {"reduction": reduction}, [shape])[0]
    np.testing.assert_array_equal(record, want)


def test_duplicates_last_wins_and_nan(ctx) -> None:
    """Under ``none`` the last of duplicate indices wins, in every line; max and min give
    NaN where either side holds one (numpy's maximum and minimum)."""
    data = ctx.tensor(np.zeros((3, 4), np.float32))
    ids = ctx.tensor(np.array([[1, 1, 1], [2, -2, 2], [0, 3, 0]], np.int32))
    updates = ctx.tensor(np.arange(9, dtype=np.float32).reshape(3, 3))
    got = ops.scatter_elements(data, ids, updates, axis=1).numpy()
    np.testing.assert_array_equal(got, [[0, 2, 0, 0], [0, 0, 5, 0], [8, 0, 0, 7]])
    tuples = ctx.tensor(np.array([[1], [0], [1]], np.int32))
    rows = ctx.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(ops.scatter_nd(data, tuples, rows).numpy()[:2],
                                  [[4, 5, 6, 7], [8, 9, 10, 11]])
    nan = np.float32(np.nan)
    with_nan = ctx.tensor(np.array([1, nan, 3], np.float32))
    for reduction in ("max", "min"):
        got = ops.scatter_elements(with_nan, ctx.tensor(np.array([0, 2], np.int32)),
                                   ctx.tensor(np.array([nan, 5], np.float32)),
                                   reduction=reduction).numpy()
        assert np.isnan(got[0]) and np.isnan(got[1])
        assert got[2] == (5 if reduction == "max" else 3)


def test_in_place_and_compiled(ctx) -> None:
    """``out=data`` updates data itself; in a compiled graph the record's ``inplace`` lets the
    output take a dying input's memory, and the result is the same."""
    rng = np.random.default_rng()
    values = rng.standard_normal((5, 6)).astype(np.float32)
    data = ctx.tensor(values)
    ids = rng.integers(0, 5, (4, 6)).astype(np.int32)
    updates = rng.standard_normal((4, 6)).astype(np.float32)
    got = ops.scatter_elements(data, ctx.tensor(ids), ctx.tensor(updates), reduction="add",
                               out=data)
    assert got is data
    want = scatter_elements_loop(values.astype(np.float64), ids, updates.astype(np.float64),
                                 0, "add")
    assert rel_error(got.numpy(), want) < 1e-6

    def fn(data, ids, updates):
        return ops.scatter_elements(data * 2.0, ids, updates, reduction="max") + 1.0

    example = {"data": values, "ids": ids, "updates": updates}
    compiled = vkumd.compile(fn, example, ctx=ctx)
    want = scatter_elements_loop(values.astype(np.float64) * 2, ids,
                                 updates.astype(np.float64), 0, "max") + 1
    assert rel_error(compiled(**example).numpy(), want) < 1e-6


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((3, 4), np.float32))
    ids = ctx.tensor(np.zeros((2, 4), np.int32))
    upd = ctx.tensor(np.ones((2, 4), np.float32))
    se, snd = ops.scatter_elements, ops.scatter_nd
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: se(x, ctx.tensor(np.zeros((2, 4), np.float32)), upd)),
        (VkumdTypeError, lambda: se(x, ids, ctx.tensor(np.ones((2, 4), np.float16)))),
        (VkumdTypeError, lambda: se(ctx.tensor(np.ones((3, 4), np.uint8)), ids, upd)),
        (VkumdValueError, lambda: se(x, ids, ctx.tensor(np.ones((2, 3), np.float32)))),
        (VkumdValueError, lambda: se(x, ctx.tensor(np.zeros((8,), np.int32)),
                                     ctx.tensor(np.ones((8,), np.float32)))),
        (VkumdValueError, lambda: se(x, ids, upd, axis=2)),
        (VkumdValueError, lambda: se(x, ids, upd, reduction="mean")),
        (VkumdValueError, lambda: se(x, ctx.tensor(np.zeros((2, 5), np.int32)),
                                     ctx.tensor(np.ones((2, 5), np.float32)))),
        (VkumdValueError, lambda: se(x, ids, upd, out=ctx.empty((4, 3), "float32"))),
        (VkumdTypeError, lambda: se(x, ids, upd, out=ctx.empty((3, 4), "float16"))),
        (VkumdValueError, lambda: se(x, ids, upd, out=upd)),
        (VkumdValueError, lambda: se(ctx.tensor(np.ones((3,) * 8, np.float32)),
                                     ctx.tensor(np.zeros((2,) * 8, np.int32)),
                                     ctx.tensor(np.ones((2,) * 8, np.float32)))),
        (VkumdValueError, lambda: snd(x, ctx.tensor(np.zeros((2, 3), np.int32)), upd)),
        (VkumdValueError, lambda: snd(x, ctx.tensor(np.zeros((2, 1), np.int32)), upd[:, :3])),
        (VkumdTypeError, lambda: snd(x, ctx.tensor(np.zeros((2, 1), np.float32)), upd)),
        (VkumdValueError, lambda: snd(x, ctx.tensor(np.zeros((2, 1), np.int32)), upd,
                                      reduction="sum")),
    ])


def test_nodes_the_kernels_cannot_index_are_refused_before_lowering() -> None:
    """Dimensions that do not merge, seven for the gather (eight for the scatter, whose
    kernel indexes every one but the axis): the graph's node has no device kernel (a stated
    reason), where the eager op raises; mergeable or symbolic ones are taken."""
    from vkumd.framework.execute.lower import device_reason
    from vkumd.framework.graph import GraphBuilder

    b = GraphBuilder("index")
    data = b.input("data", (3,) * 7)
    ids = b.input("ids", (2,) * 7, "int32")
    gathered = b.gather_elements(data, ids, axis=0)
    scattered = b.scatter_elements(b.input("d8", (3,) * 8), b.input("i8", (2,) * 8, "int32"),
                                   b.input("u8", (2,) * 8), axis=0)
    seven = b.scatter_elements(data, ids, b.input("u", (2,) * 7), axis=0)
    merged = b.gather_elements(data, b.input("all", (2,) + (3,) * 6, "int32"), axis=0)
    symbolic = b.gather_elements(b.input("s", ("n", 3)), b.input("si", ("n", 3), "int32"))
    for value, op in ((gathered, "gather_elements"), (scattered, "scatter_elements")):
        assert "need 7 dimensions after merging" in (device_reason(value.producer) or ""), op
    assert device_reason(merged.producer) is None
    assert device_reason(seven.producer) is None
    assert device_reason(symbolic.producer) is None
