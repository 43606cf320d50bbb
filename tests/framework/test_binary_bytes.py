"""int8 and uint8 in the binary elementwise kernel (8-bit storage): arithmetic wrapping as
numpy's, rounded divisions, remainders, powers, maximum and minimum, comparisons (also as a
uint8 mask), against numpy computed in int64 and wrapped; odd sizes and broadcasts take the
scalar and the vector variants. Outputs start filled with a pattern no result here has."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_each_raises

from vkumd import ops
from vkumd.errors import VkumdTypeError

BYTES = ["int8", "uint8"]
PAIRS = [((7,), (7,)), ((4099,), (4099,)), ((5, 12), (12,)), ((3, 1, 9), (4, 1)), ((13,), ())]
WIDE = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply,
    "div_floor": np.floor_divide,
    "div_trunc": lambda a, b: np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b)),
    "remainder": np.mod, "fmod": np.fmod, "pow": np.power,
    "maximum": np.maximum, "minimum": np.minimum,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
    "eq": np.equal, "ne": np.not_equal,
}
CALLS = {"div_floor": lambda a, b, out: ops.div(a, b, rounding="floor", out=out),
         "div_trunc": lambda a, b, out: ops.div(a, b, rounding="trunc", out=out)}
POISON = 0x5B  # 91 in both types: an unwritten element shows (unless its result is 91)


def _operands(rng: np.random.Generator, op: str, dtype: str, shapes) -> tuple:
    info = np.iinfo(dtype)
    a = rng.integers(info.min, info.max + 1, shapes[0])
    b = rng.integers(info.min, info.max + 1, shapes[1])
    if op == "pow":  # small bases and exponents: 4**4 wraps in int8 already
        a = rng.integers(max(info.min, -5), 6, shapes[0])
        b = rng.integers(0, 5, shapes[1])
    elif op.startswith("div") or op in ("remainder", "fmod"):
        b = np.where(b == 0, 3, b)
    elif op in ("eq", "ne", "le", "ge"):
        b = np.where(rng.random(shapes[1]) < 0.3, np.resize(a, b.shape), b)
    return a.astype(dtype), b.astype(dtype)


def _poisoned(ctx, shape: tuple[int, ...], dtype: str):
    return ctx.tensor(np.full(shape, POISON, dtype))


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("dtype", BYTES)
@pytest.mark.parametrize("op", list(WIDE))
def test_matches_numpy_wrapped(ctx, op: str, dtype: str, shapes) -> None:
    if not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")
    a, b = _operands(np.random.default_rng(), op, dtype, shapes)
    shape = np.broadcast_shapes(a.shape, b.shape)
    out = _poisoned(ctx, shape, dtype)
    call = CALLS.get(op) or (lambda x, y, out: getattr(ops, op)(x, y, out=out))
    call(ctx.tensor(a), ctx.tensor(b), out)
    with np.errstate(all="ignore"):
        want = np.asarray(WIDE[op](a.astype(np.int64), b.astype(np.int64))).astype(np.int64)
    # int64 results wrapped to the 8-bit type, as numpy's own 8-bit arithmetic wraps
    np.testing.assert_array_equal(out.numpy(), want.astype(dtype))


@pytest.mark.parametrize("dtype", BYTES)
def test_comparisons_store_a_uint8_mask(ctx, dtype: str) -> None:
    if not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")
    a, b = _operands(np.random.default_rng(), "le", dtype, ((6, 17), (17,)))
    out = _poisoned(ctx, (6, 17), "uint8")
    ops.le(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), (a <= b).astype(np.uint8))


def test_bad_inputs(ctx) -> None:
    if not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage (vkumd refuses int8/uint8 there)")
    s8 = ctx.tensor(np.ones((2, 3), np.int8))
    u8 = ctx.tensor(np.ones((2, 3), np.uint8))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.add(s8, u8)),
        (VkumdTypeError, lambda: ops.div(s8, s8)),
        (VkumdTypeError, lambda: ops.mul(u8, 2)),
        (VkumdTypeError, lambda: ops.maximum(s8, ctx.tensor(np.ones((2, 3), np.float32)))),
    ])
