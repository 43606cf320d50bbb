"""sum, mean and max over the last dimension against float64 numpy.

Sums use data with a positive offset so the float64 reference is not itself a cancellation;
outputs start poisoned (NaN). Shapes are listed in the parameter ids.
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

SHAPES = [(1,), (7,), (3, 1), (5, 13), (2, 4099), (1, 30000), (2, 3, 8)]
REFERENCES = {"sum": np.sum, "mean": np.mean, "max": np.max}


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", list(REFERENCES))
def test_matches_numpy(ctx, name: str, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, offset=0.0 if name == "max" else 1.0)
    got = getattr(ops, name)(tensor(ctx, x, dtype), out=poisoned(ctx, shape[:-1], dtype))
    assert got.shape == shape[:-1] and got.dtype.name == dtype
    expected = stored(REFERENCES[name](x, axis=-1), dtype)  # one rounding to the output type
    assert_close(got.numpy(), expected, "float32" if name == "max" else dtype,
                 f"{name} {dtype} {shape}")


@pytest.mark.parametrize("shape", [(3, 7), (4, 256), (2, 4099)], ids=str)
@pytest.mark.usefixtures("row_path")
def test_reduction_paths(ctx, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape, offset=1.0)
    t = ctx.tensor(x.astype(np.float32))
    for name, reference in REFERENCES.items():
        got = getattr(ops, name)(t, out=poisoned(ctx, shape[:-1], "float32")).numpy()
        assert_close(got, reference(x, axis=-1), "float32", f"{name} {shape}")


def test_keepdims_and_negative_rows(ctx) -> None:
    x = -np.arange(1.0, 25.0).reshape(2, 3, 4).astype(np.float32)
    assert ops.max(ctx.tensor(x), keepdims=True).shape == (2, 3, 1)
    np.testing.assert_array_equal(ops.max(ctx.tensor(x), keepdims=True).numpy(),
                                  x.max(-1, keepdims=True))
    np.testing.assert_array_equal(ops.sum(ctx.tensor(x)).numpy(), x.sum(-1))


def test_max_with_neg_inf(ctx) -> None:
    x = np.array([[-np.inf, -np.inf], [-np.inf, 2.0]], np.float32)
    np.testing.assert_array_equal(ops.max(ctx.tensor(x)).numpy(), [-np.inf, 2.0])


@pytest.mark.parametrize("cols", [1, 6, 8, 4099])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.usefixtures("row_path")
def test_reductions_propagate_nan(ctx, dtype: str, cols: int) -> None:
    # A NaN anywhere in a row (first, middle or last, beside +-inf) makes every reduction NaN.
    rng = np.random.default_rng()
    x = rng.standard_normal((4, cols)).astype(np.float32)
    x[1:, [0, cols // 2, cols - 1][:3]] = np.inf
    for row, col in ((1, 0), (2, cols // 2), (3, cols - 1)):
        x[row, col] = np.nan
    for name, reference in REFERENCES.items():
        got = getattr(ops, name)(tensor(ctx, x, dtype), out=poisoned(ctx, (4,), dtype)).numpy()
        expected = reference(x.astype(np.float64), axis=-1)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), f"{name} {dtype}")


def test_many_rows_use_a_2d_grid(ctx) -> None:
    rng = np.random.default_rng()
    shape = (ctx.caps.max_workgroup_count[0] + 9, 4)
    x = sample(rng, "float32", shape, offset=1.0)
    got = ops.mean(ctx.tensor(x.astype(np.float32)), out=poisoned(ctx, shape[:1], "float32"))
    assert_close(got.numpy(), x.mean(-1), "float32", str(shape))


def test_empty(ctx) -> None:
    np.testing.assert_array_equal(ops.sum(ctx.empty((3, 0))).numpy(), [0.0, 0.0, 0.0])
    assert ops.max(ctx.empty((0, 4))).shape == (0,)
    with pytest.raises(VkumdValueError, match="empty"):
        ops.max(ctx.empty((2, 0)))
    with pytest.raises(VkumdValueError, match="empty"):
        ops.mean(ctx.empty((2, 0)))


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((5, 7), np.float32))
    cases = [
        (VkumdTypeError, lambda: ops.sum(ctx.tensor(np.ones((5, 7), np.int32)))),
        (VkumdTypeError, lambda: ops.mean(np.ones((5, 7), np.float32))),
        (VkumdValueError, lambda: ops.max(ctx.tensor(np.float32(3.0)))),
        (VkumdValueError, lambda: ops.sum(x, out=ctx.empty((5, 1)))),
        (VkumdValueError, lambda: ops.sum(x, keepdims=True, out=ctx.empty((5,)))),
        (VkumdValueError, lambda: ops.mean(x, out=ctx.empty((5,), "float16"))),
        (VkumdTypeError, lambda: ops.max(x, keepdims=1)),
    ]
    assert_each_raises(ctx, cases)


def test_public_names() -> None:
    for name in REFERENCES:
        assert getattr(vkumd.ops, name) is getattr(ops, name)
