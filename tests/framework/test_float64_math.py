"""float64 unary math computed in double (``shaders/unary_double.comp`` over
``shaders/include/double_math.glsl``): every op against numpy's float64 at 1e-14 relative over
wide ranges (a float32 computation is off by ~1e-8, so each comparison fails if the kernel
lost precision), special values, odd shapes, outputs poisoned first, the graph path, and the
refusal of a device without shaderFloat64."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from vkumd import ops
from vkumd.compiler.kernels.double import UNARY_DOUBLE
from vkumd.compiler.kernels.limits import DOUBLE_UNARY_OPS
from vkumd.errors import CapabilityMissing

RELATIVE = 1e-14


def _needs_float64(ctx) -> None:
    if not ctx.caps.shader_float64:
        pytest.skip("the device has no shaderFloat64 (vkumd refuses float64 arithmetic)")


def _uniform(low: float, high: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: rng.uniform(low, high, n)


def _log_uniform(low: float, high: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: np.exp(rng.uniform(np.log(low), np.log(high), n))


def _signed_log(low: float, high: float) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: _log_uniform(low, high)(rng, n) * rng.choice([-1.0, 1.0], n)


# op: (numpy reference, arguments across the function's range).
CASES: dict[str, tuple[Callable[[np.ndarray], np.ndarray], Callable]] = {
    "abs": (np.abs, _signed_log(1e-300, 1e300)),
    "neg": (np.negative, _signed_log(1e-300, 1e300)),
    "ceil": (np.ceil, _uniform(-1e6, 1e6)),
    "floor": (np.floor, _uniform(-1e6, 1e6)),
    "round": (np.round, lambda rng, n: np.round(rng.uniform(-1e3, 1e3, n) * 2) / 2),
    "sign": (np.sign, _signed_log(1e-300, 1e300)),
    "reciprocal": (lambda x: 1.0 / x, _signed_log(1e-300, 1e300)),
    "sqrt": (np.sqrt, _log_uniform(1e-300, 1e300)),
    "exp": (np.exp, _uniform(-745.0, 709.7)),
    "log": (np.log, _log_uniform(1e-310, 1e308)),
    "tanh": (np.tanh, _signed_log(1e-12, 30.0)),
    "sigmoid": (lambda x: 1.0 / (1.0 + np.exp(-x)), _uniform(-700.0, 700.0)),
    "sin": (np.sin, _uniform(-1e5, 1e5)),
    "cos": (np.cos, _uniform(-1e5, 1e5)),
    "tan": (np.tan, _uniform(-1e4, 1e4)),
    "asin": (np.arcsin, _uniform(-1.0, 1.0)),
    "acos": (np.arccos, _uniform(-1.0, 1.0)),
    "atan": (np.arctan, _signed_log(1e-10, 1e10)),
    "sinh": (np.sinh, _signed_log(1e-10, 710.0)),
    "cosh": (np.cosh, _uniform(-710.0, 710.0)),
    "asinh": (np.arcsinh, _signed_log(1e-10, 1e300)),
    "acosh": (np.arccosh, lambda rng, n: 1.0 + _log_uniform(1e-12, 1e300)(rng, n)),
    "atanh": (np.arctanh, lambda rng, n: _signed_log(1e-12, 1.0)(rng, n) * (1 - 1e-12)),
}


def test_every_double_op_is_tested() -> None:
    assert set(CASES) == set(DOUBLE_UNARY_OPS)


def _check(got: np.ndarray, want: np.ndarray, x: np.ndarray, op: str) -> None:
    assert got.dtype == np.float64
    same_special = (np.isnan(got) == np.isnan(want)) & (np.isinf(got) == np.isinf(want))
    assert same_special.all(), f"{op}: NaN/inf differ at x={x[~same_special][:4]}"
    finite = np.isfinite(want)
    np.testing.assert_array_equal(got[~finite], want[~finite])
    error = np.abs(got[finite] - want[finite]) / np.maximum(np.abs(want[finite]), 1e-300)
    worst = int(np.argmax(error)) if error.size else 0
    assert error.size == 0 or error[worst] <= RELATIVE, (
        f"{op}: relative error {error[worst]:.3g} at x={x[finite][worst]!r}")


@pytest.mark.parametrize("op", sorted(CASES))
def test_op_matches_numpy_in_double(ctx, op: str) -> None:
    _needs_float64(ctx)
    fn, draw = CASES[op]
    rng = np.random.default_rng()
    x = draw(rng, 3 * 1031).reshape(3, 1031)  # odd, not a multiple of any workgroup
    out = ctx.tensor(np.full(x.shape, np.nan), dtype="float64")
    with np.errstate(all="ignore"):
        want = fn(x)
    result = getattr(ops, op)(ctx.tensor(x, dtype="float64"), out=out)
    assert result is out
    _check(result.numpy(), want, x, op)


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 1.0, -1.0,
                     2.2250738585072014e-308, 1.7976931348623157e308, 0.5, -0.5, 709.78,
                     -745.13, 1e-20, -1e-20, 22.0, -22.0, 710.4])


@pytest.mark.parametrize("op", sorted(CASES))
def test_special_values_follow_numpy(ctx, op: str) -> None:
    _needs_float64(ctx)
    fn, _ = CASES[op]
    with np.errstate(all="ignore"):
        want = fn(SPECIALS)
    if op in TRIG:
        want[np.abs(SPECIALS) > TRIG_MAX] = np.nan
    got = getattr(ops, op)(ctx.tensor(SPECIALS, dtype="float64")).numpy()
    _check(got, want, SPECIALS, op)


# sin, cos and tan reduce exactly up to 2^19 pi/2 and are NaN past it (double_math.glsl).
TRIG = ("sin", "cos", "tan")
TRIG_MAX = 2.0 ** 19 * np.pi / 2


@pytest.mark.parametrize("op", TRIG)
def test_trig_past_its_reduction_is_nan_not_a_wrong_value(ctx, op: str) -> None:
    _needs_float64(ctx)
    x = np.array([TRIG_MAX * 0.999, -TRIG_MAX * 0.999, TRIG_MAX * 1.001, -1e10, 1e300])
    got = getattr(ops, op)(ctx.tensor(x, dtype="float64")).numpy()
    _check(got[:2], getattr(np, op)(x[:2]), x[:2], op)
    assert np.isnan(got[2:]).all()


def test_exp_and_log_near_their_hard_spots(ctx) -> None:
    """exp near 0 and at its subnormal results, log near 1 (where a float32 log of 1 + 1e-9
    is 0), sin near multiples of pi/2."""
    _needs_float64(ctx)
    rng = np.random.default_rng()
    tiny = rng.standard_normal(997) * 1e-9
    for op, x, fn in [("exp", tiny, np.exp), ("exp", rng.uniform(-745.0, -708.0, 997), np.exp),
                      ("log", 1.0 + tiny, np.log),
                      ("sin", np.arange(1, 998) * (np.pi / 2) + tiny, np.sin)]:
        got = getattr(ops, op)(ctx.tensor(x, dtype="float64")).numpy()
        _check(got, fn(x), x, op)


def test_graph_runs_float64_in_double(ctx) -> None:
    """exp(sin(x)) traced and compiled: each node runs the double kernel (float64 nodes do
    not join the float32 generated kernels)."""
    _needs_float64(ctx)
    import vkumd

    x = np.random.default_rng().uniform(-20.0, 20.0, (7, 33))
    compiled = vkumd.compile(lambda t: ops.exp(ops.sin(t)), (ctx.tensor(x, dtype="float64"),))
    got = compiled(ctx.tensor(x, dtype="float64")).numpy()
    _check(got, np.exp(np.sin(x)), x, "exp(sin)")


def test_no_shader_float64_refuses_with_the_feature(ctx, monkeypatch) -> None:
    _needs_float64(ctx)
    x = ctx.tensor(np.ones(5), dtype="float64")
    caps = dataclasses.replace(ctx.caps, shader_float64=False)
    assert UNARY_DOUBLE.variants(caps) == []
    monkeypatch.setattr(ctx, "caps", caps)
    with pytest.raises(CapabilityMissing, match="shaderFloat64"):
        ops.exp(x)


def test_ops_without_a_double_kernel_refuse_float64(ctx) -> None:
    _needs_float64(ctx)
    with pytest.raises(TypeError, match="float64"):
        ops.erf(ctx.tensor(np.ones(3), dtype="float64"))
