"""``any`` and ``all`` over any set of axes, with ``keepdim``, against float64 numpy.

Odd shapes, zeros planted in whole slices (so every answer occurs), NaN and inf (nonzero, as
PyTorch counts them), every stored type they take, empty and 0-d inputs, a compiled graph;
outputs start poisoned (0xAB, neither 0 nor 1).
"""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.framework.graph.registry import OPS

DIMS = [None, (1,), (0, 2), (1, 3), -1, 0, (0, 1, 2, 3)]
TYPES = ["float32", "float16", "bfloat16", "int32", "bool"]
POISON = 0xAB


def _data(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Values with zeros scattered and planted along whole slices, and a NaN and an inf
    among the floats; exactly representable in ``dtype``."""
    x = rng.integers(-3, 4, shape).astype(np.float64)  # about one in seven is zero
    x[:, 1] = 0  # a slice of zeros: any over it is false
    x[0] = np.where(x[0] == 0, 2, x[0])  # a slice with none: all over it is true
    if dtype != "int32":
        x = x * 0.37
        x[-1, 0, 0, 0], x[-1, -1, -1, -1] = np.nan, np.inf
    return x


def _expected(op: str, x: np.ndarray, dim, keep: bool) -> np.ndarray:
    return OPS[op].reference([x], {"dim": dim, "keepdims": keep}, None)[0]


def _poisoned(ctx, shape: tuple[int, ...], dtype: str = "bool") -> vkumd.Tensor:
    return ctx.tensor(np.full(shape, POISON, np.uint8).view(dtype))


@pytest.mark.parametrize("dtype", TYPES)
@pytest.mark.parametrize("op", ["any", "all"])
def test_any_axes_and_keepdim_match_numpy(ctx, op: str, dtype: str) -> None:
    rng = np.random.default_rng()
    shape = (3, 7, 5, 9)
    x = _data(rng, shape, dtype)
    if dtype == "bool":
        x = (x != 0).astype(np.float64)
    t = ctx.tensor(x.astype(np.int32 if dtype == "int32" else np.float32), dtype=dtype)
    for dim in DIMS:
        for keep in (False, True):
            want = _expected(op, x, dim, keep)
            assert np.array_equal(want, getattr(np, op)(x != 0, axis=dim, keepdims=keep))
            out = _poisoned(ctx, want.shape)
            got = getattr(ops, op)(t, dim, keep, out=out)
            assert got is out and got.dtype.name == "bool"
            np.testing.assert_array_equal(got.numpy().view(np.uint8), want.astype(np.uint8),
                                          err_msg=f"{op} {dtype} dim={dim} keep={keep}")


@pytest.mark.parametrize("op", ["any", "all"])
def test_a_uint8_out_takes_the_mask(ctx, op: str) -> None:
    x = np.random.default_rng().integers(0, 2, (5, 11)).astype(np.float32)
    out = _poisoned(ctx, (11,), "uint8")
    got = getattr(ops, op)(ctx.tensor(x), 0, out=out)
    assert got is out
    np.testing.assert_array_equal(got.numpy(), getattr(np, op)(x != 0, axis=0))


@pytest.mark.parametrize("op", ["any", "all"])
def test_empty_and_zero_d(ctx, op: str) -> None:
    empty = ctx.tensor(np.zeros((0, 3), np.float32))
    np.testing.assert_array_equal(getattr(ops, op)(empty, 0).numpy(),
                                  np.full(3, op == "all", np.bool_))
    assert getattr(ops, op)(empty, 1).numpy().shape == (0,)
    for value in (0.0, -2.5):
        scalar = ctx.tensor(np.array(value, np.float32))
        got = getattr(ops, op)(scalar, keepdim=True).numpy()
        assert got.shape == () and got == (value != 0)


def test_traced_and_compiled(ctx) -> None:
    def fn(x):
        return ops.any(x, (0, 2)), ops.all(x, -1, True), ops.all(x)

    rng = np.random.default_rng()
    x = _data(rng, (4, 6, 5, 3), "float32")[..., 0]
    tensors = {"x": ctx.tensor(x.astype(np.float32))}
    cf = vkumd.compile(fn, tensors)
    want = [np.any(x != 0, axis=(0, 2)), np.all(x != 0, axis=-1, keepdims=True),
            np.all(x != 0)]
    for got, w in zip(cf(**tensors), want, strict=True):
        np.testing.assert_array_equal(got.numpy(), w)
