"""layer_norm and rms_norm against float64 numpy: dtypes, affine parameters, odd rows, paths.

Outputs start poisoned (NaN). Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (  # noqa: F401  (row_path is a fixture)
    FLOATS,
    assert_close,
    assert_each_raises,
    assert_usable,
    poisoned,
    row_path,
    sample,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

SHAPES = [(7,), (3, 2), (5, 13), (2, 4099), (1, 30000), (2, 3, 64)]


def layer_ref(x, weight=None, bias=None, eps=1e-5):
    y = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def rms_ref(x, weight=None, eps=1e-6):
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps)
    return y if weight is None else y * weight


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=2.0, offset=0.5)
    w = sample(rng, dtype, shape[-1:])
    b = sample(rng, dtype, shape[-1:])
    got = ops.layer_norm(tensor(ctx, x, dtype), tensor(ctx, w, dtype), tensor(ctx, b, dtype),
                         out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, layer_ref(x, w, b), dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_rms_norm(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    w = sample(rng, dtype, shape[-1:])
    got = ops.rms_norm(tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                       out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, rms_ref(x, w), dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("affine", ["none", "weight", "bias"])
def test_optional_parameters(ctx, affine: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (4, 37))
    w = sample(rng, "float32", (37,))
    weight = ctx.tensor(w.astype(np.float32)) if affine == "weight" else None
    bias = ctx.tensor(w.astype(np.float32)) if affine == "bias" else None
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32)), weight, bias, eps=1e-3).numpy()
    expected = layer_ref(x, w if weight else None, w if bias else None, eps=1e-3)
    assert_close(got, expected, "float32", affine)
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), weight, eps=0.0).numpy()
    assert_close(got, rms_ref(x, w if weight else None, eps=0.0), "float32", affine)


@pytest.mark.parametrize("shape", [(3, 7), (4, 256), (2, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_reduction_paths(ctx, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape)
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), layer_ref(x), "float32", f"layer {shape}")
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), rms_ref(x), "float32", f"rms {shape}")


def test_large_offset_keeps_its_digits(ctx) -> None:
    # Rows centred far from zero: a naive E[x^2] - E[x]^2 would cancel catastrophically.
    rng = np.random.default_rng()
    x = sample(rng, "float32", (8, 1024), scale=1.0, offset=1000.0)
    got = ops.layer_norm(ctx.tensor(x.astype(np.float32))).numpy()
    assert_close(got, layer_ref(x), "float32", "offset 1000")


def test_constant_rows_give_zeros(ctx) -> None:
    x = np.full((3, 10), 4.25, np.float32)
    got = ops.layer_norm(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got, 0.0)


def test_many_rows_use_a_2d_grid(ctx) -> None:
    rng = np.random.default_rng()
    shape = (ctx.caps.max_workgroup_count[0] + 5, 2)
    x = sample(rng, "float32", shape)
    got = ops.rms_norm(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape, "float32"))
    assert_close(got.numpy(), rms_ref(x), "float32", str(shape))


def test_empty(ctx) -> None:
    assert ops.layer_norm(ctx.empty((0, 5))).shape == (0, 5)
    assert ops.rms_norm(ctx.empty((3, 0)), ctx.empty((0,))).shape == (3, 0)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((5, 7), np.float32))
    w7 = ctx.tensor(np.ones(7, np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.layer_norm(ctx.tensor(np.ones((5, 7), np.int32)))),
        (VkumdTypeError, lambda: ops.layer_norm(np.ones((5, 7), np.float32))),
        (VkumdValueError, lambda: ops.layer_norm(ctx.tensor(np.float32(1.0)))),
        (VkumdValueError, lambda: ops.layer_norm(x, ctx.zeros((5,)))),
        (VkumdValueError, lambda: ops.layer_norm(x, w7, ctx.zeros((1, 7)))),
        (VkumdTypeError, lambda: ops.layer_norm(x, ctx.zeros((7,), "float16"))),
        (VkumdTypeError, lambda: ops.layer_norm(x, w7, np.ones(7, np.float32))),
        (VkumdValueError, lambda: ops.layer_norm(x, eps=-1.0)),
        (VkumdTypeError, lambda: ops.layer_norm(x, eps="1e-5")),
        (VkumdValueError, lambda: ops.layer_norm(x, out=ctx.empty((5, 6)))),
        (VkumdValueError, lambda: ops.rms_norm(x, ctx.zeros((8,)))),
        (VkumdValueError, lambda: ops.rms_norm(x, out=ctx.empty((5, 7), "bfloat16"))),
        (VkumdValueError, lambda: ops.rms_norm(x, eps=float("nan"))),
    ]
    assert_each_raises(ctx, cases, "norm")


def test_public_names() -> None:
    assert vkumd.ops.layer_norm is ops.layer_norm
    assert vkumd.ops.rms_norm is ops.rms_norm
