"""The generated elementwise kernel's vector variant (four elements per invocation).

Where the planner picks it, it must give the scalar variant's bits: every input type, every
output type, odd sizes (tails of 1-3 elements), scalar and row broadcasts, views at offsets
that are not multiples of the pool's 64 bytes, and outputs whose neighbouring bytes must stay
untouched. Where the layout does not allow it, the planner must pick the scalar variant.
Both are also compared with the float64 reference; outputs start poisoned (NaN).
"""

from __future__ import annotations

import dataclasses
import zlib

import numpy as np
import pytest
from test_fused_elementwise import assert_close, poisoned, reference, stored

import vkumd
from vkumd.compiler.kernels.elementwise_plan import shape_words
from vkumd.compiler.kernels.elementwise_vector import vector_layout
from vkumd.compiler.kernels.fused_elementwise import FUSED_INPUT_CODES, FUSED_OUTPUT_CODES
from vkumd.compiler.kernels.fused_elementwise_plan import fused_elementwise_plan
from vkumd.framework.execute.arena import view
from vkumd.framework.opset.fused import glsl_steps

PROGRAM = (("mul", 0, 1), ("add", 2, ("const", 0.25)), ("silu", 3), ("gelu_tanh", 4),
           ("sub", 5, 1), ("gelu", 6), ("sigmoid", 7), ("div", 8, ("const", 3.0)))


def plan(ctx, tensors: list[vkumd.Tensor], program: tuple, out: vkumd.Tensor, vector: bool):
    return fused_elementwise_plan(ctx.caps, glsl_steps(program),
                                  tuple(FUSED_INPUT_CODES[t.dtype.name] for t in tensors),
                                  FUSED_OUTPUT_CODES[out.dtype.name],
                                  tuple(t.shape for t in tensors), out.shape, vector)


def both(ctx, tensors: list[vkumd.Tensor], program: tuple, out_shape: tuple[int, ...],
         dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """(scalar, vector) results, each into a freshly poisoned output; the vector plan must
    really be the vector variant."""
    results = []
    for vector in (False, True):
        out = poisoned(ctx, out_shape, dtype)
        chosen = plan(ctx, tensors, program, out, vector)
        assert chosen.program.variant["VEC"] == (4 if vector else 1)
        ctx.run(chosen, (*tensors, out))
        results.append(out.numpy())
    return results[0], results[1]


def sample(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    if dtype == "uint8":
        return rng.integers(0, 11, shape).astype(np.uint8)
    if dtype in ("int8", "int32"):
        return rng.integers(-6, 7, shape).astype(dtype)
    return stored(rng.standard_normal(shape) * 2, dtype)


def assert_same_bits(scalar: np.ndarray, vector: np.ndarray) -> None:
    assert not np.isnan(vector).any(), "an output element was not written (or is NaN)"
    bits = f"u{vector.dtype.itemsize}"
    assert scalar.dtype == vector.dtype
    differ = np.flatnonzero(scalar.view(bits) != vector.view(bits))
    assert differ.size == 0, f"{differ.size} elements differ, first at {differ[0]}"


TYPES = [(t, "float32") for t in FUSED_INPUT_CODES] + [("float16", "float16"),
                                                         ("bfloat16", "bfloat16"),
                                                         ("int8", "float16")]
# (a shape, b shape): flat sizes with tails of 1, 3, 0 and 3, scalar broadcasts (ndim 1),
# and rows of 12 and 8 with row, column and outer broadcasts (ndim 2).
SHAPES = [((1,), (1,)), ((3,), (3,)), ((4,), (4,)), ((4099,), (4099,)), ((4099,), ()),
          ((), (13,)), ((5, 12), (12,)), ((5, 12), (5, 1)), ((5, 1), (1, 8)),
          ((7, 4), (7, 4))]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize(("in_type", "dtype"), TYPES, ids=str)
def test_vector_variant_gives_the_scalar_bits(ctx, in_type: str, dtype: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((in_type, dtype, shapes)).encode()))
    arrays = [sample(rng, shapes[0], in_type), sample(rng, shapes[1], "float32")]
    tensors = [ctx.tensor(arrays[0], dtype=in_type), ctx.tensor(arrays[1], dtype="float32")]
    out_shape = np.broadcast_shapes(*shapes)
    scalar, vector = both(ctx, tensors, PROGRAM, out_shape, dtype)
    assert_same_bits(scalar, vector)
    assert_close(vector, reference(arrays, [in_type, "float32"], PROGRAM, dtype, out_shape),
                 dtype)


@pytest.mark.parametrize("dtype", ["float32", "float16", "int8"])
def test_views_at_offsets_off_the_pool_alignment(ctx, dtype: str) -> None:
    """Inputs and the output are views 16 and 48 bytes into larger tensors (legal bindings:
    lavapipe's minStorageBufferOffsetAlignment is 16); the bytes around the output view
    keep their poison, so neither the vector stores nor the tail write past it."""
    align = ctx.caps.min_storage_buffer_offset_alignment
    if 16 % align:
        pytest.skip(f"views 16 bytes in are not bindable here (alignment {align})")
    rng = np.random.default_rng(zlib.crc32(dtype.encode()))
    n = 4099
    item = np.dtype(dtype).itemsize
    a = sample(rng, (n,), dtype)
    b = sample(rng, (n,), "float32")
    base_a = ctx.tensor(np.zeros(n + 64 // item, dtype), dtype=dtype)
    base_b = ctx.tensor(np.zeros(n + 16, np.float32))
    va, vb = view(base_a, (n,), offset=16), view(base_b, (n,), offset=48)
    va.write(a)
    vb.write(b.astype(np.float32))
    out_base = poisoned(ctx, (n + 24,), "float32")
    out = view(out_base, (n,), offset=48)
    chosen = plan(ctx, [va, vb], PROGRAM, out, True)
    assert chosen.program.variant["VEC"] == 4
    ctx.run(chosen, (va, vb, out))
    got = out.numpy()  # waits for the work on the view; the base's own read would not
    around = out_base.numpy()
    assert np.isnan(around[:12]).all() and np.isnan(around[12 + n:]).all()
    np.testing.assert_array_equal(around[12:12 + n], got)
    assert_close(got, reference([a, b], [dtype, "float32"], PROGRAM, "float32"), "float32")
    scalar, _ = both(ctx, [va, vb], PROGRAM, (n,), "float32")
    assert_same_bits(scalar, got)


@pytest.mark.parametrize(("shapes", "expected"), [
    (((4099,), (4099,)), (4, 0)), (((4099,), ()), (4, 2)), (((), (13,)), (4, 1)),
    (((5, 12), (12,)), (4, 0)), (((5, 12), (5, 1)), (4, 2)), (((5, 1), (1, 8)), (4, 1)),
    (((5, 7), (7,)), (1, 0)), (((5, 6), (5, 1)), (1, 0)), (((3, 1, 5), (4, 1)), (1, 0)),
    (((2, 3, 8), (2, 1, 8)), (1, 0)),
], ids=str)
def test_the_planner_picks_the_vector_variant_only_where_valid(ctx, shapes, expected) -> None:
    tensors = [ctx.tensor(np.zeros(s, np.float32)) for s in shapes]
    out = ctx.empty(np.broadcast_shapes(*shapes), "float32")
    variant = plan(ctx, tensors, (("add", 0, 1),), out, True).program.variant
    assert (variant["VEC"], variant["BCAST"]) == expected


def test_rows_whose_vectors_would_straddle_two_rows_stay_scalar(ctx) -> None:
    words = shape_words((3, 8), (3, 8), (8,))
    assert words[1] == 2 and vector_layout(ctx.caps, ("F32", "F32", "F32"), words) == 0
    words[8] = 6  # the first input's row stride, not a multiple of 4
    assert vector_layout(ctx.caps, ("F32", "F32", "F32"), words) is None


@pytest.mark.parametrize(("alignment", "codes", "vector"), [
    (4, ("F32", "F32"), False), (4, ("U8", "F32"), False), (8, ("U8", "F16"), True),
    (8, ("F16", "F32"), False), (16, ("I32", "BF16"), True), (64, ("F32", "F32"), True),
])
def test_binding_alignment_decides(ctx, alignment: int, codes, vector: bool) -> None:
    """A device whose bindings may start at fewer bytes than four elements of some operand
    gets the scalar variant: the vector index counts from the binding's start."""
    caps = dataclasses.replace(ctx.caps, min_storage_buffer_offset_alignment=alignment)
    assert (vector_layout(caps, codes, shape_words((4099,), (4099,))) is not None) == vector


def test_a_compiled_chain_gives_the_eager_bits(ctx) -> None:
    """bench/graph.py's chain, compiled into one vector kernel, against the same ops run
    eagerly (each float32 op rounds as the fused step does) and the float64 reference."""
    def chain(x):
        t = ((x * 1.5 + 0.25).relu() - x).silu() * x
        return t.gelu() / 3.0

    rng = np.random.default_rng()
    for n in (1, 3, 4099):
        x = (rng.standard_normal(n) * 3).astype(np.float32)
        compiled = vkumd.compile(chain, {"x": ctx.tensor(x)}, ctx=ctx)
        assert [node.op for node in compiled.graph.nodes] == ["fused_elementwise"]
        got = compiled(x=ctx.tensor(x)).numpy()
        assert_same_bits(chain(ctx.tensor(x)).numpy(), got)
        # Below x = -2.5 the GELU's input falls past -5.8 and its tail heads for float32's
        # underflow (1e-17 at x = -3, 0 past x = -3.7), where one element's relative error
        # cannot be small: the float64 comparison takes the inputs from -2.5 up (the bits
        # above cover all of them).
        kept = x >= -2.5
        program = compiled.graph.nodes[0].attrs["program"]
        if kept.any():
            assert_close(got[kept], reference([x[kept]], ["float32"], program, "float32"),
                         "float32")
