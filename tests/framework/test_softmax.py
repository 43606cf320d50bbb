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


@pytest.mark.parametrize(("shape", "axis"), [((5, 13), 0), ((3, 6, 5), 1), ((4, 3, 2, 8), -3),
                                           ((2, 4099, 3), 1)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_other_axes(ctx, dtype: str, shape: tuple[int, ...], axis: int) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=3.0)
    out = ops.softmax(tensor(ctx, x, dtype), scale=0.75, axis=axis,
                      out=poisoned(ctx, shape, dtype))
    want = np.moveaxis(reference(np.moveaxis(x, axis, -1), 0.75), -1, axis)
    assert_close(out.numpy(), want, dtype, f"{dtype} {shape} axis={axis}")


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
        (VkumdTypeError, lambda: ops.softmax(x, out=ctx.empty((5, 7), "float16"))),
        (VkumdValueError, lambda: ops.softmax(x, axis=2)),
        (VkumdTypeError, lambda: ops.softmax(x, axis=1.0)),
        (VkumdValueError, lambda: ops.softmax(x, axis=0, mask=ctx.zeros((5, 7)))),
    ]
    assert_each_raises(ctx, cases, "softmax")


def test_public_name() -> None:
    assert vkumd.ops.softmax is ops.softmax


# Row lengths for the numerics tests: odd ones run the VEC=1 kernels, multiples of 4 VEC=4;
# the long ones give each lane several units.
NUMERIC_COLS = [13, 64, 1001, 1024]


def ieee_reference(x: np.ndarray, scale: float = 1.0,
                   mask: np.ndarray | None = None) -> np.ndarray:
    """What numpy/torch give in float64: a row whose ``x * scale + mask`` holds NaN or +inf is
    all NaN; an all -inf row is zeros (vkumd's choice, where numpy gives NaN)."""
    with np.errstate(invalid="ignore", over="ignore"):
        v = x * scale if mask is None else x * scale + mask
    bad = (np.isnan(v) | np.isposinf(v)).any(axis=-1, keepdims=True)
    expected = reference(np.where(bad, 0.0, v))
    return np.where(bad, np.nan, expected)


def _mask_for(rng: np.random.Generator, kind: str, dtype: str,
              shape: tuple[int, ...]) -> np.ndarray | None:
    if kind == "none":
        return None
    if kind == "per-row":
        return sample(rng, dtype, shape[:-1] + (1,), scale=4.0)
    mask = sample(rng, dtype, shape, scale=4.0)
    mask[:, 1::3] = -np.inf  # masked-out entries, never a whole row
    return mask


@pytest.mark.parametrize("mask_kind", ["none", "row", "per-row"])
@pytest.mark.parametrize("scale", [3.0, -3.0, 0.37, -0.125])
@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_scale_after_the_maximum_keeps_digits(ctx, dtype: str, cols: int, scale: float,
                                              mask_kind: str) -> None:
    # Rows near +-1e4: scale * x rounded to float32 is off by ~1e-3 before the maximum is
    # subtracted (measured before the fix: relative error 7e-4 at scale 3); scale * (x - max)
    # subtracts first, exactly for x near the maximum. (-0.125 without a mask is the path
    # that needs no reference: x * scale is exact.)
    rng = np.random.default_rng()
    shape = (2, cols)
    x = sample(rng, dtype, shape, offset=1e4)
    x[1] = stored(-x[1], dtype)
    mask = _mask_for(rng, mask_kind, dtype, shape)
    got = ops.softmax(tensor(ctx, x, dtype), scale=scale,
                      mask=None if mask is None else tensor(ctx, mask, dtype),
                      out=poisoned(ctx, shape, dtype)).numpy()
    assert_close(got, reference(x, scale, mask), dtype,
                 f"{dtype} {shape} scale={scale} mask={mask_kind}")


# (what, x, mask entries) for one row each; None: leave the random value.
NON_FINITE_ROWS = [
    ("NaN first", (0, np.nan), None), ("NaN middle", ("mid", np.nan), None),
    ("NaN last", (-1, np.nan), None), ("+inf first", (0, np.inf), None),
    ("+inf middle", ("mid", np.inf), None), ("+inf last", (-1, np.inf), None),
    ("NaN in the mask", None, ("mid", np.nan)), ("+inf in the mask", None, (-1, np.inf)),
    # The mask is added: NaN + -inf is NaN, so a masked-out NaN still poisons the row.
    ("NaN masked out", ("mid", np.nan), ("mid", -np.inf)),
    ("-inf entries", (0, -np.inf), (-1, -np.inf)),
    ("all -inf", (slice(None), -np.inf), None),
    ("all masked", None, (slice(None), -np.inf)),
    ("finite", None, None),
]


@pytest.mark.parametrize("scale", [1.0, 0.5, -2.0])
@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_nan_and_inf_entries(ctx, dtype: str, cols: int, scale: float) -> None:
    # NaN or +inf in x * scale + mask makes the whole row NaN (GLSL's max() may drop a NaN,
    # which before the fix left the rest of the row finite); -inf entries get 0; a row with
    # nothing but -inf gives zeros. With scale < 0, x = -inf is +inf: the row is NaN, and
    # x = +inf is -inf: probability 0. The output starts at a finite sentinel here, so a NaN
    # cannot be one left unwritten.
    rng = np.random.default_rng()
    shape = (len(NON_FINITE_ROWS), cols)
    x = sample(rng, dtype, shape, scale=3.0)
    mask = sample(rng, dtype, shape)
    for r, (_, at_x, at_mask) in enumerate(NON_FINITE_ROWS):
        for values, at in ((x, at_x), (mask, at_mask)):
            if at is not None:
                values[r, cols // 2 if at[0] == "mid" else at[0]] = at[1]
    out = tensor(ctx, np.full(shape, 7.0), dtype)
    got = ops.softmax(tensor(ctx, x, dtype), scale=scale, mask=tensor(ctx, mask, dtype),
                      out=out).numpy()
    expected = ieee_reference(x, scale, mask)
    for r, (what, _, _) in enumerate(NON_FINITE_ROWS):
        if np.isnan(expected[r]).any():
            assert np.isnan(got[r]).all(), f"{what} (scale {scale}): not all NaN: {got[r]}"
        else:
            assert_close(got[r], expected[r], dtype, f"{what} (scale {scale})")


@pytest.mark.parametrize("cols", NUMERIC_COLS, ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_scale_times_x_may_overflow(ctx, dtype: str, cols: int) -> None:
    # x * scale past float32's range, although the probabilities are ordinary: before the fix
    # the row came out NaN (inf - inf). A row of equal values is uniform, one slightly lower
    # value changes little.
    big = {"float32": 3e38, "bfloat16": 3e38, "float16": 6e4}[dtype]
    scale = {"float32": 3.0, "bfloat16": 3.0, "float16": 1e35}[dtype]
    x = stored(np.full((2, cols), big), dtype)
    x[1, 0] = stored(np.nextafter(np.float16(big), np.float16(0)) if dtype == "float16"
                     else big * (1 - 1e-38 / big), dtype)
    got = ops.softmax(tensor(ctx, x, dtype), scale=scale,
                      out=poisoned(ctx, x.shape, dtype)).numpy()
    expected = np.stack([reference(x[r] - x[r].max(), scale) for r in range(2)])
    assert_close(got, expected, dtype, f"{dtype} x={big:g} scale={scale:g}")


@pytest.mark.parametrize("cols", [13, 64], ids=lambda c: f"cols{c}")
@pytest.mark.parametrize("scale", [0.0, np.inf, -np.inf, np.nan], ids=str)
def test_degenerate_scales(ctx, scale: float, cols: int) -> None:
    # softmax(x * scale + mask) in IEEE arithmetic: scale 0 leaves the mask (0 * inf is NaN),
    # an infinite scale sends each entry to +-inf (0 * inf is NaN again), NaN gives NaN.
    rng = np.random.default_rng()
    x = sample(rng, "float32", (4, cols))
    x[1] = -np.abs(x[1]) - 1.0  # all negative: with scale +inf every entry is -inf, zeros
    x[2] = np.abs(x[2]) + 1.0
    x[3, 0] = np.inf
    mask = sample(rng, "float32", (4, cols))
    out = tensor(ctx, np.full(x.shape, 7.0), "float32")
    got = ops.softmax(tensor(ctx, x, "float32"), scale=scale,
                      mask=tensor(ctx, mask, "float32"), out=out).numpy()
    expected = ieee_reference(x, scale, mask)
    bad = np.isnan(expected).any(-1)
    assert np.isnan(got[bad]).all(), f"scale {scale}: {got[bad]}"
    if (~bad).any():
        assert_close(got[~bad], expected[~bad], "float32", f"scale {scale}")


@pytest.mark.parametrize("shape", [(3, 7), (4, 256), (2, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_reference_and_nan_rows_on_every_reduction_path(ctx, shape: tuple[int, ...]) -> None:
    # The lanes' references and NaN marks meet in the row reductions: each path combines them.
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape, offset=-1e4)
    x[0, shape[1] // 2] = np.nan
    mask = sample(rng, "float32", shape)
    out = ops.softmax(ctx.tensor(x.astype(np.float32)), scale=2.5,
                      mask=ctx.tensor(mask.astype(np.float32)),
                      out=poisoned(ctx, shape, "float32")).numpy()
    assert np.isnan(out[0]).all()
    assert_close(out[1:], reference(x[1:], 2.5, mask[1:]), "float32", str(shape))
