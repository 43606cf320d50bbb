"""``remainder`` (floored, the divisor's sign), ``fmod`` (truncated, the dividend's sign) and
``pow`` against float64 numpy: every dtype the binary kernel takes, broadcasts, numbers on
either side, IEEE's edge cases, int32 over its whole range, inside a fused graph, and bad
inputs. Outputs start poisoned."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, stored

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphBuilder, evaluate, run_passes

NUMPY = {"remainder": np.mod, "fmod": np.fmod}
PAIRS = [((7,), (7,)), ((3, 5), (5,)), ((2, 3, 9), (3, 1)), ((33, 17), ()), ((4099,), (4099,))]


def _operands(rng: np.random.Generator, dtype: str, shapes) -> tuple[np.ndarray, np.ndarray]:
    """Dividends of either sign up to 1000 times the divisors, divisors away from zero."""
    a = rng.standard_normal(shapes[0]) * 10.0 ** rng.integers(0, 4, shapes[0])
    b = rng.uniform(0.25, 4.0, shapes[1]) * rng.choice([-1.0, 1.0], shapes[1])
    return stored(a, dtype), stored(b, dtype)


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", list(NUMPY))
def test_floats_match_float64(ctx, op: str, dtype: str, shapes) -> None:
    a, b = _operands(np.random.default_rng(), dtype, shapes)
    out = poisoned(ctx, np.broadcast_shapes(a.shape, b.shape), dtype)
    getattr(ops, op)(ctx.tensor(a.astype(np.float32), dtype=dtype),
                     ctx.tensor(b.astype(np.float32), dtype=dtype), out=out)
    # The exact remainder of the stored values, rounded once to the type.
    want = stored(NUMPY[op](a, b), dtype)
    assert_close(out.numpy().astype(np.float64), want, dtype, f"{op} {dtype}")


@pytest.mark.parametrize("op", list(NUMPY))
def test_int32_is_exact_over_the_whole_range(ctx, op: str) -> None:
    rng = np.random.default_rng()
    a = rng.integers(-2**31, 2**31, (5, 131), dtype=np.int64).astype(np.int32)
    b = np.maximum(rng.integers(1, 2**31, (131,), dtype=np.int64)
                   >> rng.integers(0, 31, (131,)), 1) * rng.choice([-1, 1], (131,))
    b = b.astype(np.int32)
    out = poisoned(ctx, a.shape, "int32")
    getattr(ops, op)(ctx.tensor(a), ctx.tensor(b), out=out)
    np.testing.assert_array_equal(out.numpy(), NUMPY[op](a.astype(np.int64), b))


def test_int32_edge_cases(ctx) -> None:
    """A zero divisor gives 0 (as the rounded divisions); INT32_MIN by -1 does not trap."""
    low = np.iinfo(np.int32).min
    a = np.array([7, -7, 7, -7, low, low, 5, 0], np.int32)
    b = np.array([0, 0, -1, 3, -1, 3, -3, -4], np.int32)
    got_mod = ops.remainder(ctx.tensor(a), ctx.tensor(b)).numpy()
    got_fmod = ops.fmod(ctx.tensor(a), ctx.tensor(b)).numpy()
    np.testing.assert_array_equal(got_mod, [0, 0, 0, 2, 0, 1, -1, 0])
    np.testing.assert_array_equal(got_fmod, [0, 0, 0, -1, 0, -2, 2, 0])


@pytest.mark.parametrize("op", list(NUMPY))
def test_ieee_edge_cases_as_numpy(ctx, op: str) -> None:
    inf, nan = np.inf, np.nan
    a = np.array([0, -0.0, 0, -0.0, -3, 3, -1, 1, inf, -inf, 1, 1, nan, 1, 7.5, 1e30],
                 np.float32)
    b = np.array([-2, 2, 2, -2, inf, inf, -inf, -inf, 2, 2, 0, -0.0, 2, nan, -2, 3e-5],
                 np.float32)
    got = getattr(ops, op)(ctx.tensor(a), ctx.tensor(b)).numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        want = NUMPY[op](a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    numbers = ~np.isnan(want)  # the sign of zeros and infinities; a NaN's is no matter
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))
    np.testing.assert_allclose(got, want, rtol=1e-6)  # NaN where NaN, inf where inf


def test_numbers_on_either_side(ctx) -> None:
    x = np.arange(-9, 10, dtype=np.int32)
    np.testing.assert_array_equal(ops.remainder(ctx.tensor(x), 4).numpy(), np.mod(x, 4))
    np.testing.assert_array_equal(ops.fmod(-17, ctx.tensor(x[x != 0])).numpy(),
                                  np.fmod(-17, x[x != 0]))
    f = np.linspace(-5, 5, 23, dtype=np.float32)
    np.testing.assert_allclose(ops.remainder(ctx.tensor(f), 1.5).numpy(),
                               np.mod(f.astype(np.float64), 1.5), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("op", [*NUMPY, "pow"])
def test_fuses_in_a_compiled_graph(ctx, op: str) -> None:
    """Between two other elementwise steps the float op runs inside one generated kernel."""
    b = GraphBuilder(op)
    x, y = b.input("x", ("n", 19)), b.input("y", (19,))
    b.output(b.mul(b.op(op, b.mul(x, 3.0), y), 2.0))
    graph = b.build()
    assert [n.op for n in run_passes(graph).nodes] == ["fused_elementwise"]
    compiled = vkumd.compile(lambda x, y: getattr(ops, op)(x * 3.0, y) * 2.0,
                             {"x": np.ones((6, 19), np.float32),
                              "y": np.ones(19, np.float32)},
                             ctx=ctx, dynamic={"x": {0: "n"}})
    rng = np.random.default_rng()
    for rows in (6, 3):
        data = {"x": rng.uniform(0.1, 2, (rows, 19)).astype(np.float32),
                "y": (rng.uniform(0.5, 2, 19) * rng.choice([-1, 1], 19)).astype(np.float32)}
        want = evaluate(graph, data)[0]
        assert_close(compiled(**data).numpy().astype(np.float64), want, "float32", op)


def test_bad_inputs(ctx) -> None:
    f, i = ctx.tensor(np.ones((2, 3), np.float32)), ctx.tensor(np.ones((2, 3), np.int32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.remainder(f, i)),
        (VkumdValueError, lambda: ops.fmod(f, ctx.tensor(np.ones((4,), np.float32)))),
        (VkumdValueError, lambda: ops.remainder(i, 2.5)),
        (VkumdTypeError, lambda: ops.fmod(f, "2")),
        (VkumdValueError, lambda: ops.remainder(f, f, out=ctx.tensor(np.ones(3, np.float32)))),
        (VkumdTypeError, lambda: ops.fmod(2.0, 3.0)),
    ])


@pytest.mark.parametrize("shapes", PAIRS, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_pow_of_floats_matches_float64(ctx, dtype: str, shapes) -> None:
    """Positive bases with any exponent, negative bases with integer exponents."""
    rng = np.random.default_rng()
    # Within float16's range: |a| in [1/4, 3], integer exponents in [-6, 8] for a < 0.
    a = stored(rng.uniform(0.25, 3.0, shapes[0]) * rng.choice([-1, 1], shapes[0]), dtype)
    b = stored(rng.uniform(-4.0, 4.0, shapes[1]), dtype)
    a, b = np.broadcast_arrays(a, b)
    b = np.where(a < 0, np.clip(np.round(b * 2), -6, 8), b)
    out = poisoned(ctx, a.shape, dtype)
    ops.pow(ctx.tensor(a.astype(np.float32), dtype=dtype),
            ctx.tensor(b.astype(np.float32), dtype=dtype), out=out)
    assert_close(out.numpy().astype(np.float64), stored(np.power(a, b), dtype), dtype, dtype)


def test_pow_edge_cases_as_numpy(ctx) -> None:
    inf, nan = np.inf, np.nan
    a = np.array([2, -2, -2, 0, -0.0, 1, nan, -1.5, 3, 0.5, 10, 2, -0.0, inf, -inf, 0.5, -1],
                 np.float32)
    b = np.array([3, 3, 2, -1, -1, nan, 0, 0.5, 20, -3.3, 38, -200, 3, -2, 3, inf, -inf],
                 np.float32)
    got = ops.pow(ctx.tensor(a), ctx.tensor(b)).numpy()
    with np.errstate(all="ignore"):
        want = np.power(a.astype(np.float64), b.astype(np.float64)).astype(np.float32)
    numbers = ~np.isnan(want)
    np.testing.assert_array_equal(np.signbit(got[numbers]), np.signbit(want[numbers]))
    np.testing.assert_allclose(got, want, rtol=2e-6)


def test_pow_of_int32_is_exact_and_wraps(ctx) -> None:
    rng = np.random.default_rng()
    a = rng.integers(-50, 51, (9, 37)).astype(np.int32)
    b = rng.integers(0, 12, (37,)).astype(np.int32)
    out = poisoned(ctx, a.shape, "int32")
    ops.pow(ctx.tensor(a), ctx.tensor(b), out=out)
    # int64 powers reduced modulo 2**32: int32's wrapping
    want = (np.power(a.astype(np.int64), b) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)
    np.testing.assert_array_equal(out.numpy(), want)
    negative = ops.pow(ctx.tensor(np.array([1, -1, -1, 2, 0], np.int32)),
                       ctx.tensor(np.array([-3, -3, -2, -1, -1], np.int32))).numpy()
    np.testing.assert_array_equal(negative, [1, -1, 1, 0, 0])


def test_pow_bad_inputs(ctx) -> None:
    f, i = ctx.tensor(np.ones((2, 3), np.float32)), ctx.tensor(np.ones((2, 3), np.int32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.pow(f, i)),
        (VkumdValueError, lambda: ops.pow(f, ctx.tensor(np.ones((4,), np.float32)))),
        (VkumdValueError, lambda: ops.pow(i, 0.5)),
        (VkumdTypeError, lambda: ops.pow(2.0, 3.0)),
    ], "pow")
