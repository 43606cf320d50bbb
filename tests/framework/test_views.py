"""Views and windows: reshape views and slices share memory and lifetime; ops.slice,
concat and split copy.

Hazard tracking is checked by the synchronization validation the suite turns on
(``tests/conftest.py``): a chain of ops alternating a tensor and its view must be ordered,
and any missing barrier is a validation error. Values are compared with numpy on fresh
random data; ``out=`` outputs start as NaN.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from test_elementwise import DTYPES, assert_matches, sample, stored

import vkumd
from vkumd.framework import ops


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def put(ctx, rng, dtype: str, shape: tuple[int, ...]) -> tuple[vkumd.Tensor, np.ndarray]:
    host = sample(rng, dtype, shape)
    return ctx.tensor(host, dtype=dtype), ctx.tensor(host, dtype=dtype).numpy()


def nan_out(ctx, shape: tuple[int, ...], dtype: str) -> vkumd.Tensor:
    if dtype == "int32":
        return ctx.tensor(np.full(shape, -123456789, np.int32))
    return ctx.tensor(np.full(shape, np.nan, np.float32), dtype=dtype)


# -- views: memory, hazards, lifetime ------------------------------------------------------


def test_a_view_binds_the_same_bytes_and_writes_show_through(ctx, rng) -> None:
    base, h = put(ctx, rng, "float32", (3, 5, 7))
    view = base.reshape(15, 7)
    assert view.binding == base.binding and view.address == base.address
    assert view.nbytes == base.nbytes
    ops.scale(view, 2.0, out=view)  # a device write through the view
    np.testing.assert_array_equal(base.numpy(), 2 * h)
    fresh = sample(rng, "float32", (3, 5, 7))
    base.write(fresh)  # a host write through the base
    np.testing.assert_array_equal(view.numpy(), fresh.reshape(15, 7))


def test_work_alternating_base_and_view_is_ordered(ctx, rng) -> None:
    base, h = put(ctx, rng, "float32", (4, 33))
    flat = base.flatten()
    col = base.unsqueeze(-1)
    expected = h.copy()  # float32, rounded after each step as the kernels round
    for step in range(6):
        # Each op reads what the previous one wrote through the other tensor.
        if step % 3 == 0:
            ops.add(flat, 1.0, out=flat)
            expected = expected + np.float32(1)
        elif step % 3 == 1:
            ops.mul(base, -0.5, out=base)
            expected = expected * np.float32(-0.5)
        else:
            ops.add(col, ops.reshape(base, (4, 33, 1)), out=col)
            expected = expected * 2
    total = flat.sum(keepdim=True)  # reads the last write
    np.testing.assert_array_equal(base.numpy(), expected)
    np.testing.assert_allclose(total.numpy(), [expected.astype(np.float64).sum()], rtol=1e-5)


@pytest.mark.parametrize("order", ["view first", "base first"])
def test_memory_returns_once_every_view_is_gone(ctx, rng, order) -> None:
    ctx.synchronize()
    gc.collect()
    used = ctx.memory.used_bytes()
    base, h = put(ctx, rng, "float32", (6, 10))
    view = base.reshape(60)
    inner = view.reshape(2, 3, 10)  # a view of a view
    gc.collect()
    in_use = ctx.memory.used_bytes()
    first, second = (view, base) if order == "view first" else (base, view)
    first.release()
    assert first.released and not second.released
    # The memory stays: fill the pool with same-sized tensors, which must not reuse it.
    others = [ctx.tensor(np.zeros((6, 10), np.float32)) for _ in range(3)]
    ctx.synchronize()
    np.testing.assert_array_equal(second.numpy().reshape(60), h.reshape(60))
    np.testing.assert_array_equal(inner.numpy().reshape(60), h.reshape(60))
    for t in others:
        t.release()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == in_use
    second.release()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == in_use
    del inner  # the last tensor over the memory, freed by the garbage collector
    gc.collect()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == used


def test_a_dlpack_export_of_a_view_outlives_every_tensor(ctx, rng) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are in memory the host cannot map; DLPack exports need it")
    base, h = put(ctx, rng, "float32", (4, 6))
    view = base.reshape(24)
    shared = np.from_dlpack(view)
    ctx.synchronize()
    gc.collect()
    used = ctx.memory.used_bytes()
    base.release()
    view.release()
    others = [ctx.tensor(np.zeros(24, np.float32)) for _ in range(3)]  # must not reuse it
    np.testing.assert_array_equal(shared, h.reshape(24))
    for t in others:
        t.release()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == used
    del shared
    gc.collect()
    ctx.synchronize()
    assert ctx.memory.used_bytes() < used


def test_views_of_empty_and_released_tensors(ctx) -> None:
    empty = ctx.empty((0, 4))
    assert empty.reshape(4, 0, 3).shape == (4, 0, 3) and empty.reshape(-1).shape == (0,)
    assert empty.reshape(4, 0).binding is None
    gone = ctx.tensor(np.ones((2, 2), np.float32))
    gone.release()
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        gone.view(4)
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        gone.alias((4,))


def test_a_view_is_refused_as_out_of_a_kernel_reading_its_base(ctx) -> None:
    x = ctx.tensor(np.ones((3, 4), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="same tensor as an input"):
        ops.transpose(x.reshape(4, 3), 0, 1, out=x)


# -- slicing -------------------------------------------------------------------------------

INDICES = [
    (0,), (-1,), (slice(1, 4),), (slice(-3, None),), (slice(None), slice(2, 5)),
    (Ellipsis, 2), (Ellipsis, slice(1, -1)), (1, slice(None), 3), (slice(0, 2), Ellipsis, -2),
    (None, slice(1, 3)), (slice(5, 100),), (slice(3, 1),), (1, 2, 3, 4),
    (slice(1, 4), slice(0, 3), slice(2, 6), slice(1, 4)), (Ellipsis,), (slice(None),),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("key", INDICES, ids=str)
def test_slicing_matches_numpy_and_shares_memory(ctx, rng, dtype, key) -> None:
    t, h = put(ctx, rng, dtype, (5, 7, 9, 6))
    got = t[key]
    want = h[key]
    assert got.shape == want.shape and got.dtype is t.dtype
    np.testing.assert_array_equal(got.numpy(), want)
    if got.size:
        assert got.allocation is t.allocation
        got.copy_(0)  # a view: the zeros land in the source, as numpy's view
        h[key] = 0
        np.testing.assert_array_equal(t.numpy(), h)


def test_slice_op_with_out_and_axes(ctx, rng) -> None:
    t, h = put(ctx, rng, "float32", (6, 11, 3))
    out = nan_out(ctx, (6, 3, 2), "float32")
    assert ops.slice(t, [-5, 1], [9, 100], axes=[1, 2], out=out) is out
    np.testing.assert_array_equal(out.numpy(), h[:, -5:9, 1:])
    np.testing.assert_array_equal(ops.slice(t, 2, 4).numpy(), h[2:4])
    np.testing.assert_array_equal(t[2:2].numpy(), h[2:2])


def test_bad_slices_are_clear_errors(ctx) -> None:
    t = ctx.tensor(np.ones((3, 4), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="step 0"):
        t[::0]
    for fancy in ([0, 1], np.array([0]), t, True, 1.0, "a"):
        with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
            t[fancy]
    for key in (3, -4, (0, 4), (0, 0, 0)):
        with pytest.raises(IndexError):
            t[key]
        with pytest.raises(vkumd.VkumdIndexError, match="out of range|indices"):
            t[key]
    with pytest.raises(vkumd.VkumdValueError, match="one ..."):
        t[..., 0, ...]
    with pytest.raises(vkumd.VkumdTypeError, match="bounds"):
        t[0.5:2]
    with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
        t[0] = np.ones(5, np.float32)
    with pytest.raises(vkumd.VkumdValueError, match="starts"):
        ops.slice(t, [0, 1], [1])
    with pytest.raises(vkumd.VkumdValueError, match="repeat"):
        ops.slice(t, [0, 1], [1, 2], axes=[1, -1])
    with pytest.raises(vkumd.VkumdValueError, match="out of range"):
        ops.slice(t, [0], [1], axes=[2])
    with pytest.raises(vkumd.VkumdValueError, match="at most 6"):
        ops.slice(ctx.empty((3,) * 7), [0] * 7, [2] * 7)
    with pytest.raises(TypeError, match="0-d"):
        list(ctx.empty(()))


def test_iteration_yields_rows(ctx, rng) -> None:
    t, h = put(ctx, rng, "int32", (3, 4))
    rows = list(t)
    assert len(rows) == 3
    for row, want in zip(rows, h, strict=True):
        np.testing.assert_array_equal(row.numpy(), want)


# -- concat and split ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_concat_matches_numpy(ctx, rng, dtype, axis) -> None:
    sizes = [3, 0, 5, 1]
    shapes = []
    for n in sizes:
        shape = [4, 7, 6]
        shape[axis] = n
        shapes.append(tuple(shape))
    pairs = [put(ctx, rng, dtype, s) for s in shapes]
    want = np.concatenate([h for _, h in pairs], axis=axis)
    got = ops.concat([t for t, _ in pairs], axis)
    np.testing.assert_array_equal(got.numpy(), want)
    out = nan_out(ctx, want.shape, dtype)
    assert ops.concat([t for t, _ in pairs], axis=axis, out=out) is out
    np.testing.assert_array_equal(out.numpy(), want)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("sizes", "axis"), [(2, 0), (3, 1), ([1, 0, 4, 2], 1), ([6], -1),
                                              (4, -1), ([2, 3], 0)], ids=str)
def test_split_and_concat_round_trip(ctx, rng, dtype, sizes, axis) -> None:
    t, h = put(ctx, rng, dtype, (5, 7, 6))
    pieces = t.split(sizes, dim=axis)
    length = h.shape[axis]
    if isinstance(sizes, int):
        cuts = list(range(sizes, length, sizes))
    else:
        cuts = list(np.cumsum(sizes)[:-1])
    want = np.split(h, cuts, axis=axis)
    assert [p.shape for p in pieces] == [w.shape for w in want]
    for piece, w in zip(pieces, want, strict=True):
        np.testing.assert_array_equal(piece.numpy(), w)
    np.testing.assert_array_equal(ops.concat(pieces, axis).numpy(), h)
    assert_matches(ops.split(t, sizes, axis)[0].numpy(), stored(want[0], dtype), dtype)


def test_bad_concat_and_split_are_clear_errors(ctx) -> None:
    a = ctx.tensor(np.ones((2, 3), np.float32))
    with pytest.raises(vkumd.VkumdTypeError, match="non-empty"):
        ops.concat([])
    with pytest.raises(vkumd.VkumdTypeError, match="non-empty"):
        ops.concat(a)
    with pytest.raises(vkumd.VkumdTypeError, match="Tensor"):
        ops.concat([a, np.ones((2, 3), np.float32)])
    with pytest.raises(vkumd.VkumdValueError, match="agree except along axis 0"):
        ops.concat([a, ctx.empty((2, 4))])
    with pytest.raises(vkumd.VkumdValueError, match="agree"):
        ops.concat([a, ctx.empty((2, 3, 1))])
    with pytest.raises(vkumd.VkumdTypeError, match="cast them"):
        ops.concat([a, ctx.empty((2, 3), "int32")])
    with pytest.raises(vkumd.VkumdValueError, match="0-d"):
        ops.concat([ctx.empty(()), ctx.empty(())])
    with pytest.raises(vkumd.VkumdValueError, match="out of range"):
        ops.concat([a, a], axis=2)
    big = ctx.empty((2, 6))
    with pytest.raises(vkumd.VkumdValueError, match="same tensor as an input"):
        ops.concat([big.reshape(2, 6)], axis=1, out=big)
    with pytest.raises(vkumd.VkumdValueError, match="add up"):
        a.split([1, 1], dim=1)
    with pytest.raises(vkumd.VkumdValueError, match="add up"):
        a.split([3, -1], dim=1)
    with pytest.raises(vkumd.VkumdValueError, match="at least 1"):
        a.split(0)
    with pytest.raises(vkumd.VkumdTypeError, match="ints"):
        a.split([1.5, 1.5], dim=1)
    with pytest.raises(vkumd.VkumdValueError, match="0-d"):
        ops.split(ctx.empty(()), 1)
    with vkumd.Context() as other:
        with pytest.raises(vkumd.VkumdValueError, match="different context"):
            ops.concat([a, other.tensor(np.ones((2, 3), np.float32))])


def test_operators_views_and_slices_replay_in_a_graph(ctx, rng) -> None:
    """Numbers are filled by a recorded launch, views keep their memory inside the graph, and
    every replay recomputes from the current inputs."""
    x = ctx.tensor(np.zeros((6, 8), np.float32))
    out = nan_out(ctx, (3, 8), "float32")
    with ctx.capture() as graph:
        y = (1 - x.reshape(48)) / 3  # a view, then two filled numbers
        ops.concat([y.reshape(6, 8)[1:3], y.view(6, 8)[-1:]], out=out)
    del y
    gc.collect()
    assert np.isnan(out.numpy()).all()  # capture ran nothing
    for _ in range(2):
        a = sample(rng, "float32", (6, 8))
        x.write(a)
        graph.replay()
        want = (1 - a.astype(np.float64)) / 3
        assert_matches(out.numpy(), stored(np.concatenate([want[1:3], want[-1:]]), "float32"),
                       "float32")
    graph.release()
