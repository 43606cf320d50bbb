"""float64 matmul in double (``shaders/matmul_double.comp``), einsum through it, and float64
permutes (the strided copy), against numpy's float64 at 1e-12 relative (a float32 product is
off by ~1e-7); odd shapes, batches that repeat, transposes, the epilogue, outputs poisoned
first; the refusals of what the double kernel does not take and of a device without
shaderFloat64."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vkumd import ops
from vkumd.compiler.kernels.double import MATMUL_DOUBLE
from vkumd.errors import CapabilityMissing, VkumdValueError

RELATIVE = 1e-12


@pytest.fixture(autouse=True)
def _needs_float64(ctx) -> None:
    if not ctx.caps.shader_float64:
        pytest.skip("the device has no shaderFloat64 (vkumd refuses float64 arithmetic)")


def _tensor(ctx, x: np.ndarray):
    return ctx.tensor(np.ascontiguousarray(x), dtype="float64")


def _poisoned(ctx, shape: tuple[int, ...]):
    return ctx.tensor(np.full(shape, np.nan), dtype="float64")


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    # Relative to the largest entry: a dot product's small results carry the cancellation of
    # their terms, in numpy as in the kernel.
    assert got.shape == want.shape, what
    error = np.max(np.abs(got - want)) / np.max(np.abs(want))
    assert error <= RELATIVE, f"{what}: relative error {error:.3g}"


@pytest.mark.parametrize("a_shape, b_shape", [((17, 29), (29, 13)), ((3, 17, 29), (3, 29, 13)),
                                              ((2, 3, 5, 7), (7, 11)), ((7, 1), (1, 9)),
                                              ((5, 31), (2, 31, 3))])
def test_matmul_matches_numpy(ctx, a_shape, b_shape) -> None:
    rng = np.random.default_rng()
    a, b = rng.standard_normal(a_shape), rng.standard_normal(b_shape)
    want = a @ b
    out = _poisoned(ctx, want.shape)
    got = ops.matmul(_tensor(ctx, a), _tensor(ctx, b), out=out)
    assert got is out
    _close(got.numpy(), want, f"{a_shape} @ {b_shape}")


def test_transposes_and_epilogue(ctx) -> None:
    rng = np.random.default_rng()
    a, b = rng.standard_normal((4, 23, 19)), rng.standard_normal((4, 19, 37))
    bias, residual = rng.standard_normal(37), rng.standard_normal((23, 37))
    got = ops.matmul(_tensor(ctx, a.swapaxes(1, 2)), _tensor(ctx, b.swapaxes(1, 2)),
                     trans_a=True, trans_b=True, bias=_tensor(ctx, bias),
                     residual=_tensor(ctx, residual), alpha=-0.75)
    _close(got.numpy(), -0.75 * (a @ b) + bias + residual, "transposed with epilogue")


def test_long_inner_dimension_keeps_double_precision(ctx) -> None:
    rng = np.random.default_rng()
    a, b = rng.uniform(1.0, 2.0, (3, 20001)), rng.uniform(1.0, 2.0, (20001, 2))
    _close(ops.matmul(_tensor(ctx, a), _tensor(ctx, b)).numpy(), a @ b, "k = 20001")


def test_einsum_runs_in_double(ctx) -> None:
    rng = np.random.default_rng()
    a, b = rng.standard_normal((3, 5, 7)), rng.standard_normal((3, 7, 4))
    for spec, operands in [("bij,bjk->bik", (a, b)), ("bij->bji", (a,)), ("bij->", (a,)),
                           ("bij,bij->b", (a, a))]:
        got = ops.einsum(spec, *[_tensor(ctx, x) for x in operands]).numpy()
        _close(np.asarray(got), np.asarray(np.einsum(spec, *operands)), spec)


def test_permute_and_transpose_move_float64(ctx) -> None:
    x = np.random.default_rng().standard_normal((3, 5, 7))
    out = _poisoned(ctx, (7, 3, 5))
    np.testing.assert_array_equal(ops.permute(_tensor(ctx, x), (2, 0, 1), out=out).numpy(),
                                  x.transpose(2, 0, 1))
    np.testing.assert_array_equal(ops.transpose(_tensor(ctx, x), 0, 2).numpy(),
                                  x.transpose(2, 1, 0))


def test_activation_and_beta_are_refused(ctx) -> None:
    a = _tensor(ctx, np.ones((2, 3)))
    b = _tensor(ctx, np.ones((3, 2)))
    with pytest.raises(VkumdValueError, match="float64"):
        ops.matmul(a, b, activation="relu")
    with pytest.raises(VkumdValueError, match="beta"):
        ops.matmul(a, b, beta=1.0, out=_poisoned(ctx, (2, 2)))


def test_no_shader_float64_refuses_with_the_feature(ctx, monkeypatch) -> None:
    a = _tensor(ctx, np.ones((2, 3)))
    caps = dataclasses.replace(ctx.caps, shader_float64=False)
    assert MATMUL_DOUBLE.variants(caps) == []
    monkeypatch.setattr(ctx, "caps", caps)
    with pytest.raises(CapabilityMissing, match="shaderFloat64"):
        ops.matmul(a, _tensor(ctx, np.ones((3, 2))))
