"""relu, gelu, gelu_tanh and silu against float64 numpy: dtypes, sizes, extremes, bad input.

Outputs start poisoned (NaN). Sizes that are and are not multiples of 4 take the vec4 and
scalar kernels.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, sample, tensor

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

_erf = np.vectorize(math.erf)
_erfc = np.vectorize(math.erfc)


def _gelu(x):
    # Phi(x) as erfc(-x / sqrt 2) / 2: 1 + erf would cancel in the negative tail.
    return 0.5 * x * _erfc(-x / math.sqrt(2.0))


def _gelu_tanh(x):
    # 0.5 x (1 + tanh u) = x sigmoid(2u); this form keeps float64's digits in the tail.
    u = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-2.0 * u))


def _silu(x):
    with np.errstate(over="ignore"):
        return x / (1.0 + np.exp(-x))


REFERENCES = {"relu": lambda x: np.maximum(x, 0.0), "gelu": _gelu, "gelu_tanh": _gelu_tanh,
              "silu": _silu}
SHAPES = [(1,), (7,), (4, 13), (2, 3, 8), (1000,)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(REFERENCES))
def test_matches_numpy(ctx, name: str, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    got = getattr(ops, name)(tensor(ctx, x, dtype), out=poisoned(ctx, shape, dtype))
    assert got.dtype.name == dtype
    assert_close(got.numpy(), REFERENCES[name](x), dtype, f"{name} {dtype} {shape}")


@pytest.mark.parametrize("name", list(REFERENCES))
def test_extremes_stay_finite(ctx, name: str) -> None:
    x = np.array([-1e30, -500.0, -88.0, -20.0, -1e-30, 0.0, 1e-30, 20.0, 88.0, 500.0, 1e30],
                 np.float64)
    got = getattr(ops, name)(ctx.tensor(x.astype(np.float32))).numpy()
    assert np.isfinite(got).all(), got
    expected = REFERENCES[name](x)
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-30)


@pytest.mark.parametrize(("name", "low", "rtol"), [("gelu_tanh", -8.0, 2e-5),
                                                   ("gelu", -12.0, 1e-6)])
def test_negative_tail_per_element(ctx, name: str, low: float, rtol: float) -> None:
    # Tiny outputs keep their relative accuracy: no cancellation in 1 + erf or 1 + tanh, and
    # erfc's exponent -x^2 / 2 reaches exp without a rounded square (at x = -11.9 a rounded
    # one alone cost 2e-5).
    x = np.linspace(low, 4.0, 4001).astype(np.float32).astype(np.float64)
    got = getattr(ops, name)(ctx.tensor(x.astype(np.float32))).numpy()
    np.testing.assert_allclose(got, REFERENCES[name](x), rtol=rtol, atol=1e-37)


def test_erf_is_accurate_in_its_tail(ctx) -> None:
    # ops.erf (activation.glsl's vkumd_erf_accurate) shares GELU's erfc and exp reduction.
    x = np.linspace(-4.0, 4.0, 1601).astype(np.float32).astype(np.float64)
    got = ops.erf(ctx.tensor(x.astype(np.float32))).numpy().astype(np.float64)
    np.testing.assert_allclose(got, _erf(x), rtol=2e-7, atol=1e-7)


def test_large_tensor_uses_a_2d_grid(ctx) -> None:
    rng = np.random.default_rng()
    n = ctx.caps.max_workgroup_count[0] * 64 + 3  # scalar kernel: one element per lane
    x = sample(rng, "float16", (n,))
    got = ops.relu(tensor(ctx, x, "float16"), out=poisoned(ctx, (n,), "float16")).numpy()
    np.testing.assert_array_equal(got, np.maximum(x, 0.0))


def test_empty(ctx) -> None:
    assert ops.gelu(ctx.empty((0, 3))).shape == (0, 3)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3), np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.gelu(ctx.tensor(np.ones(3, np.int32)))),
        (VkumdTypeError, lambda: ops.silu(np.ones(3, np.float32))),
        (VkumdValueError, lambda: ops.relu(x, out=ctx.empty((3, 2)))),
        (VkumdTypeError, lambda: ops.gelu_tanh(x, out=ctx.empty((2, 3), "float16"))),
        (VkumdTypeError, lambda: ops.gelu(x, out=np.empty((2, 3), np.float32))),
    ]
    assert_each_raises(ctx, cases)


def test_public_names() -> None:
    for name in REFERENCES:
        assert getattr(vkumd.ops, name) is getattr(ops, name)
