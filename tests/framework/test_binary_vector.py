"""The eager binary kernel's vector variant (``elementwise_binary.comp`` with ``VEC`` 4).

Where the planner picks it, it must give the scalar variant's bits for every element type
and every operator, comparisons included: odd sizes (tails of 1-3 elements), scalar and row
broadcasts, views at offsets that are not multiples of the pool's 64 bytes, and outputs whose
neighbouring bytes must stay untouched. Where the layout does not allow it, the planner must
pick the scalar variant. Results are also compared with a numpy reference (float64 for the
floats); outputs start poisoned.
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from test_elementwise import SENTINEL, assert_matches, poisoned, sample, stored

import vkumd
from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES, ELEMENTWISE_OPS, INTEGER_OPS
from vkumd.compiler.kernels.elementwise_plan import binary_plan
from vkumd.framework import ops
from vkumd.framework.execute.arena import view

DTYPES = ["float32", "float16", "bfloat16", "int32"]
BITWISE = {"and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}
COMPARE = {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
           "eq": np.equal, "ne": np.not_equal}
# (a shape, b shape): flat sizes with tails of 1, 3, 0 and 3 (ndim 0), one-element
# broadcasts on either side (ndim 1), rows of 12 and 8 with row, column and outer broadcasts
# (ndim 2), and one where both sides broadcast.
SHAPES = [((1,), (1,)), ((3,), (3,)), ((4,), (4,)), ((4099,), (4099,)), ((4099,), ()),
          ((), (13,)), ((5, 12), (12,)), ((5, 12), (5, 1)), ((5, 1), (1, 8)), ((7, 4), (7, 4))]


def operands(rng: np.random.Generator, op: str, dtype: str, shape: tuple[int, ...],
             divisor: bool) -> np.ndarray:
    """Fresh values for ``op``: small integers for comparisons (so that equal pairs occur),
    with a NaN or two among the floats; away from zero for a divisor."""
    if op in COMPARE:
        values = rng.integers(-3, 4, shape).astype(np.float64)
        if dtype != "int32" and values.size > 2:
            values.flat[rng.integers(0, values.size, 2)] = np.nan
        return stored(values, dtype) if dtype != "int32" else values.astype(np.int32)
    if op == "pow":  # positive float bases; int32 powers that stay small
        if dtype == "int32":
            return rng.integers(0 if divisor else -9, 6 if divisor else 10, shape).astype(np.int32)
        return stored(rng.uniform(-3.0, 3.0, shape) if divisor else rng.uniform(0.5, 2.0, shape),
                      dtype)
    return sample(rng, dtype, shape, away_from_zero=divisor)


def expected(op: str, dtype: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """numpy's result: float64 then one rounding for the floats (the rounded divisions from
    the float32 quotient, as the kernel documents); int32 wrapping and rounding as numpy."""
    if op in COMPARE:
        return COMPARE[op](a, b).astype(np.float32 if dtype != "int32" else np.int32)
    with np.errstate(over="ignore"):
        if dtype == "int32":
            if op == "div_floor":
                return np.floor_divide(a, b)
            if op == "div_trunc":
                return (np.abs(a) // np.abs(b) * np.sign(a) * np.sign(b)).astype(np.int32)
            if op == "pow":
                return np.power(a, b)
            if op in ("max", "min"):
                return (np.maximum if op == "max" else np.minimum)(a, b)
            if op in BITWISE:
                return BITWISE[op](a, b)
            if op in ("shl", "shr"):  # counts outside [0, 32): 0, or -1 shifting right a < 0
                wide, inside = a.astype(np.int64), (b >= 0) & (b < 32)
                count = np.where(inside, b, 0)
                if op == "shr":
                    return np.where(inside, wide >> count, np.where(wide < 0, -1, 0))
                return (np.where(inside, wide << count, 0) & 0xFFFFFFFF).astype(
                    np.uint32).view(np.int32)
            if op in ("remainder", "fmod"):
                return (np.mod if op == "remainder" else np.fmod)(a, b)
            return {"add": np.add, "sub": np.subtract, "mul": np.multiply}[op](a, b)
        if op in ("div_floor", "div_trunc"):
            quotient = a.astype(np.float32) / b.astype(np.float32)
            rounded = np.floor(quotient) if op == "div_floor" else np.trunc(quotient)
            return stored(rounded.astype(np.float64), dtype)
        fn = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
              "remainder": np.mod, "fmod": np.fmod, "pow": np.power}[op]
        return fn(a.astype(np.float64), b.astype(np.float64))


def both(ctx, op: str, a: vkumd.Tensor, b: vkumd.Tensor, out_shape: tuple[int, ...]
         ) -> tuple[np.ndarray, np.ndarray]:
    """(scalar, vector) results of the kernel, each into a freshly poisoned output; the
    vector plan must really be the vector variant."""
    results = []
    code = ELEMENTWISE_CODES[a.dtype.name]
    for vector in (False, True):
        out = poisoned(ctx, out_shape, a.dtype.name)
        chosen = binary_plan(ctx.caps, op, code, a.shape, b.shape, out_shape, vector)
        assert chosen.program.variant["VEC"] == (4 if vector else 1)
        ctx.run(chosen, (a, b, out))
        results.append(out.numpy())
    return results[0], results[1]


def assert_same_bits(scalar: np.ndarray, vector: np.ndarray) -> None:
    bits = f"u{vector.dtype.itemsize}"
    assert scalar.dtype == vector.dtype and scalar.shape == vector.shape
    differ = np.flatnonzero(scalar.view(bits) != vector.view(bits))
    assert differ.size == 0, f"{differ.size} elements differ, first at {differ[0]}"


def _cases() -> list[tuple[str, str]]:
    return [(op, dtype) for dtype in DTYPES for op in ELEMENTWISE_OPS
            if not (dtype == "int32" and op == "div")
            and (dtype == "int32" or op not in INTEGER_OPS)]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize(("op", "dtype"), _cases(), ids=str)
def test_vector_variant_gives_the_scalar_bits(ctx, op: str, dtype: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((op, dtype, shapes)).encode()))
    a = operands(rng, op, dtype, shapes[0], divisor=False)
    b = operands(rng, op, dtype, shapes[1], divisor=op.startswith("div") or "mod" in op
                 or op in ("remainder", "pow"))
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    scalar, vector = both(ctx, op, ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype),
                          out_shape)
    assert_same_bits(scalar, vector)
    assert_matches(vector, expected(op, dtype, a, b), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_views_at_offsets_off_the_pool_alignment(ctx, dtype: str) -> None:
    """Through ``ops.sub``: operands and ``out=`` are views 16 and 48 bytes into larger
    tensors (legal bindings: lavapipe's minStorageBufferOffsetAlignment is 16); the bytes
    around the output view keep their poison, so neither the vector stores nor the tail
    write past it."""
    align = ctx.caps.min_storage_buffer_offset_alignment
    if 16 % align:
        pytest.skip(f"views 16 bytes in are not bindable here (alignment {align})")
    rng = np.random.default_rng()
    n, item = 4099, 4 if dtype in ("float32", "int32") else 2
    a, b = sample(rng, dtype, (n,)), sample(rng, dtype, (n,))
    base_a = ctx.tensor(np.zeros(n + 64 // item, np.float32), dtype=dtype)
    base_b = ctx.tensor(np.zeros(n + 64 // item, np.float32), dtype=dtype)
    va, vb = view(base_a, (n,), offset=16), view(base_b, (n,), offset=48)
    va.write(a)
    vb.write(b)
    lead = 48 // item
    out_base = poisoned(ctx, (n + 2 * lead,), dtype)
    out = view(out_base, (n,), offset=48)
    assert binary_plan(ctx.caps, "sub", ELEMENTWISE_CODES[dtype], (n,), (n,),
                       (n,)).program.variant["VEC"] == 4
    assert ops.sub(va, vb, out=out) is out
    got = out.numpy()  # waits for the work on the view; the base's own read would not
    around = out_base.numpy()
    poison = SENTINEL if dtype == "int32" else np.nan
    np.testing.assert_array_equal(around[:lead], np.full(lead, poison))
    np.testing.assert_array_equal(around[lead + n:], np.full(lead, poison))
    np.testing.assert_array_equal(around[lead:lead + n], got)
    with np.errstate(over="ignore"):
        want = a - b if dtype == "int32" else a.astype(np.float64) - b
    assert_matches(got, want, dtype)
    scalar, _ = both(ctx, "sub", va, vb, (n,))
    assert_same_bits(scalar, got)


@pytest.mark.parametrize(("shapes", "expected_variant"), [
    (((4099,), (4099,)), (4, 0)), (((4099,), ()), (4, 2)), (((), (13,)), (4, 1)),
    (((5, 12), (12,)), (4, 0)), (((5, 12), (5, 1)), (4, 2)), (((5, 1), (1, 8)), (4, 1)),
    (((5, 7), (7,)), (1, 0)), (((5, 6), (5, 1)), (1, 0)), (((3, 1, 5), (4, 1)), (1, 0)),
    (((2, 3, 8), (2, 1, 8)), (1, 0)),
], ids=str)
def test_the_planner_picks_the_vector_variant_only_where_valid(ctx, shapes,
                                                                expected_variant) -> None:
    out_shape = np.broadcast_shapes(*shapes)
    variant = binary_plan(ctx.caps, "add", "F32", *shapes, out_shape).program.variant
    assert (variant["VEC"], variant["BCAST"]) == expected_variant


@pytest.mark.parametrize(("alignment", "code", "vector"), [
    (4, "F32", False), (8, "F16", True), (8, "I32", False), (16, "I32", True),
    (16, "BF16", True), (64, "F32", True),
])
def test_binding_alignment_decides(ctx, alignment: int, code: str, vector: bool) -> None:
    """A device whose bindings may start at fewer bytes than four elements gets the scalar
    variant: the vector index counts from the binding's start."""
    caps = dataclasses.replace(ctx.caps, min_storage_buffer_offset_alignment=alignment)
    plan = binary_plan(caps, "mul", code, (4099,), (4099,), (4099,))
    assert plan.program.variant["VEC"] == (4 if vector else 1)


def test_a_number_operand_runs_the_broadcast_vector_variant(ctx) -> None:
    """``x - 0.75`` goes through a one-element tensor: the broadcast (ndim 1) vector path."""
    rng = np.random.default_rng()
    x = sample(rng, "float32", (4099,))
    out = poisoned(ctx, (4099,), "float32")
    assert ops.sub(ctx.tensor(x), 0.75, out=out) is out
    assert binary_plan(ctx.caps, "sub", "F32", (4099,), (), (4099,)).program.variant[
        "BCAST"] == 2
    assert_matches(out.numpy(), x.astype(np.float64) - 0.75, "float32")
