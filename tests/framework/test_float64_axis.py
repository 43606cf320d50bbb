"""float64 along an axis in double (``shaders/axis_double.comp``): every reduction over any
axes, argmax/argmin, cumsum/cumprod (exclusive, reversed), softmax (scaled) and
log_softmax, against the ops' float64 references at 1e-12 relative (a float32 computation is
off by ~1e-7, so each comparison fails if the kernel lost precision); odd shapes, outputs
poisoned first; a device without shaderFloat64 refuses with the feature named."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vkumd import ops
from vkumd.compiler.kernels.double import AXIS_DOUBLE
from vkumd.errors import CapabilityMissing, VkumdTypeError
from vkumd.framework.graph.registry import OPS

RELATIVE = 1e-12
REDUCTIONS = ["sum", "mean", "max", "min", "prod", "sum_square", "l1_norm", "l2_norm",
              "logsumexp", "log_sum", "var", "std"]
DIMS = [(1,), (0, 2), (1, 3), None, (2, 3), -1, 0]
SHAPE = (3, 7, 5, 9)


@pytest.fixture(autouse=True)
def _needs_float64(ctx) -> None:
    if not ctx.caps.shader_float64:
        pytest.skip("the device has no shaderFloat64 (vkumd refuses float64 arithmetic)")


def _tensor(ctx, x: np.ndarray):
    return ctx.tensor(np.ascontiguousarray(x), dtype="float64")


def _poisoned(ctx, shape: tuple[int, ...], dtype: str = "float64"):
    fill = np.nan if dtype == "float64" else -7
    return ctx.tensor(np.full(shape, fill, dtype), dtype=dtype)


def _close(got: np.ndarray, want: np.ndarray, what: str, absolute: float = 0.0) -> None:
    # With absolute 0: relative to each entry.
    assert got.shape == want.shape, what
    np.testing.assert_allclose(got, want, rtol=RELATIVE, atol=absolute, err_msg=what)


def _data(rng: np.random.Generator, op: str, shape: tuple[int, ...]) -> np.ndarray:
    # Away from each reference's own cancellation: sums with an offset, products near 1.
    if op == "prod":
        return np.exp(rng.standard_normal(shape) * 0.05)
    offset = {"sum": 3.0, "mean": 3.0, "var": 1.0, "std": 1.0, "log_sum": 8.0}.get(op, 0.0)
    return rng.standard_normal(shape) + offset


def _out_shape(shape: tuple[int, ...], dim, keep: bool) -> tuple[int, ...]:
    axes = range(len(shape)) if dim is None else np.atleast_1d(dim) % len(shape)
    return tuple(1 if i in axes else s for i, s in enumerate(shape) if keep or i not in axes)


@pytest.mark.parametrize("dim", DIMS, ids=str)
@pytest.mark.parametrize("op", REDUCTIONS)
def test_reductions_over_any_axes(ctx, op: str, dim) -> None:
    x = _data(np.random.default_rng(), op, SHAPE)
    for keep in (False, True):
        out = _poisoned(ctx, _out_shape(SHAPE, dim, keep))
        got = getattr(ops, op)(_tensor(ctx, x), dim, keep, out=out)
        assert got is out
        want = OPS[op].reference([x], {"dim": dim, "keepdims": keep, "correction": 1}, None)[0]
        _close(got.numpy(), np.asarray(want), f"{op} {dim} {keep}")


def test_long_rows_keep_double_precision(ctx) -> None:
    """A sum of 100003 values and a logsumexp of large ones: float32 accumulation would be
    off by ~1e-4 here."""
    rng = np.random.default_rng()
    x = rng.uniform(1.0, 2.0, (3, 100003))
    _close(ops.sum(_tensor(ctx, x), -1).numpy(), x.sum(axis=-1), "sum")
    big = rng.standard_normal((5, 4001)) * 3 + 600.0
    want = OPS["logsumexp"].reference([big], {"dim": -1, "keepdims": False}, None)[0]
    _close(ops.logsumexp(_tensor(ctx, big), -1).numpy(), want, "logsumexp")


def test_empty_reductions_give_their_identities(ctx) -> None:
    x = _tensor(ctx, np.zeros((4, 0)))
    for op, identity in [("sum", 0.0), ("prod", 1.0), ("logsumexp", -np.inf),
                         ("l2_norm", 0.0)]:
        np.testing.assert_array_equal(getattr(ops, op)(x, -1).numpy(), np.full(4, identity))


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_argmax_and_argmin(ctx, op: str, axis: int) -> None:
    rng = np.random.default_rng()
    x = np.round(rng.standard_normal((5, 11, 13)) * 2) / 2  # ties
    x[1, 3, 4] = np.nan
    search = getattr(np, op)
    for last in (False, True):
        shape = tuple(s for i, s in enumerate(x.shape) if i != axis % x.ndim)
        out = _poisoned(ctx, shape, "int32")
        got = getattr(ops, op)(_tensor(ctx, x), axis=axis, select_last_index=last, out=out)
        if last:
            want = x.shape[axis] - 1 - search(np.flip(x, axis), axis=axis)
        else:
            want = search(x, axis=axis)
        np.testing.assert_array_equal(got.numpy(), want, err_msg=f"{op} {axis} {last}")


@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scans(ctx, op: str, axis: int) -> None:
    rng = np.random.default_rng()
    x = (rng.uniform(0.5, 1.5, (6, 35, 7)) if op == "cumprod"
         else rng.uniform(1.0, 2.0, (6, 35, 7)))
    for exclusive in (False, True):
        for reverse in (False, True):
            out = _poisoned(ctx, x.shape)
            got = getattr(ops, op)(_tensor(ctx, x), axis=axis, exclusive=exclusive,
                                   reverse=reverse, out=out)
            want = OPS[op].reference([x], {"axis": axis, "exclusive": exclusive,
                                           "reverse": reverse}, None)[0]
            _close(got.numpy(), want, f"{op} {axis} {exclusive} {reverse}")


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_and_log_softmax(ctx, axis: int) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 17, 9)) * 20
    for scale in (None, 0.125, -3.0):
        out = _poisoned(ctx, x.shape)
        got = ops.softmax(_tensor(ctx, x), axis=axis, scale=scale, out=out).numpy()
        want = OPS["softmax"].reference([x, None], {"axis": axis, "scale": scale}, None)[0]
        # Entries far below their row's largest underflow alike; compare the rest.
        _close(np.where(want > 1e-200, got, 0.0), np.where(want > 1e-200, want, 0.0),
               f"softmax {axis} {scale}")
    got = ops.log_softmax(_tensor(ctx, x), axis=axis, out=_poisoned(ctx, x.shape)).numpy()
    _close(got, OPS["log_softmax"].reference([x], {"axis": axis}, None)[0], "log_softmax",
           absolute=1e-14)  # the reference rounds log(sum) near 1 to an ulp of 1
    # The row's largest entry is -log(1 + tiny): log1p of the rest keeps its digits.
    shifted = x - x.max(axis=axis, keepdims=True)
    rest = np.sum(np.where(shifted == 0, 0.0, np.exp(shifted)), axis=axis, keepdims=True)
    _close(got, shifted - np.log1p(rest), "log_softmax, relative")


def test_softmax_special_rows(ctx) -> None:
    x = np.array([[-np.inf, -np.inf], [np.nan, 1.0], [np.inf, 0.0], [0.0, -np.inf]])
    got = ops.softmax(_tensor(ctx, x)).numpy()
    np.testing.assert_array_equal(got, [[0, 0], [np.nan, np.nan], [np.nan, np.nan], [1, 0]])
    got = ops.log_softmax(_tensor(ctx, x)).numpy()
    np.testing.assert_array_equal(got, [[-np.inf, -np.inf], [np.nan, np.nan],
                                        [np.nan, np.nan], [0, -np.inf]])


def test_softmax_mask_is_refused_for_float64(ctx) -> None:
    x = _tensor(ctx, np.ones((2, 3)))
    with pytest.raises(VkumdTypeError, match="mask with float64"):
        ops.softmax(x, mask=_tensor(ctx, np.zeros((2, 3))))


@pytest.mark.parametrize("call", [lambda x: ops.sum(x, -1), lambda x: ops.argmax(x),
                                  lambda x: ops.cumsum(x), lambda x: ops.softmax(x),
                                  lambda x: ops.log_softmax(x)])
def test_no_shader_float64_refuses_with_the_feature(ctx, monkeypatch, call) -> None:
    x = _tensor(ctx, np.ones((2, 3)))
    caps = dataclasses.replace(ctx.caps, shader_float64=False)
    assert AXIS_DOUBLE.variants(caps) == []
    monkeypatch.setattr(ctx, "caps", caps)
    with pytest.raises(CapabilityMissing, match="shaderFloat64"):
        call(x)
