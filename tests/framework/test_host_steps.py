"""The host-step ops (nonzero, unique, compress, masked_select): each reads its inputs back,
computes in numpy and uploads the result; checked against numpy on odd shapes, empty and
full results, NaN, and refused inside a graph."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import OPS, GraphBuilder, GraphError


def _sparse(rng: np.random.Generator, shape: tuple[int, ...], density: float) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    return np.where(rng.random(shape) < density, x, 0).astype(np.float32)


@pytest.mark.parametrize("shape", [(7,), (3, 5), (2, 3, 7), (1, 1, 1)])
@pytest.mark.parametrize("density", [0.0, 0.4, 1.0])
def test_nonzero_matches_numpy(ctx, shape: tuple[int, ...], density: float) -> None:
    x = _sparse(np.random.default_rng(), shape, density)
    got = ops.nonzero(ctx.tensor(x))
    assert got.dtype.name == "int32"
    np.testing.assert_array_equal(got.numpy(), np.argwhere(x))
    split = ctx.tensor(x).nonzero(as_tuple=True)
    assert len(split) == x.ndim
    for axis, want in enumerate(np.nonzero(x)):
        np.testing.assert_array_equal(split[axis].numpy(), want)


def test_nonzero_counts_nan_and_reads_every_dtype(ctx) -> None:
    x = np.array([[0, np.nan], [-0.0, 1]], np.float16)
    np.testing.assert_array_equal(ops.nonzero(ctx.tensor(x)).numpy(), [[0, 1], [1, 1]])
    ints = np.array([0, 3, 0, -2], np.int32)
    np.testing.assert_array_equal(ops.nonzero(ctx.tensor(ints)).numpy(), [[1], [3]])


@pytest.mark.parametrize("sorted_", [True, False])
@pytest.mark.parametrize("shape", [(13,), (3, 7), (0,)])
def test_unique_matches_numpy(ctx, shape: tuple[int, ...], sorted_: bool) -> None:
    rng = np.random.default_rng()
    x = rng.integers(-3, 4, shape).astype(np.float32)
    values, inverse, counts = ops.unique(ctx.tensor(x), sorted=sorted_, return_inverse=True,
                                         return_counts=True)
    want, first, want_inverse, want_counts = np.unique(
        x.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
    if not sorted_:  # order of first occurrence
        order = np.argsort(first)
        rank = np.argsort(order)
        want, want_counts, want_inverse = want[order], want_counts[order], rank[want_inverse]
    np.testing.assert_array_equal(values.numpy(), want)
    np.testing.assert_array_equal(inverse.numpy(), want_inverse.reshape(shape))
    np.testing.assert_array_equal(counts.numpy(), want_counts)
    # the inverse rebuilds x
    np.testing.assert_array_equal(values.numpy()[inverse.numpy()], x)


def test_unique_collapses_nan_as_numpy(ctx) -> None:
    x = np.array([2, np.nan, 1, np.nan, 2], np.float32)
    values, counts = ops.unique(ctx.tensor(x), return_counts=True)
    np.testing.assert_array_equal(values.numpy(), [1, 2, np.nan])
    np.testing.assert_array_equal(counts.numpy(), [1, 2, 2])
    first = ctx.tensor(x).unique(sorted=False)
    np.testing.assert_array_equal(first.numpy(), [2, np.nan, 1])


def test_unique_along_a_dimension(ctx) -> None:
    x = np.array([[1, 0, 1, 0], [2, 5, 2, 5], [1, 0, 1, 0]], np.int32)
    rows, inverse = ops.unique(ctx.tensor(x), dim=0, return_inverse=True)
    np.testing.assert_array_equal(rows.numpy(), [[1, 0, 1, 0], [2, 5, 2, 5]])
    np.testing.assert_array_equal(inverse.numpy(), [0, 1, 0])
    cols = ops.unique(ctx.tensor(x), dim=-1, sorted=False)
    np.testing.assert_array_equal(cols.numpy(), [[1, 0], [2, 5], [1, 0]])


@pytest.mark.parametrize("axis", [None, 0, 1, -1])
def test_compress_matches_numpy(ctx, axis: int | None) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((5, 7)).astype(np.float32)
    length = x.size if axis is None else x.shape[axis]
    condition = (rng.random(length - 1) < 0.5).astype(np.uint8)  # one short: the rest left out
    got = ops.compress(ctx.tensor(x), ctx.tensor(condition), axis=axis)
    np.testing.assert_array_equal(got.numpy(), np.compress(condition, x, axis=axis))


def test_masked_select_broadcasts_and_selects_none_or_all(ctx) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 5)).astype(np.float32)
    mask = (rng.random((1, 5)) < 0.5).astype(np.float32)
    got = ctx.tensor(x).masked_select(ctx.tensor(mask))
    np.testing.assert_array_equal(got.numpy(), x[np.broadcast_to(mask, x.shape) != 0])
    none = ops.masked_select(ctx.tensor(x), ctx.tensor(np.zeros((3, 5), np.uint8)))
    assert none.shape == (0,) and none.dtype.name == "float32"
    every = ops.masked_select(ctx.tensor(x), ctx.tensor(np.ones((3, 5), np.uint8)))
    np.testing.assert_array_equal(every.numpy(), x.reshape(-1))


def test_references_are_the_numpy_functions_in_float64() -> None:
    x = np.array([[0, 2.5], [2.5, 0]])
    (found,) = OPS["nonzero"].reference([x], {}, [])
    assert found.dtype == np.float64
    np.testing.assert_array_equal(found, [[0, 1], [1, 0]])
    values, first, inverse, counts = OPS["unique"].reference(
        [x], {"dim": None, "sorted": True}, [])
    np.testing.assert_array_equal(values, [0, 2.5])
    np.testing.assert_array_equal(inverse, [0, 1, 1, 0])


@pytest.mark.parametrize("op", ["nonzero", "unique", "compress", "masked_select",
                                "non_max_suppression"])
def test_a_graph_cannot_hold_a_host_step(op: str) -> None:
    assert OPS[op].host_step is not None
    b = GraphBuilder("g")
    x = b.input("x", (4,), "float32")
    args = [x, b.input("c", (4,), "float32")] if OPS[op].arity()[0] == 2 else [x]
    with pytest.raises(GraphError, match="depends on the input's values"):
        getattr(b, op)(*args, **({"max_output_boxes_per_class": 1}
                                 if op == "non_max_suppression" else {}))


def test_bad_calls_are_refused(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(VkumdValueError, match="axis 2 is out of range"):
        ops.unique(x, dim=2)
    with pytest.raises(VkumdTypeError, match="sorted"):
        ops.unique(x, sorted="yes")
    with pytest.raises(VkumdValueError, match="must be 1-D"):
        ops.compress(x, ctx.tensor(np.ones((2, 3), np.uint8)))
    with pytest.raises(VkumdValueError, match="more than the length of axis 0"):
        ops.compress(x, ctx.tensor(np.ones(3, np.uint8)), axis=0)
    with pytest.raises(VkumdValueError, match="broadcast"):
        ops.masked_select(x, ctx.tensor(np.ones((2, 2), np.uint8)))
    with pytest.raises(VkumdTypeError, match="as_tuple"):
        ops.nonzero(x, as_tuple=1)


def test_non_max_suppression_keeps_the_best_of_overlapping_boxes(ctx) -> None:
    boxes = np.array([[[0, 0, 1, 1], [0, 0.1, 1, 1.1], [0, 2, 1, 3], [5, 5, 4, 4]]],
                     np.float32)  # the last box's corners in the other order
    scores = np.array([[[0.9, 0.95, 0.5, 0.1], [0.2, 0.1, 0.3, 0.0]]], np.float32)
    kept = ops.non_max_suppression(ctx.tensor(boxes), ctx.tensor(scores),
                                   max_output_boxes_per_class=3, iou_threshold=0.5)
    assert kept.dtype.name == "int32"
    np.testing.assert_array_equal(kept.numpy(), [[0, 0, 1], [0, 0, 2], [0, 0, 3],
                                                 [0, 1, 2], [0, 1, 0], [0, 1, 3]])
    floor = ops.non_max_suppression(ctx.tensor(boxes), ctx.tensor(scores),
                                    max_output_boxes_per_class=9, iou_threshold=0.5,
                                    score_threshold=0.4)
    np.testing.assert_array_equal(floor.numpy(), [[0, 0, 1], [0, 0, 2]])
    none = ops.non_max_suppression(ctx.tensor(boxes), ctx.tensor(scores),
                                   max_output_boxes_per_class=0)
    assert none.shape == (0, 3)
    with pytest.raises(VkumdValueError, match="must be"):
        ops.non_max_suppression(ctx.tensor(boxes), ctx.tensor(scores[:, :, :2]),
                                max_output_boxes_per_class=1)


def test_a_traced_function_refuses_a_host_step_with_the_reason(ctx) -> None:
    import vkumd

    x = ctx.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(GraphError, match="call vkumd.ops.unique eagerly"):
        vkumd.compile(lambda t: ops.unique(ops.relu(t), return_counts=True), [x])
