"""embedding, transpose and permute: bit-exact against numpy, out-of-range ids, bad input.

Outputs start poisoned (NaN, or a sentinel for int32).
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_each_raises, poisoned

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

DTYPES = ["float32", "float16", "bfloat16", "int32"]


def random_tensor(ctx, rng: np.random.Generator, shape: tuple[int, ...], dtype: str):
    """A tensor of ``dtype`` and the values it holds (as numpy returns them)."""
    if dtype == "int32":
        values = rng.integers(-2**31, 2**31, size=shape, dtype=np.int64).astype(np.int32)
        t = ctx.tensor(values)
    else:
        t = ctx.tensor(rng.standard_normal(shape).astype(np.float32), dtype=dtype)
    return t, t.numpy()


@pytest.mark.parametrize(("ids_shape", "vocab", "dim"),
                         [((), 5, 3), ((7,), 11, 8), ((2, 3), 50, 13), ((4, 1, 5), 9, 64),
                          ((70000,), 3, 1)], ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_embedding(ctx, dtype: str, ids_shape: tuple[int, ...], vocab: int, dim: int) -> None:
    rng = np.random.default_rng()
    table, host = random_tensor(ctx, rng, (vocab, dim), dtype)
    ids = rng.integers(0, vocab, size=ids_shape).astype(np.int32)
    out = poisoned(ctx, ids_shape + (dim,), dtype)
    got = ops.embedding(ctx.tensor(ids), table, out=out).numpy()
    np.testing.assert_array_equal(got, host[ids])


@pytest.mark.parametrize("dim", [6, 8])
def test_embedding_out_of_range_ids_give_zero_rows(ctx, dim: int) -> None:
    rng = np.random.default_rng()
    table, host = random_tensor(ctx, rng, (4, dim), "float32")
    ids = np.array([[0, -1, 3], [4, 2, 2**31 - 1]], np.int32)
    got = ops.embedding(ctx.tensor(ids), table, out=poisoned(ctx, (2, 3, dim), "float32"))
    expected = np.where(((ids >= 0) & (ids < 4))[..., None], host[np.clip(ids, 0, 3)], 0.0)
    np.testing.assert_array_equal(got.numpy(), expected)
    empty_table = ctx.empty((0, dim))
    np.testing.assert_array_equal(ops.embedding(ctx.tensor(ids), empty_table).numpy(), 0.0)


PERMUTES = [((5,), (0,)), ((3, 7), (1, 0)), ((2, 3, 4), (2, 0, 1)), ((2, 3, 4), (0, 2, 1)),
            ((1, 5, 1, 3), (3, 2, 1, 0)), ((2, 3, 1, 4, 5, 3), (5, 1, 0, 4, 3, 2)),
            ((2, 1, 2, 1, 2, 1, 2, 1), (7, 6, 5, 4, 3, 2, 1, 0)), ((4, 6), (-1, -2)),
            # Rows of whole runs of four (moved four elements a load): a head permute, rows of
            # four and of 4098 units (two chunks), and rows of six (one element a load).
            ((8, 5, 3, 32), (0, 2, 1, 3)), ((3, 5, 4), (1, 0, 2)), ((2, 3, 16392), (1, 0, 2)),
            ((2, 3, 6), (1, 0, 2)),
            # More rows than a CPU driver's workgroups, so each walks a block of them.
            ((7, 9, 11, 4), (2, 0, 1, 3)), ((3, 50, 7, 2), (1, 3, 0, 2))]


@pytest.mark.parametrize(("shape", "dims"), PERMUTES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_permute(ctx, dtype: str, shape: tuple[int, ...], dims: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    t, host = random_tensor(ctx, rng, shape, dtype)
    expected = np.transpose(host, dims)
    got = ops.permute(t, dims, out=poisoned(ctx, expected.shape, dtype)).numpy()
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize(("shape", "d0", "d1"),
                         [((3, 7), 0, 1), ((2, 3, 4, 5), 1, 3), ((2, 3, 4), -1, 0),
                          ((4, 4), 1, 1), ((128, 130), 0, 1), ((3, 9001), 0, 1),
                          ((9001, 3), 1, 0), ((2, 1, 9001), 0, 1)], ids=str)
def test_transpose(ctx, shape: tuple[int, ...], d0: int, d1: int) -> None:
    rng = np.random.default_rng()
    t, host = random_tensor(ctx, rng, shape, "float16")
    expected = np.swapaxes(host, d0, d1)
    got = ops.transpose(t, d0, d1, out=poisoned(ctx, expected.shape, "float16")).numpy()
    np.testing.assert_array_equal(got, expected)


def test_empty(ctx) -> None:
    assert ops.permute(ctx.empty((0, 3)), (1, 0)).shape == (3, 0)
    assert ops.embedding(ctx.tensor(np.zeros((0,), np.int32)), ctx.empty((4, 2))).shape == (0, 2)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 4), np.float32))
    table = ctx.tensor(np.ones((5, 4), np.float32))
    ids = ctx.tensor(np.zeros(3, np.int32))
    seven = ctx.tensor(np.ones((2,) * 7, np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.embedding(ctx.tensor(np.zeros(3, np.float32)), table)),
        (VkumdTypeError, lambda: ops.embedding(np.zeros(3, np.int32), table)),
        (VkumdValueError, lambda: ops.embedding(ids, ctx.tensor(np.ones(5, np.float32)))),
        (VkumdTypeError, lambda: ops.embedding(ids, ctx.tensor(np.ones((5, 4), np.int8)))),
        (VkumdValueError, lambda: ops.embedding(ids, table, out=ctx.empty((3, 5)))),
        (VkumdTypeError, lambda: ops.embedding(ids, table, out=ctx.empty((3, 4), "float16"))),
        (VkumdValueError, lambda: ops.permute(x, (0, 1))),
        (VkumdValueError, lambda: ops.permute(x, (0, 1, 1))),
        (VkumdValueError, lambda: ops.permute(x, (0, 1, 3))),
        (VkumdTypeError, lambda: ops.permute(x, (0, 1, 2.0))),
        (VkumdTypeError, lambda: ops.permute(x, "012")),
        (VkumdValueError, lambda: ops.permute(x, (2, 1, 0), out=ctx.empty((2, 3, 4)))),
        # A view of any order; reading it needs more dimensions than the copy kernels walk.
        (VkumdValueError, lambda: ops.permute(seven, (6, 4, 2, 0, 5, 3, 1)).contiguous()),
        (VkumdValueError, lambda: ops.permute(seven, (6, 4, 2, 0, 5, 3, 1), out=ctx.empty(
            (2,) * 7))),
        (VkumdValueError, lambda: ops.transpose(x, 0, 3)),
        (VkumdTypeError, lambda: ops.transpose(x, 0, None)),
        (VkumdValueError, lambda: ops.transpose(ctx.tensor(np.float32(1)), 0, 0)),
        (VkumdTypeError, lambda: ops.transpose(ctx.tensor(np.ones(3, np.uint8)), 0, 0)),
    ]
    assert_each_raises(ctx, cases)


def test_public_names() -> None:
    for name in ("embedding", "permute", "transpose"):
        assert getattr(vkumd.ops, name) is getattr(ops, name)
