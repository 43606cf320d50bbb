"""The bitwise ops (and, or, xor, left and right shifts) of int32, int8 and uint8 tensors
against numpy computed in int64: broadcasts, odd sizes (scalar and vector variants), numbers
beside int32, shift counts past the width, a compiled graph, and bad inputs. Outputs start
poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_each_raises

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphBuilder

TYPES = ["int32", "int8", "uint8"]
PAIRS = [((7,), (7,)), ((4099,), (4099,)), ((5, 12), (12,)), ((3, 1, 9), (4, 1)), ((13,), ())]
WIDE = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or,
        "bitwise_xor": np.bitwise_xor}


def _needs(ctx, dtype: str) -> None:
    if dtype != "int32" and not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")


def _poisoned(ctx, shape: tuple[int, ...], dtype: str) -> vkumd.Tensor:
    return ctx.tensor(np.full(shape, 0x5B, dtype))  # an unwritten element shows


def _values(rng: np.random.Generator, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, endpoint=True).astype(dtype)


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", list(WIDE))
def test_logic_matches_numpy(ctx, op: str, dtype: str, shapes) -> None:
    _needs(ctx, dtype)
    rng = np.random.default_rng()
    a, b = _values(rng, dtype, shapes[0]), _values(rng, dtype, shapes[1])
    out = _poisoned(ctx, np.broadcast_shapes(a.shape, b.shape), dtype)
    getattr(ops, op)(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), WIDE[op](a, b))


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("dtype", TYPES)
def test_shifts_match_numpy(ctx, dtype: str, shapes) -> None:
    """Counts within the type's width, as numpy shifts (a left shift wraps to the type)."""
    _needs(ctx, dtype)
    rng = np.random.default_rng()
    a = _values(rng, dtype, shapes[0])
    b = rng.integers(0, 8 * np.dtype(dtype).itemsize, shapes[1]).astype(dtype)
    shape = np.broadcast_shapes(a.shape, b.shape)
    left, right = _poisoned(ctx, shape, dtype), _poisoned(ctx, shape, dtype)
    ops.bitwise_left_shift(ctx.tensor(a), ctx.tensor(b), out=left)
    ops.bitwise_right_shift(ctx.tensor(a), ctx.tensor(b), out=right)
    wide_a, wide_b = a.astype(np.int64), b.astype(np.int64)
    np.testing.assert_array_equal(left.numpy(), np.left_shift(wide_a, wide_b).astype(dtype))
    np.testing.assert_array_equal(right.numpy(), np.right_shift(wide_a, wide_b).astype(dtype))


def test_counts_past_the_width_and_numbers(ctx) -> None:
    a = ctx.tensor(np.array([5, -6, 1, -1, 9], np.int32))
    counts = ctx.tensor(np.array([32, 40, -1, 33, 31], np.int32))
    np.testing.assert_array_equal(ops.bitwise_left_shift(a, counts).numpy(), [0, 0, 0, 0, -2**31])
    np.testing.assert_array_equal(ops.bitwise_right_shift(a, counts).numpy(), [0, -1, 0, -1, 0])
    values = np.array([5, -6, 1, -1, 9])
    np.testing.assert_array_equal(ops.bitwise_and(a, 6).numpy(), values & 6)
    np.testing.assert_array_equal(ops.bitwise_xor(-1, a).numpy(), ~values)


def test_runs_in_a_compiled_graph(ctx) -> None:
    compiled = vkumd.compile(lambda x, y, z: ops.bitwise_or(ops.bitwise_and(x, y), z),
                             {"x": np.ones((4, 9), np.int32), "y": np.ones(9, np.int32),
                              "z": np.ones((), np.int32)},
                             ctx=ctx, dynamic={"x": {0: "n"}})
    rng = np.random.default_rng()
    for rows in (4, 7):
        x, y = _values(rng, "int32", (rows, 9)), _values(rng, "int32", (9,))
        z = _values(rng, "int32", ())
        np.testing.assert_array_equal(compiled(x=x, y=y, z=z).numpy(), (x & y) | z)


def test_bad_inputs(ctx) -> None:
    f = ctx.tensor(np.ones((2, 3), np.float32))
    i = ctx.tensor(np.ones((2, 3), np.int32))
    b = GraphBuilder("bad")
    x = b.input("x", (2, 3))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.bitwise_and(f, f)),
        (VkumdTypeError, lambda: ops.bitwise_or(i, f)),
        (VkumdValueError, lambda: ops.bitwise_left_shift(i, 1.5)),
        (VkumdTypeError, lambda: ops.bitwise_xor(2, 3)),
        (VkumdTypeError, lambda: b.op("bitwise_xor", x, x)),
    ])
