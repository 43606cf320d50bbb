"""The vector variants (``VEC`` 4) of the unary (convert, scale, window copy) and fill kernels.

As tests/framework/test_binary_vector.py: where the planner picks them they must give the
scalar variant's bits (every source and destination type, odd sizes, broadcasts, copies into
slices), match numpy, and leave the bytes around the output untouched; outputs start
poisoned.
"""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from test_binary_vector import assert_same_bits
from test_elementwise import SENTINEL, assert_matches, cast_source, poisoned, sample, stored

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.elementwise_plan import fill_plan, unary_plan, window_copy_plan
from vkumd.framework import dtypes, ops
from vkumd.framework.execute.arena import view

DTYPES = ["float32", "float16", "bfloat16", "int32"]
# (source shape, output shape): flat with tails of 1, 3, 0 and 3 (ndim 0), a one-element
# source (ndim 1), rows of 12 and 8 broadcast down or across (ndim 2).
SHAPES = [((1,), (1,)), ((3,), (3,)), ((4,), (4,)), ((4099,), (4099,)), ((), (13,)),
          ((12,), (5, 12)), ((5, 1), (5, 8))]


def run_unary(ctx, kind: str, src, dst: str, out_shape, alpha_bits: int, vector: bool
              ) -> np.ndarray:
    out = poisoned(ctx, out_shape, dst)
    codes = ELEMENTWISE_CODES
    plan = unary_plan(ctx.caps, kind, codes[src.dtype.name], codes[dst], src.shape, out_shape,
                      alpha_bits, vector)
    assert plan.program.variant["VEC"] == (4 if vector else 1)
    ctx.run(plan, (src, out))
    return out.numpy()


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dst", DTYPES)
@pytest.mark.parametrize("src", DTYPES)
def test_convert_vector_gives_the_scalar_bits(ctx, src: str, dst: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((src, dst, shapes)).encode()))
    host = cast_source(rng, src, dst, shapes[0])
    t = ctx.tensor(host, dtype=src)
    scalar, vector = (run_unary(ctx, "convert", t, dst, shapes[1], 0, v) for v in (False, True))
    assert_same_bits(scalar, vector)
    if src == dst:
        want = np.broadcast_to(t.numpy(), shapes[1])
        np.testing.assert_array_equal(vector, want)
        return
    value = host.astype(np.float32) if dst == "bfloat16" else host
    with np.errstate(invalid="ignore"):
        want = stored(np.trunc(value) if dst == "int32" else value, dst)
    np.testing.assert_array_equal(vector, np.broadcast_to(want, shapes[1]))


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES)
def test_scale_vector_gives_the_scalar_bits(ctx, dtype: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shapes)).encode()))
    host = sample(rng, dtype, shapes[0])
    alpha = -3 if dtype == "int32" else -1.375
    bits = alpha if dtype == "int32" else int(np.float32(alpha).view(np.uint32))
    t = ctx.tensor(host, dtype=dtype)
    scalar, vector = (run_unary(ctx, "scale", t, dtype, shapes[1], bits & 0xFFFFFFFF, v)
                      for v in (False, True))
    assert_same_bits(scalar, vector)
    with np.errstate(over="ignore"):
        want = host * np.int32(alpha) if dtype == "int32" else host.astype(np.float64) * alpha
    assert_matches(vector, np.broadcast_to(want, shapes[1]), dtype)


def test_the_planner_picks_the_vector_variant_only_where_valid(ctx) -> None:
    def variant(src_shape, out_shape):
        chosen = unary_plan(ctx.caps, "convert", "F32", "F16", src_shape, out_shape)
        return chosen.program.variant["VEC"], chosen.program.variant["BCAST"]
    assert variant((4099,), (4099,)) == (4, 0)
    assert variant((), (9,)) == (4, 1)
    assert variant((5, 1), (5, 8)) == (4, 1)
    assert variant((7,), (5, 7)) == (1, 0)  # rows of 7: vectors would straddle two rows
    assert variant((3, 1, 5), (3, 4, 5)) == (1, 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_concatenation_copies_vectors_into_the_slice(ctx, dtype: str) -> None:
    """Writing an (8, 6) block into rows 4-11 of a (13, 6) tensor starts 24 elements in: a
    flat vector copy whose neighbours keep their poison. Rows 3-9 (18 elements in) are not
    on a vector boundary and stay scalar; both give the same bits."""
    rng = np.random.default_rng()
    code = ELEMENTWISE_CODES[dtype]
    block = sample(rng, dtype, (8, 6))
    src = ctx.tensor(block, dtype=dtype)
    for start, vector in ((4, True), (3, False)):
        dst = poisoned(ctx, (13, 6), dtype)
        plan = window_copy_plan(ctx.caps, code, code, (8, 6), (8, 6), (0, 0), (13, 6),
                                (start, 0))
        assert plan.program.variant["VEC"] == (4 if vector else 1)
        ctx.run(plan, (src, dst))
        got = dst.numpy()
        np.testing.assert_array_equal(got[start:start + 8], block)
        poison = SENTINEL if dtype == "int32" else np.nan
        rest = np.concatenate([got[:start], got[start + 8:]])
        np.testing.assert_array_equal(rest, np.full(rest.shape, poison, rest.dtype))


@pytest.mark.parametrize("count", [1, 3, 4, 4099])
@pytest.mark.parametrize("dtype", DTYPES)
def test_fill_vector_writes_exactly_its_elements(ctx, dtype: str, count: int) -> None:
    """A fill into a view 16 bytes into a poisoned tensor: the vector and scalar variants set
    exactly ``count`` elements to the value's bits and nothing around them."""
    if 16 % ctx.caps.min_storage_buffer_offset_alignment:
        pytest.skip("views 16 bytes in are not bindable here")
    item = dtypes.dtype(dtype).itemsize
    value = {"float32": -2.5, "float16": 0.1, "bfloat16": 3.0, "int32": -7}[dtype]
    want = stored(np.full(count, value), dtype)
    bits = int(np.asarray(want[:1]).view(f"u{item}")[0]) if dtype != "bfloat16" else int(
        dtypes.float32_to_bfloat16_bits(np.float32([value]))[0])
    lead = 16 // item
    results = []
    for vector in (False, True):
        base = poisoned(ctx, (count + 2 * lead,), dtype)
        out = view(base, (count,), offset=16)
        plan = fill_plan(ctx.caps, 8 * item, count, bits, vector)
        assert plan.program.variant["VEC"] == (4 if vector else 1)
        ctx.run(plan, (out,))
        got = out.numpy()
        around = base.numpy()
        poison = SENTINEL if dtype == "int32" else np.nan
        np.testing.assert_array_equal(around[:lead], np.full(lead, poison, around.dtype))
        np.testing.assert_array_equal(around[lead + count:], np.full(lead, poison, around.dtype))
        np.testing.assert_array_equal(got, want)
        results.append(got)
    assert_same_bits(*results)


def test_cast_and_fill_through_the_ops(ctx) -> None:
    """``ops.cast`` and ``ops.fill`` take the vector plans (memoised like binary's)."""
    rng = np.random.default_rng()
    host = sample(rng, "float32", (4099,))
    got = ops.cast(ctx.tensor(host), "float16").numpy()
    np.testing.assert_array_equal(got, host.astype(np.float16))
    t = poisoned(ctx, (4099,), "float32")
    ops.fill(t, 1.25)
    np.testing.assert_array_equal(t.numpy(), np.full(4099, 1.25, np.float32))
