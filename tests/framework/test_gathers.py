"""``ops.gather_elements``, ``ops.gather_nd`` and ``ops.trilu`` against float64 references
written here as plain loops (and the records' references against those): every dtype they
move, odd shapes, every axis, negative and out-of-range indices (zeros, never a read outside
data), stored bits kept, poisoned outputs, a compiled graph and bad inputs (the ONNX nodes:
tests/frontends/test_onnx_index.py)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from transformer_checks import assert_each_raises, sample, tensor

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import OPS
from vkumd.testing.numerics import poisoned, rel_error

DTYPES = ["float32", "float16", "bfloat16", "int32"]


def _data(ctx, rng: np.random.Generator, dtype: str, shape: tuple[int, ...]):
    """A tensor of ``dtype`` and the float64 values it holds."""
    if dtype == "int32":
        values = rng.integers(-1000, 1000, shape).astype(np.float64)
        return ctx.tensor(values.astype(np.int32)), values
    values = sample(rng, dtype, shape)
    return tensor(ctx, values, dtype), values


def _index(i: int, size: int) -> int | None:
    """A kernel's reading of index ``i`` into ``size``: counted from the end when negative,
    None when still out of range."""
    i = i + size if i < 0 else i
    return i if 0 <= i < size else None


def gather_elements_loop(data: np.ndarray, ids: np.ndarray, axis: int) -> np.ndarray:
    out = np.zeros(ids.shape)
    for p in itertools.product(*map(range, ids.shape)):
        i = _index(int(ids[p]), data.shape[axis])
        if i is not None:
            out[p] = data[p[:axis] + (i,) + p[axis + 1:]]
    return out


def _assert_equal(got, want: np.ndarray, dtype: str) -> None:
    """Moves are exact: the stored values, bit for bit up to float64."""
    values = got.numpy().astype(np.float64)
    assert values.shape == want.shape
    assert rel_error(values, want) == 0.0, dtype


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,axis,index_shape", [
    ((7,), 0, (11,)),
    ((3, 5), 1, (3, 9)),
    ((3, 5), -2, (2, 4)),
    ((4, 3, 33), 0, (6, 2, 17)),
    ((4, 3, 33), 2, (4, 3, 70)),
    ((2, 3, 1, 5, 2, 3, 2), 3, (2, 3, 1, 8, 2, 3, 2)),  # 7-d: merges to 3 dimensions
])
def test_gather_elements(ctx, dtype: str, shape, axis: int, index_shape) -> None:
    rng = np.random.default_rng()
    data, values = _data(ctx, rng, dtype, shape)
    size = shape[axis]
    ids = rng.integers(-size - 3, size + 3, index_shape).astype(np.int32)
    out = poisoned(ctx, index_shape, dtype)
    got = ops.gather_elements(data, ctx.tensor(ids), axis=axis, out=out)
    assert got is out
    want = gather_elements_loop(values, ids, axis % len(shape))
    _assert_equal(got, want, dtype)
    record = OPS["gather_elements"].reference([values, ids.astype(np.float64)],
                                              {"axis": axis}, [index_shape])[0]
    np.testing.assert_array_equal(record, want)


def test_gather_elements_keeps_bits(ctx) -> None:
    """NaN payloads and -0.0 come back unchanged (a copy of bits, not of values)."""
    bits = np.array([0x7FC00001, 0x80000000, 0xFF800000, 0x3F800000], np.uint32)
    data = ctx.tensor(bits.view(np.float32).reshape(1, 4))
    got = ops.gather_elements(data, ctx.tensor(np.array([[3, 2, 1, 0, -4]], np.int32)), axis=1)
    np.testing.assert_array_equal(got.numpy().view(np.uint32), bits[[3, 2, 1, 0, 0]][None])


def test_gather_elements_empty_axis_gives_zeros(ctx) -> None:
    got = ops.gather_elements(ctx.tensor(np.ones((3, 0), np.float32)),
                              ctx.tensor(np.zeros((2, 4), np.int32)), axis=1)
    np.testing.assert_array_equal(got.numpy(), np.zeros((2, 4)))
    assert ops.gather_elements(ctx.tensor(np.ones((3, 2), np.float32)),
                               ctx.tensor(np.zeros((0, 2), np.int32))).shape == (0, 2)


def gather_nd_loop(data: np.ndarray, ids: np.ndarray, batch: int) -> np.ndarray:
    depth = ids.shape[-1]
    out = np.zeros(ids.shape[:-1] + data.shape[batch + depth:])
    for p in itertools.product(*map(range, ids.shape[:-1])):
        where = [_index(int(ids[p + (j,)]), data.shape[batch + j]) for j in range(depth)]
        if None not in where:
            out[p] = data[p[:batch] + tuple(where)]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,index_shape,batch", [
    ((5,), (3, 1), 0),
    ((4, 7), (5, 2), 0),
    ((4, 7, 3), (2, 3, 1), 0),
    ((3, 4, 5, 6), (3, 7, 2), 1),
    ((2, 3, 5, 7), (2, 3, 4, 2), 2),
    ((2, 3, 5, 7), (2, 9, 0), 1),  # empty tuples: whole slices
])
def test_gather_nd(ctx, dtype: str, shape, index_shape, batch: int) -> None:
    rng = np.random.default_rng()
    data, values = _data(ctx, rng, dtype, shape)
    depth = index_shape[-1]
    ids = np.zeros(index_shape, np.int32)
    for j, n in enumerate(shape[batch:batch + depth]):
        ids[..., j] = rng.integers(-n - 2, n + 2, index_shape[:-1])
    want = gather_nd_loop(values, ids, batch)
    out = poisoned(ctx, want.shape, dtype)
    got = ops.gather_nd(data, ctx.tensor(ids), batch_dims=batch, out=out)
    assert got is out
    _assert_equal(got, want, dtype)
    record = OPS["gather_nd"].reference([values, ids.astype(np.float64)],
                                        {"batch_dims": batch}, [want.shape])[0]
    np.testing.assert_array_equal(record, want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1), (4, 5), (7, 3), (2, 3, 9, 33), (5, 0, 4)], ids=str)
def test_trilu(ctx, dtype: str, shape) -> None:
    rng = np.random.default_rng()
    x, values = _data(ctx, rng, dtype, shape)
    for k, upper in itertools.product((-40, -3, -1, 0, 1, 2, 40, 2**40), (True, False)):
        out = poisoned(ctx, shape, dtype)
        got = ops.trilu(x, k=k, upper=upper, out=out)
        assert got is out
        want = (np.triu if upper else np.tril)(values, k)
        _assert_equal(got, want, f"{dtype} k={k} upper={upper}")
        np.testing.assert_array_equal(
            OPS["trilu"].reference([values], {"k": k, "upper": upper}, [shape])[0], want)


def test_compiled_graph(ctx) -> None:
    """A gather then the lower triangle of it, compiled (symbolic rows), against the loops."""
    rng = np.random.default_rng()

    def fn(data, ids):
        return ops.trilu(ops.gather_elements(data, ids, axis=1), k=-1, upper=False)

    example = {"data": np.ones((3, 9), np.float32), "ids": np.zeros((3, 5), np.int32)}
    compiled = vkumd.compile(fn, example, ctx=ctx,
                             dynamic={"data": {0: "n"}, "ids": {0: "n"}})
    for rows in (3, 6):
        data = rng.standard_normal((rows, 9)).astype(np.float32)
        ids = rng.integers(-9, 9, (rows, 5)).astype(np.int32)
        want = np.tril(gather_elements_loop(data.astype(np.float64), ids, 1), -1)
        np.testing.assert_array_equal(compiled(data=data, ids=ids).numpy(), want)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((3, 4), np.float32))
    ids = ctx.tensor(np.zeros((3, 4), np.int32))
    ge, gnd = ops.gather_elements, ops.gather_nd
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ge(x, ctx.tensor(np.zeros((3, 4), np.float32)))),
        (VkumdTypeError, lambda: ge(ctx.tensor(np.ones((3, 4), np.uint8)), ids)),
        (VkumdValueError, lambda: ge(x, ctx.tensor(np.zeros((3,), np.int32)))),
        (VkumdValueError, lambda: ge(x, ids, axis=2)),
        (VkumdTypeError, lambda: ge(x, ids, axis=1.0)),
        (VkumdValueError, lambda: ge(x, ctx.tensor(np.zeros((4, 4), np.int32)), axis=1)),
        (VkumdValueError, lambda: ge(ctx.tensor(np.ones((3,) * 7, np.float32)),
                                     ctx.tensor(np.zeros((2,) * 7, np.int32)))),
        (VkumdTypeError, lambda: ge(x, ids, out=ctx.empty((3, 4), "float16"))),
        (VkumdValueError, lambda: ge(x, ids, out=ctx.empty((4, 3), "float32"))),
        (VkumdTypeError, lambda: gnd(x, ctx.tensor(np.zeros((2, 1), np.float32)))),
        (VkumdValueError, lambda: gnd(x, ctx.tensor(np.zeros((2, 3), np.int32)))),
        (VkumdValueError, lambda: gnd(x, ctx.tensor(np.zeros((3, 1), np.int32)),
                                      batch_dims=2)),
        (VkumdValueError, lambda: gnd(x, ctx.tensor(np.zeros((2, 1), np.int32)),
                                      batch_dims=1)),
        (VkumdTypeError, lambda: gnd(x, ids[:, :1], batch_dims=True)),
        (VkumdValueError, lambda: gnd(ctx.tensor(np.ones((2,) * 8, np.float32)),
                                      ctx.tensor(np.zeros((1, 7), np.int32)))),
        (VkumdValueError, lambda: ops.trilu(ctx.tensor(np.ones((3,), np.float32)))),
        (VkumdTypeError, lambda: ops.trilu(x, k=1.5)),
        (VkumdTypeError, lambda: ops.trilu(x, upper=1)),
        (VkumdTypeError, lambda: ops.trilu(ctx.tensor(np.ones((2, 2), np.int8)))),
    ])
