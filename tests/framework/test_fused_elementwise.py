"""``vkumd.ops.fused_elementwise`` against the float64 reference: every step op, every output
type, broadcasting through each indexing path, integer conditions, eight inputs, the
kernel cache, and bad calls.

The reference is the graph's evaluator (``reference.py`` interprets the program in float64)
on the inputs as stored; results are compared by relative Frobenius error. Outputs start
poisoned (NaN), so an element the kernel skipped fails the comparison.
"""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest

from vkumd.compiler.kernels.fused_elementwise import FUSED_ELEMENTWISE_SAMPLE, fused_kernel
from vkumd.compiler.registry import KERNELS
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import ops
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.opset.fused import glsl_steps
from vkumd.testing.numerics import poisoned, rel_error, stored

FLOATS = ["float32", "float16", "bfloat16"]
# Relative Frobenius error: float32 arithmetic, then one rounding to the output type.
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}

# Every step op once, over two float inputs and a condition.
SAMPLE_PROGRAM = (
    ("add", 0, 1), ("sub", 3, ("const", 0.5)), ("mul", 4, 0), ("div", 5, 1),
    ("div", 6, ("const", 3.0), "floor"), ("div", 7, 1, "trunc"), ("eq", 8, 0), ("ne", 9, 1),
    ("lt", 10, 3), ("le", 11, 4), ("gt", 12, 5), ("ge", 13, 6), ("where", 2, 14, 7),
    ("relu", 15), ("gelu", 16), ("gelu_tanh", 17), ("silu", 18), ("cast", 19, "float16"),
    ("cast", 20, "bfloat16"), ("cast", 21, "float32"), ("add", 22, ("const", float("inf"))),
)


def reference(inputs: list[np.ndarray], in_types: list[str], program: tuple, dtype: str,
              out_shape: tuple[int, ...] | None = None) -> np.ndarray:
    """The program in float64 through a one-node graph (inputs rounded to their types)."""
    b = GraphBuilder("fused")
    xs = [b.input(f"x{i}", a.shape, t) for i, (a, t) in enumerate(zip(inputs, in_types,
                                                                       strict=True))]
    b.output(b.op("fused_elementwise", *xs, program=program, dtype=dtype))
    result = evaluate(b.build(), {f"x{i}": a for i, a in enumerate(inputs)})[0]
    return result if out_shape is None else np.broadcast_to(result, out_shape)


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str) -> None:
    assert got.shape == want.shape
    assert not np.isnan(got).any(), "an output element was not written (or is NaN)"
    error = rel_error(got, want)
    assert error < TOLERANCE[dtype], f"relative error {error:.3g} for {dtype}"


def run(ctx, arrays: list[np.ndarray], in_types: list[str], program: tuple, dtype: str,
        out_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    tensors = [ctx.tensor(a.astype(np.float32) if t in FLOATS else a, dtype=t)
               for a, t in zip(arrays, in_types, strict=True)]
    out = poisoned(ctx, out_shape, dtype)
    result = ops.fused_elementwise(tensors, program, out=out)
    assert result is out and result.dtype.name == dtype
    return result.numpy(), reference(arrays, in_types, program, dtype, out_shape)


CHAIN = (("mul", 0, 1), ("add", 2, ("const", 1.5)), ("gelu", 3), ("sub", 4, 0),
         ("silu", 5), ("div", 6, ("const", 3.0)), ("gelu_tanh", 7), ("relu", 8))
# (a shape, b shape): contiguous (ndim 0), one and two merged dims, the general path.
SHAPES = [((7, 13), (7, 13)), ((13,), ()), ((5, 1), (1, 7)), ((3, 1, 5), (4, 1)),
          ((2, 3, 1, 5, 1), (3, 4, 1, 6)), ((1,), (2, 1, 1, 1, 1, 3))]


@pytest.mark.parametrize("shapes", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_a_chain_matches_the_reference(ctx, dtype: str, shapes) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shapes)).encode()))
    a = stored(rng.standard_normal(shapes[0]), dtype)
    b = stored(rng.standard_normal(shapes[1]), dtype)
    out_shape = np.broadcast_shapes(a.shape, b.shape)
    got, want = run(ctx, [a, b], [dtype, dtype], CHAIN, dtype, out_shape)
    assert_close(got, want, dtype)


@pytest.mark.parametrize("cond_type", ["uint8", "int8", "int32", "float32"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_step_op(ctx, dtype: str, cond_type: str) -> None:
    """The sample program (every op, every rounding, casts, an infinite constant but for the
    last step) with an integer or float condition."""
    rng = np.random.default_rng(zlib.crc32(repr((dtype, cond_type)).encode()))
    program = SAMPLE_PROGRAM[:-1]
    a = stored(rng.uniform(0.5, 4.0, (3, 17)) * rng.choice([-1, 1], (3, 17)), "float32")
    b = stored(rng.uniform(0.5, 2.0, (17,)), "float32")
    cond = rng.integers(-2, 3, (3, 1)).astype(cond_type)
    got, want = run(ctx, [a, b, cond], ["float32", "float32", cond_type], program, dtype,
                    (3, 17))
    assert_close(got, want, dtype)


def test_single_steps_match_the_eager_ops(ctx) -> None:
    """Same code as the eager kernels: results equal bit for bit (one ulp for the
    activations, whose kernel may be vectorised differently)."""
    rng = np.random.default_rng(7)
    a = ctx.tensor(rng.standard_normal((9, 31)).astype(np.float32) * 3)
    b = ctx.tensor(rng.standard_normal((31,)).astype(np.float32))
    for op in ("add", "sub", "mul", "div"):
        fused = ops.fused_elementwise([a, b], ((op, 0, 1),)).numpy()
        np.testing.assert_array_equal(fused, getattr(ops, op)(a, b).numpy())
    for op in ("relu", "gelu", "gelu_tanh", "silu"):
        fused = ops.fused_elementwise([a], ((op, 0),)).numpy()
        eager = getattr(ops, op)(a).numpy()
        np.testing.assert_array_max_ulp(fused, eager, maxulp=1)
    scaled = ops.fused_elementwise([a], (("mul", 0, ("const", 0.3)),)).numpy()
    np.testing.assert_array_equal(scaled, ops.scale(a, 0.3).numpy())


MATH = {"exp": np.exp, "sqrt": np.sqrt, "tanh": np.tanh, "erf": np.vectorize(math.erf),
        "sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v))}


@pytest.mark.parametrize("op", list(MATH))
def test_math_steps_hold_float32_accuracy_element_by_element(ctx, op: str) -> None:
    """exp, sqrt, tanh, erf, sigmoid against float64 per element: near 0 (where 1 - erfc and
    (e^2x - 1) / (e^2x + 1) would cancel), across the range and in the tails. exp, and
    sigmoid whose tail is an exp, get the (3 + 2|x|) ulp Vulkan allows exp; the others 4."""
    rng = np.random.default_rng()
    x = np.concatenate([rng.standard_normal(3001) * 3, rng.uniform(-1e-3, 1e-3, 1001),
                        rng.uniform(-1e-7, 1e-7, 101), rng.uniform(-60, 60, 1001),
                        [0.0, -0.0, 0.5, -0.5, 0.4999999, 10.0, -10.0]]).astype(np.float32)
    if op == "sqrt":
        x = np.abs(x)
    got = ops.fused_elementwise([ctx.tensor(x)], ((op, 0),),
                                out=poisoned(ctx, x.shape, "float32")).numpy()
    want = MATH[op](x.astype(np.float64))
    ulps = 3 + 2 * np.abs(x.astype(np.float64)) if op in ("exp", "sigmoid") else 4
    # Results below float32's normal range may be flushed to zero by the driver.
    bound = ulps * 2.0**-23 * np.abs(want) + 1.2e-38
    error = np.abs(got.astype(np.float64) - want)
    worst = int(np.argmax(error / bound))
    assert (error <= bound).all(), f"{op}({x[worst]!r}) = {got[worst]!r}, want {want[worst]!r}"


def test_math_steps_at_the_special_values(ctx) -> None:
    x = ctx.tensor(np.array([np.inf, -np.inf, np.nan, -0.0, -1.0], np.float32))
    expected = {"exp": [np.inf, 0.0, np.nan, 1.0, np.exp(np.float32(-1.0))],
                "tanh": [1.0, -1.0, np.nan, -0.0, np.tanh(-1.0)],
                "erf": [1.0, -1.0, np.nan, -0.0, math.erf(-1.0)],
                "sigmoid": [1.0, 0.0, np.nan, 0.5, 1 / (1 + math.e)]}
    for op, want in expected.items():
        got = ops.fused_elementwise([x], ((op, 0),)).numpy()
        np.testing.assert_allclose(got, np.array(want, np.float32), rtol=4e-7, err_msg=op)
    roots = ops.fused_elementwise([x], (("sqrt", 0),)).numpy()
    assert roots[0] == np.inf and np.isnan(roots[1:3]).all() and np.isnan(roots[4])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_math_steps_in_narrow_types(ctx, dtype: str) -> None:
    rng = np.random.default_rng()
    a = stored(rng.uniform(0.1, 3.0, (5, 33)), dtype)
    program = (("exp", 0), ("sqrt", 1), ("tanh", 2), ("erf", 3), ("sigmoid", 4))
    got, want = run(ctx, [a], [dtype], program, dtype, a.shape)
    assert_close(got, want, dtype)


def test_eight_inputs_with_their_own_broadcasts(ctx) -> None:
    rng = np.random.default_rng(8)
    shapes = [(4, 5, 6), (6,), (5, 1), (4, 1, 1), (1, 5, 6), (), (4, 5, 6), (1, 1, 6)]
    arrays = [stored(rng.standard_normal(s), "float32") for s in shapes]
    program = tuple(("add" if k % 2 else "mul", 8 + k - 1 if k else 0, k + 1)
                    for k in range(7))
    got, want = run(ctx, arrays, ["float32"] * 8, program, "float32", (4, 5, 6))
    assert_close(got, want, "float32")


def test_mixed_input_types_and_default_dtype(ctx) -> None:
    rng = np.random.default_rng(9)
    h = stored(rng.standard_normal((6, 10)), "float16")
    f = stored(rng.standard_normal((10,)), "float32")
    program = (("cast", 0, "float32"), ("mul", 2, 1), ("cast", 3, "bfloat16"))
    result = ops.fused_elementwise([ctx.tensor(h, dtype="float16"),
                                    ctx.tensor(f, dtype="float32")], program)
    assert result.dtype.name == "float16" and result.shape == (6, 10)  # the first input's
    want = reference([h, f], ["float16", "float32"], program, "float16")
    assert_close(result.numpy(), want, "float16")
    as_float = ops.fused_elementwise([ctx.tensor(f, dtype="float32")], (("relu", 0),),
                                     out_shape=(3, 10), dtype="float32")
    assert_close(as_float.numpy(), np.broadcast_to(np.maximum(f, 0), (3, 10)), "float32")


def test_a_large_tensor_loops_over_the_grid(ctx) -> None:
    rng = np.random.default_rng(10)
    a = stored(rng.standard_normal((1031, 1025)), "float32")
    b = stored(rng.standard_normal((1025,)), "float32")
    got, want = run(ctx, [a, b], ["float32"] * 2, CHAIN, "float32", a.shape)
    assert_close(got, want, "float32")


def test_kernels_are_generated_once_per_program() -> None:
    one = fused_kernel(glsl_steps(CHAIN), 2)
    assert fused_kernel(glsl_steps(CHAIN), 2) is one
    other = fused_kernel(glsl_steps(CHAIN[:-1]), 2)
    assert other.name != one.name and other.source_text() != one.source_text()
    assert one.name not in KERNELS and other.name not in KERNELS
    assert KERNELS[FUSED_ELEMENTWISE_SAMPLE.name] is FUSED_ELEMENTWISE_SAMPLE
    assert "vkumd_gelu(" in one.source_text()  # activation.glsl's code, not a copy


def test_empty_output(ctx) -> None:
    a = ctx.tensor(np.zeros((0, 3), np.float32))
    assert ops.fused_elementwise([a], (("relu", 0),)).shape == (0, 3)


def test_bad_calls(ctx) -> None:
    a = ctx.tensor(np.ones((2, 3), np.float32))
    b = ctx.tensor(np.ones((4,), np.float32))
    with pytest.raises(VkumdTypeError, match="non-empty list"):
        ops.fused_elementwise(a, (("relu", 0),))
    with pytest.raises(VkumdTypeError, match="no known op"):
        ops.fused_elementwise([a], (("cbrt", 0),))
    with pytest.raises(VkumdValueError, match="reads value 2"):
        ops.fused_elementwise([a], (("add", 0, 2),))
    with pytest.raises(VkumdValueError, match="no steps"):
        ops.fused_elementwise([a], ())
    with pytest.raises(VkumdTypeError, match="cast needs"):
        ops.fused_elementwise([a], (("cast", 0, "int32"),))
    with pytest.raises(VkumdValueError, match="do not broadcast"):
        ops.fused_elementwise([a, b], (("add", 0, 1),))
    with pytest.raises(VkumdValueError, match="out_shape"):
        ops.fused_elementwise([a], (("relu", 0),), out_shape=(3,))
    with pytest.raises(VkumdValueError, match="at most 8"):
        ops.fused_elementwise([a] * 9, (("relu", 0),))
    with pytest.raises(VkumdTypeError, match="result is int32"):
        ops.fused_elementwise([a], (("relu", 0),), dtype="int32")
    with pytest.raises(VkumdValueError, match="same tensor as an input"):
        ops.fused_elementwise([a], (("relu", 0),), out=a)
