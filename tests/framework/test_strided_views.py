"""Strided views, as PyTorch's: transpose, permute, .T, expand, indexing with steps, narrow,
diagonal, squeeze and unsqueeze share memory and cost no launch; ops read them (the binary
kernel in place on CPU drivers, every other kernel from one copy launch first); writes
through them land in the base's memory.

Every view is checked three ways against numpy on fresh random data of odd shapes: its
values, its aliasing (strides and storage offset equal numpy's view of the same array, in
elements, and a write through the base is seen through the view), and an op reading it.
Results written by ops start poisoned.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_elementwise import DTYPES, sample, stored

import vkumd
from vkumd.framework import ops
from vkumd.testing.numerics import poisoned, rel_error

SHAPE = (3, 5, 7)

# (name, view of a vkumd tensor, the same view of a numpy array)
VIEWS = [
    ("T", lambda t: t.T, lambda a: a.T),
    ("transpose02", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("transpose-1-2", lambda t: t.transpose(-1, -2), lambda a: a.swapaxes(-1, -2)),
    ("permute", lambda t: t.permute(1, 2, 0), lambda a: a.transpose(1, 2, 0)),
    ("permute_tuple", lambda t: t.permute((2, 0, 1)), lambda a: a.transpose(2, 0, 1)),
    ("int", lambda t: t[1], lambda a: a[1]),
    ("slice", lambda t: t[1:3], lambda a: a[1:3]),
    ("steps", lambda t: t[:, ::2, 1:6:3], lambda a: a[:, ::2, 1:6:3]),
    ("negative_steps", lambda t: t[::-1, :, ::-2], lambda a: a[::-1, :, ::-2]),
    ("negative_inner", lambda t: t[..., 5:0:-2], lambda a: a[..., 5:0:-2]),
    ("ellipsis_int", lambda t: t[..., 4], lambda a: a[..., 4]),
    ("none", lambda t: t[None, :, 2:], lambda a: a[None, :, 2:]),
    ("narrow", lambda t: t.narrow(2, 1, 4), lambda a: a[:, :, 1:5]),
    ("narrow_negative_start", lambda t: t.narrow(1, -3, 2), lambda a: a[:, 2:4]),
    ("diagonal", lambda t: t.diagonal(0, 1, 2), lambda a: np.diagonal(a, 0, 1, 2)),
    ("diagonal_above", lambda t: t.diagonal(2, 1, 2), lambda a: np.diagonal(a, 2, 1, 2)),
    ("diagonal_below", lambda t: t.diagonal(-1, 0, 2), lambda a: np.diagonal(a, -1, 0, 2)),
    ("expand", lambda t: t[:, :1].expand(3, 4, 7), lambda a: np.broadcast_to(a[:, :1],
                                                                             (3, 4, 7))),
    ("expand_new_dim", lambda t: t[0].expand(2, -1, -1),
     lambda a: np.broadcast_to(a[0], (2, 5, 7))),
    ("broadcast_to", lambda t: t[:, 2:3, :].broadcast_to((3, 6, 7)),
     lambda a: np.broadcast_to(a[:, 2:3], (3, 6, 7))),
    ("unsqueeze_of_transpose", lambda t: t.T.unsqueeze(1), lambda a: a.T[:, None]),
    ("squeeze_of_slice", lambda t: t[:, 3:4].squeeze(1), lambda a: a[:, 3]),
    ("view_of_view", lambda t: t.T[1:, ::2][::-1], lambda a: a.T[1:, ::2][::-1]),
]


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng()


def numpy_layout(view: np.ndarray, base: np.ndarray) -> tuple[tuple[int, ...], int]:
    """numpy's element strides and offset of ``view`` in ``base``'s memory."""
    item = base.itemsize
    offset = (view.__array_interface__["data"][0] - base.__array_interface__["data"][0])
    return tuple(s // item for s in view.strides), offset // item


@pytest.mark.parametrize(("name", "view", "same"), VIEWS, ids=[v[0] for v in VIEWS])
def test_a_view_aliases_what_numpy_views_and_costs_no_launch(ctx, rng, monkeypatch, name,
                                                             view, same) -> None:
    host = sample(rng, "float32", SHAPE)
    base = ctx.tensor(host)
    launches: list[object] = []
    run = ctx.run
    monkeypatch.setattr(ctx, "run", lambda plan, operands: (launches.append(plan),
                                                            run(plan, operands)))
    v = view(base)
    want = same(host)
    assert launches == []  # a view is bookkeeping only
    assert v.shape == want.shape
    strides, offset = numpy_layout(want, host)
    sizes_above_one = [i for i, n in enumerate(want.shape) if n > 1]
    assert [v.stride(i) for i in sizes_above_one] == [strides[i] for i in sizes_above_one]
    assert v.storage_offset() == offset
    assert v.is_contiguous() == want.flags.c_contiguous
    assert v.allocation is base.allocation
    np.testing.assert_array_equal(v.numpy(), want)
    # A write through the base shows through the view: they share memory.
    fresh = sample(rng, "float32", SHAPE)
    base.write(fresh)
    np.testing.assert_array_equal(v.numpy(), same(fresh))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize(("name", "view", "same"), VIEWS, ids=[v[0] for v in VIEWS])
def test_ops_read_views(ctx, rng, dtype, name, view, same) -> None:
    host = sample(rng, dtype, SHAPE)
    base = ctx.tensor(host, dtype=dtype)
    h = base.numpy().astype(np.float64)
    v = view(base)
    other = sample(rng, dtype, v.shape)
    out = poisoned(ctx, v.shape, dtype)
    ops.add(v, ctx.tensor(other, dtype=dtype), out=out)
    if dtype == "int32":  # wrapping, as the kernel adds
        want = (same(h).astype(np.int64) + other.astype(np.int64)).astype(np.int32)
        np.testing.assert_array_equal(out.numpy(), want)
    else:
        want = stored(same(h) + other.astype(np.float64), dtype)
        assert rel_error(out.numpy(), want) < (1e-6 if dtype == "float32" else 1e-2)
    np.testing.assert_array_equal(v.contiguous().numpy(), stored(same(h), dtype))
    np.testing.assert_array_equal(base.numpy(), stored(h, dtype))  # reading wrote nothing


def _counting(ctx, monkeypatch) -> list[object]:
    launches: list[object] = []
    run = ctx.run
    monkeypatch.setattr(ctx, "run", lambda plan, operands: (launches.append(plan),
                                                            run(plan, operands)))
    return launches


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize(("op", "ref"), [("add", np.add), ("mul", np.multiply),
                                         ("sub", np.subtract)], ids=["add", "mul", "sub"])
def test_the_binary_kernel_reads_views_in_place_on_a_cpu_driver(ctx, rng, monkeypatch, dtype,
                                                                op, ref) -> None:
    if ctx.caps.device_type != "cpu":
        pytest.skip(f"views are read in place on CPU drivers; this is a {ctx.caps.device_type}")
    a = stored(sample(rng, dtype, (7, 11, 13)).astype(np.float64), dtype)
    b = stored(sample(rng, dtype, (13, 9)).astype(np.float64), dtype)
    ta, tb = ctx.tensor(a, dtype=dtype), ctx.tensor(b, dtype=dtype)
    cases = [  # (vkumd operands, numpy operands): offsets, negative steps, broadcasts
        ((ta[2:6, ::-2, 1::3], tb[3:9, 2:6]), (a[2:6, ::-2, 1::3], b[3:9, 2:6])),
        ((ta.transpose(0, 2)[3], tb.T[2:9, 4]), (a.swapaxes(0, 2)[3], b.T[2:9, 4])),
        ((ta[:, 4], tb[12, :]), (a[:, 4], b[12, :])),  # (7, 13) against a (9,) row: refused
        ((ta[1:, 3:, 7], tb.T[2:3, 5:]), (a[1:, 3:, 7], b.T[2:3, 5:])),
        ((tb.T, ta[3, ::-1, 2:11]), (b.T, a[3, ::-1, 2:11])),
    ]
    for (x, y), (hx, hy) in cases:
        try:
            want_shape = np.broadcast_shapes(hx.shape, hy.shape)
        except ValueError:
            with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
                getattr(ops, op)(x, y)
            continue
        out = poisoned(ctx, want_shape, dtype)
        launches = _counting(ctx, monkeypatch)
        getattr(ops, op)(x, y, out=out)
        assert len(launches) == 1  # no copy of either view
        monkeypatch.undo()
        want = ref(hx.astype(np.float64), hy.astype(np.float64))
        if dtype == "int32":
            np.testing.assert_array_equal(out.numpy(), ref(hx.astype(np.int64),
                                                           hy.astype(np.int64)).astype(np.int32))
        else:
            assert rel_error(out.numpy(), stored(want, dtype)) < (
                1e-6 if dtype == "float32" else 1e-2)
    np.testing.assert_array_equal(ta.numpy(), a)  # reading wrote nothing
    np.testing.assert_array_equal(tb.numpy(), b)


@pytest.mark.parametrize(("name", "view", "same"), VIEWS, ids=[v[0] for v in VIEWS])
def test_casts_and_scales_read_views_in_place_on_a_cpu_driver(ctx, rng, monkeypatch, name,
                                                              view, same) -> None:
    if ctx.caps.device_type != "cpu":
        pytest.skip(f"views are read in place on CPU drivers; this is a {ctx.caps.device_type}")
    host = sample(rng, "float32", SHAPE)
    v = view(ctx.tensor(host))
    want = same(host.astype(np.float64))
    half = poisoned(ctx, v.shape, "float16")
    launches = _counting(ctx, monkeypatch)
    ops.cast(v, "float16", out=half)
    scaled = v * 3.0
    assert len(launches) == 2  # one launch each, no copy of the view
    monkeypatch.undo()
    np.testing.assert_array_equal(half.numpy(), want.astype(np.float16))
    assert rel_error(scaled.numpy(), want * 3.0) < 1e-6


def test_a_view_of_the_tensor_an_op_writes_is_copied_first(ctx, rng, monkeypatch) -> None:
    h = sample(rng, "float32", (9, 9))
    t = ctx.tensor(h)
    launches = _counting(ctx, monkeypatch)
    ops.add(t.T, t, out=t)  # read in place, invocations would see each other's writes
    assert len(launches) == 2
    np.testing.assert_array_equal(t.numpy(), h.T + h)


def test_gpus_copy_views_for_the_binary_kernel(ctx, rng, monkeypatch) -> None:
    import dataclasses

    from vkumd.framework.strided import reads_views_in_place
    assert reads_views_in_place(dataclasses.replace(ctx.caps, device_type="cpu"))
    for gpu in ("discrete", "integrated", "virtual"):
        assert not reads_views_in_place(dataclasses.replace(ctx.caps, device_type=gpu))
    monkeypatch.setattr("vkumd.framework.strided.reads_views_in_place", lambda caps: False)
    h = sample(rng, "float32", (6, 10))
    t = ctx.tensor(h)
    out = poisoned(ctx, (5, 6), "float32")
    launches = _counting(ctx, monkeypatch)
    ops.sub(t[::-1, 1::2].T, t[0, 3:8].reshape(5, 1), out=out)
    assert len(launches) == 3  # a copy of each view (the row starts at an offset), the kernel
    np.testing.assert_array_equal(out.numpy(), h[::-1, 1::2].T - h[0, 3:8].reshape(5, 1))


def test_kernels_of_other_families_read_views(ctx, rng) -> None:
    a = sample(rng, "float32", (9, 13))
    b = sample(rng, "float32", (11, 9))
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    # matmul of two transposed views, a reduction and a softmax of a stepped slice.
    assert rel_error((ta.T @ tb.T).numpy(), a64.T @ b64.T) < 1e-5
    assert rel_error(ta[:, ::3].sum(dim=-1).numpy(), a64[:, ::3].sum(-1)) < 1e-5
    s = a64[::-2, 1:]
    e = np.exp(s - s.max(-1, keepdims=True))
    assert rel_error(ta[::-2, 1:].softmax().numpy(), e / e.sum(-1, keepdims=True)) < 1e-5
    assert rel_error(ops.copy(ta.T).numpy(), a64.T) == 0
    assert rel_error(ta.T.reshape(-1).numpy(), a64.T.reshape(-1)) == 0


@pytest.mark.parametrize("dtype", DTYPES)
def test_writes_through_views(ctx, rng, dtype) -> None:
    h = stored(sample(rng, dtype, (6, 9)).astype(np.float64), dtype)
    t = ctx.tensor(h, dtype=dtype)
    x = stored(sample(rng, dtype, (2, 9)).astype(np.float64), dtype)
    t[1:3] = ctx.tensor(x, dtype=dtype)
    h[1:3] = x
    t[:, ::2] = 3
    h[:, ::2] = 3
    y = stored(sample(rng, dtype, (5,)).astype(np.float64), dtype)
    t[::-2, 7] = y[:3]  # a numpy array, uploaded first
    h[::-2, 7] = y[:3]
    t.T[1:4, 5].copy_(ctx.tensor(y[:1], dtype=dtype))  # broadcast from one element
    h.T[1:4, 5] = y[:1]
    np.testing.assert_array_equal(t.numpy(), h)
    view = t[:, 1::3]
    view += 2
    h[:, 1::3] += 2
    np.testing.assert_array_equal(t.numpy(), stored(h, dtype))
    np.testing.assert_array_equal(view.numpy(), stored(h[:, 1::3], dtype))


def test_overlapping_copies_and_the_same_elements(ctx, rng) -> None:
    h = sample(rng, "float32", (7, 4))
    t = ctx.tensor(h)
    t[1:] = t[:-1]  # shares memory: copied out first, as PyTorch
    h[1:] = h[:-1].copy()
    t[2] = t[2]
    t.T[:] = t.T  # the same elements: nothing moves
    np.testing.assert_array_equal(t.numpy(), h)
    t += t.T.T  # a view of t read by an op writing t
    np.testing.assert_array_equal(t.numpy(), h + h)


def test_ops_write_into_views_through_copy_and_write(ctx, rng) -> None:
    h = sample(rng, "float32", (5, 8))
    t = ctx.tensor(h)
    ops.copy(ctx.tensor(h[:, :3].T.copy()), out=t[:, 5:].T)
    h[:, 5:] = h[:, :3]
    t[::2, ::3].write(np.full((3, 3), 7, np.float32))
    h[::2, ::3] = 7
    np.testing.assert_array_equal(t.numpy(), h)


def test_contiguous_copies_once_and_keeps_contiguous_tensors(ctx, rng) -> None:
    t = ctx.tensor(sample(rng, "float32", (4, 6)))
    assert t.contiguous() is t and t.is_contiguous() and t.stride() == (6, 1)
    row = t[2]
    assert row.is_contiguous() and row.contiguous() is row and row.storage_offset() == 12
    c = t.T.contiguous()
    assert c.is_contiguous() and c.allocation is not t.allocation and c.stride() == (4, 1)
    np.testing.assert_array_equal(c.numpy(), t.numpy().T)


def test_views_share_lifetime_with_their_base(ctx, rng) -> None:
    h = sample(rng, "float32", (5, 6))
    t = ctx.tensor(h)
    v = t.T[::2]
    t.release()
    np.testing.assert_array_equal(v.numpy(), h.T[::2])  # the view keeps the memory
    v.release()


def test_dlpack_shares_a_views_elements(ctx, rng) -> None:
    t = ctx.tensor(sample(rng, "float32", (5, 6)))
    if t.allocation is None or not t.allocation.host_visible:
        pytest.skip("the tensor lives in memory the host cannot map")
    v = t.T[1:, ::2]
    shared = np.from_dlpack(v)
    np.testing.assert_array_equal(shared, t.numpy().T[1:, ::2])
    assert shared.strides == (4, 2 * 6 * 4)


def test_reshape_of_a_strided_view_copies_and_view_of_contiguous_data_shares(ctx, rng) -> None:
    h = sample(rng, "float32", (4, 6))
    t = ctx.tensor(h)
    r = t[1:3].reshape(3, 4)
    assert r.allocation is t.allocation and r.storage_offset() == 6
    flat = t.T.reshape(-1)
    assert flat.allocation is not t.allocation
    np.testing.assert_array_equal(flat.numpy(), h.T.reshape(-1))


def test_traced_views_lower_to_permute_and_slice_nodes(ctx, rng) -> None:
    h = sample(rng, "float32", (6, 5))

    def f(x):
        return x.T[1:4] + x.narrow(1, 1, 3).transpose(0, 1) * 2.0

    compiled = vkumd.compile(f, (h,), ctx=ctx)
    got = compiled(ctx.tensor(h))
    got = got[0] if isinstance(got, (list, tuple)) else got
    want = h.T[1:4] + 2 * h[:, 1:4].T
    assert rel_error(got.numpy(), want.astype(np.float64)) < 1e-6
    # A strided view passed to a compiled function is read as its values.
    got = compiled(ctx.tensor(np.ascontiguousarray(h.T)).T)
    got = got[0] if isinstance(got, (list, tuple)) else got
    assert rel_error(got.numpy(), want.astype(np.float64)) < 1e-6


BAD = [
    (lambda t: t.transpose(0, 3), vkumd.VkumdValueError, "out of range"),
    (lambda t: t.permute(0, 0, 1), vkumd.VkumdValueError, "permutation"),
    (lambda t: t.permute(0, 1), vkumd.VkumdValueError, "permutation"),
    (lambda t: t[:, ::0], vkumd.VkumdValueError, "step 0"),
    (lambda t: t.T[1:][::0], vkumd.VkumdValueError, "step 0"),
    (lambda t: t[3], vkumd.VkumdIndexError, "out of range"),
    (lambda t: t[0, 0, 0, 0], vkumd.VkumdIndexError, "indices"),
    (lambda t: t[[0, 1]], vkumd.VkumdTypeError, "fancy"),
    (lambda t: t.narrow(1, 3, 3), vkumd.VkumdValueError, "outside"),
    (lambda t: t.narrow(3, 0, 1), vkumd.VkumdValueError, "out of range"),
    (lambda t: t.diagonal(0, 1, 1), vkumd.VkumdValueError, "different"),
    (lambda t: t.expand(3, 4, 7), vkumd.VkumdValueError, "broadcast"),
    (lambda t: t.expand(5, 7), vkumd.VkumdValueError, "fewer"),
    (lambda t: t.as_strided((3, 5, 7), (35, 7, 2), 0), vkumd.VkumdValueError, "reaches"),
]


@pytest.mark.parametrize(("make", "error", "match"), BAD, ids=range(len(BAD)))
def test_bad_views_are_refused_clearly(ctx, rng, make, error, match) -> None:
    t = ctx.tensor(sample(rng, "float32", SHAPE))
    with pytest.raises(error, match=match):
        make(t)


def test_bad_writes_are_refused_clearly(ctx, rng) -> None:
    t = ctx.tensor(sample(rng, "float32", (4, 6)))
    before = t.numpy()
    with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
        t[1:3] = ctx.tensor(np.ones((3, 6), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="broadcast"):
        t[:, ::2] = np.ones((4, 4), np.float32)
    with pytest.raises(vkumd.VkumdValueError, match="shape"):
        t.T.write(np.ones((4, 6), np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="strided view"):
        ops.add(t.T, t.T, out=t.T)
    with vkumd.Context() as other, pytest.raises(vkumd.VkumdValueError, match="context"):
        t[0] = other.tensor(np.ones(6, np.float32))
    np.testing.assert_array_equal(t.numpy(), before)
