"""``ops.argmin`` and ``select_last_index`` (both searches) against numpy on the values the
tensors store: ties within and across lanes, NaN (the first, or the last, counts as the
extreme), infinities, other axes and keepdims, every row-reduction path; int32 outputs start
poisoned (no index is -7)."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (  # noqa: F401  (row_path is a fixture)
    FLOATS,
    assert_each_raises,
    row_path,
    sample,
    tensor,
)

from vkumd import ops
from vkumd.errors import VkumdTypeError
from vkumd.framework.graph.registry import OPS


def _expected(op: str, x: np.ndarray, axis: int, keep: bool, last: bool) -> np.ndarray:
    attrs = {"axis": axis, "keepdims": keep, "select_last_index": last}
    return OPS[op].reference([x], attrs, None)[0].astype(np.int32)


def _run(ctx, op: str, t, axis: int, keep: bool, last: bool, shape) -> np.ndarray:
    out = ctx.tensor(np.full(shape, -7, np.int32))
    got = getattr(ops, op)(t, axis=axis, keepdims=keep, select_last_index=last, out=out)
    assert got is out
    return got.numpy()


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", ["argmax", "argmin"])
def test_any_axis_both_ends(ctx, op: str, dtype: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, (3, 7, 5, 9), scale=10.0)
    x = np.round(x / 4.0) * 4.0  # coarse values: many ties
    t = tensor(ctx, x, dtype)
    for axis in (0, 1, 2, -1):
        for keep in (False, True):
            for last in (False, True):
                shape = list(x.shape)
                shape[axis] = 1
                expected = _expected(op, x, axis, keep, last)
                got = _run(ctx, op, t, axis, keep, last,
                           tuple(shape) if keep else expected.shape)
                np.testing.assert_array_equal(got, expected, f"{op} {axis} {keep} {last}")


@pytest.mark.usefixtures("row_path")
@pytest.mark.parametrize("cols", [5, 64, 1001])
def test_ties_nan_and_infinities(ctx, cols: int) -> None:
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, (7, cols)).astype(np.float32)
    x[0, [cols - 1, cols // 2, 1 % cols]] = -3.0  # ties of the minimum, across lanes
    x[1, [cols - 1, cols // 3]] = np.nan
    x[1, 0] = -np.inf
    x[2] = np.inf
    x[3, [0, cols // 2]] = -np.inf
    x[4] = np.nan
    x[5] = 2.5  # a constant row
    x[6, [0, cols - 1]] = 3.0  # ties of the maximum
    t = ctx.tensor(x)
    for op in ("argmin", "argmax"):
        for last in (False, True):
            got = _run(ctx, op, t, -1, False, last, (7,))
            np.testing.assert_array_equal(got, _expected(op, x, -1, False, last),
                                          f"{op} last={last}")


def test_bad_inputs(ctx) -> None:
    t = ctx.tensor(np.ones((2, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.argmin(t, select_last_index=1)),
        (VkumdTypeError, lambda: ops.argmax(t, select_last_index="yes")),
        (VkumdTypeError, lambda: ops.argmin(ctx.tensor(np.ones((2, 3), np.int32)))),
    ], "arg")
