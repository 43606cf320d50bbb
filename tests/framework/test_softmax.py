"""softmax against float64 numpy: dtypes, odd row lengths, masks, -inf rows, reduction paths.

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
    stored,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError

SHAPES = [(1,), (7,), (3, 1), (5, 13), (2, 4099), (1, 30000), (2, 3, 4, 8)]


def reference(x: np.ndarray, scale: float = 1.0, mask: np.ndarray | None = None) -> np.ndarray:
    v = x * scale if mask is None else x * scale + mask
    with np.errstate(invalid="ignore"):
        top = v.max(axis=-1, keepdims=True)
        top = np.where(np.isneginf(top), 0.0, top)
        e = np.exp(v - top)
        total = e.sum(axis=-1, keepdims=True)
        return np.where(total > 0, e / np.where(total > 0, total, 1.0), 0.0)


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_numpy(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    scale = float(rng.uniform(0.1, 2.0))
    out = ops.softmax(tensor(ctx, x, dtype), scale=scale, out=poisoned(ctx, shape, dtype))
    assert out.dtype.name == dtype
    assert_close(out.numpy(), reference(x, scale), dtype, f"{dtype} {shape}")


@pytest.mark.parametrize("shape", [(3, 7), (4, 64), (2, 1000), (3, 4099)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.usefixtures("row_path")
def test_reduction_paths(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=4.0)
    out = ops.softmax(tensor(ctx, x, dtype), out=poisoned(ctx, shape, dtype))
    assert_close(out.numpy(), reference(x), dtype, f"{dtype} {shape}")


MASKS = [((2, 3, 5, 7), (5, 7)), ((2, 3, 5, 8), (2, 1, 5, 8)), ((2, 3, 5, 7), (2, 3, 5, 1)),
         ((4, 9), (9,)), ((4, 12), (4, 12)), ((3, 4), ()), ((2, 3, 6), (3, 1))]


@pytest.mark.parametrize(("shape", "mask_shape"), MASKS, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_mask_broadcasts(ctx, dtype: str, shape: tuple[int, ...],
                         mask_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    mask = sample(rng, dtype, mask_shape, scale=2.0)
    if mask.ndim >= 2 and mask.shape[-1] == shape[-1]:
        mask[..., 0, -1] = -np.inf  # some masked-out entries, but never a whole row
    got = ops.softmax(tensor(ctx, x, dtype), scale=0.5, mask=tensor(ctx, mask, dtype),
                      out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, reference(x, 0.5, mask), dtype, f"{shape} + mask {mask_shape}")


@pytest.mark.parametrize("cols", [5, 8], ids=lambda c: f"cols{c}")
def test_causal_mask_and_all_masked_rows_give_zeros(ctx, cols: int) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 3, cols, cols))
    causal = np.triu(np.full((cols, cols), -np.inf), k=1)
    causal[2, :] = -np.inf  # a row where everything is masked: zeros, not NaN
    got = ops.softmax(ctx.tensor(x.astype(np.float32)), mask=ctx.tensor(causal.astype(np.float32)),
                      out=poisoned(ctx, x.shape, "float32")).numpy()
    assert not np.isnan(got).any()
    np.testing.assert_array_equal(got[:, :, 2, :], 0.0)
    assert_close(got, reference(x, 1.0, causal), "float32", "causal")
    np.testing.assert_allclose(np.delete(got, 2, axis=2).sum(-1), 1.0, rtol=1e-6)


def test_all_neg_inf_input_rows(ctx) -> None:
    x = np.array([[-np.inf] * 4, [0.0, -np.inf, 1.0, -np.inf], [-np.inf] * 4], np.float32)
    got = ops.softmax(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got[0], 0.0)
    np.testing.assert_array_equal(got[2], 0.0)
    np.testing.assert_allclose(got[1], reference(x[1:2].astype(np.float64))[0], rtol=1e-6)


def test_large_values_do_not_overflow(ctx) -> None:
    rng = np.random.default_rng()
    x = stored(rng.uniform(-1e4, 1e4, (6, 301)), "float32")
    got = ops.softmax(ctx.tensor(x.astype(np.float32))).numpy()
    assert_close(got, reference(x), "float32", "large")


def test_many_rows_use_a_2d_grid(ctx) -> None:
    rng = np.random.default_rng()
    shape = (ctx.caps.max_workgroup_count[0] + 77, 3)
    x = sample(rng, "float16", shape)
    got = ops.softmax(tensor(ctx, x, "float16"), out=poisoned(ctx, shape, "float16")).numpy()
    assert_close(got, reference(x), "float16", str(shape))


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)], ids=str)
def test_empty(ctx, shape: tuple[int, ...]) -> None:
    assert ops.softmax(ctx.empty(shape)).shape == shape


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.zeros((5, 7), np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.softmax(np.zeros((5, 7), np.float32))),
        (VkumdTypeError, lambda: ops.softmax(ctx.tensor(np.zeros((5, 7), np.int32)))),
        (VkumdValueError, lambda: ops.softmax(ctx.tensor(np.float32(1.0)))),
        (VkumdTypeError, lambda: ops.softmax(x, scale="2")),
        (VkumdTypeError, lambda: ops.softmax(x, mask=ctx.zeros((5, 7), "float16"))),
        (VkumdValueError, lambda: ops.softmax(x, mask=ctx.zeros((3, 7)))),
        (VkumdValueError, lambda: ops.softmax(x, mask=ctx.zeros((2, 5, 7)))),
        (VkumdValueError, lambda: ops.softmax(ctx.zeros((1,) * 7), mask=ctx.zeros((1,)))),
        (VkumdValueError, lambda: ops.softmax(x, out=ctx.empty((7, 5)))),
        (VkumdTypeError, lambda: ops.softmax(x, out=np.empty((5, 7), np.float32))),
        (VkumdValueError, lambda: ops.softmax(x, out=ctx.empty((5, 7), "float16"))),
    ]
    assert_each_raises(ctx, cases, "softmax")


def test_public_name() -> None:
    assert vkumd.ops.softmax is ops.softmax
