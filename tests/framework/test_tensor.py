"""Tensors: creation, dtypes, conversions, bad input, DLPack, lifetime and leaks."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import vkumd
from vkumd.framework import dtypes


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "int8", "uint8"])
@pytest.mark.parametrize("shape", [(1,), (7,), (3, 5), (2, 3, 17), (0,), (4, 0, 2), ()])
def test_round_trip_is_exact(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    if dtype.startswith("float"):
        array = rng.standard_normal(shape).astype(dtype)
    else:
        info = np.iinfo(dtype)
        array = rng.integers(info.min, info.max, size=shape, endpoint=True).astype(dtype)
    t = ctx.tensor(array)
    assert t.shape == shape and t.dtype.name == dtype and t.nbytes == array.nbytes
    back = t.numpy()
    assert back.dtype == array.dtype and back.shape == shape
    np.testing.assert_array_equal(back, array)


def test_bfloat16_rounds_to_nearest_even_and_keeps_specials(ctx) -> None:
    values = np.array([1.0, 1.00390625, 1.01171875, -2.5, np.inf, -np.inf, 3.0e38, 1e-40],
                      dtype=np.float32)
    t = ctx.tensor(values, dtype="bfloat16")
    back = t.numpy()
    assert back.dtype == np.float32
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1.0).
    assert back[0] == 1.0 and back[1] == 1.0 and back[2] == np.float32(1.015625)
    assert back[3] == -2.5 and np.isposinf(back[4]) and np.isneginf(back[5])
    nan = ctx.tensor(np.array([np.nan], np.float32), dtype="bfloat16").numpy()
    assert np.isnan(nan[0])
    rng = np.random.default_rng()
    x = rng.standard_normal(1000).astype(np.float32)
    rel = np.abs(ctx.tensor(x, dtype=vkumd.bfloat16).numpy() - x) / np.abs(x)
    assert rel.max() <= 2.0**-8


def test_float64_needs_an_explicit_dtype(ctx) -> None:
    data = np.linspace(0, 1, 10)
    with pytest.raises(vkumd.VkumdTypeError, match="dtype="):
        ctx.tensor(data)
    t = ctx.tensor(data, dtype="float32")
    np.testing.assert_allclose(t.numpy(), data.astype(np.float32))
    # numpy's default int64 is stored as int64, exactly (as torch.tensor makes it).
    ints = ctx.tensor([1, 2, 3])
    assert ints.dtype.name == "int64"
    np.testing.assert_array_equal(ints.numpy(), np.array([1, 2, 3], np.int64))


@pytest.mark.parametrize("bad", [np.array([1 + 2j]), np.array([object()]),
                                 np.array(["text"])])
def test_unsupported_arrays_are_refused(ctx, bad) -> None:
    with pytest.raises(vkumd.VkumdTypeError):
        ctx.tensor(bad)
    assert ctx.tensor(np.ones(2, np.float32)).numpy().sum() == 2, "context still usable"


@pytest.mark.parametrize("bad", ["complex64", "uint128", object, "nonsense"])
def test_unsupported_dtypes_are_refused(ctx, bad) -> None:
    with pytest.raises(vkumd.VkumdTypeError, match="not supported"):
        ctx.empty((2,), bad)


def test_non_contiguous_input_is_copied_in_row_major_order(ctx) -> None:
    base = np.arange(60, dtype=np.float32).reshape(6, 10)
    view = base[::2, 3:9].T
    assert not view.flags.c_contiguous
    np.testing.assert_array_equal(ctx.tensor(view).numpy(), view)


@pytest.mark.parametrize("shape", [(-1,), (2, -3)])
def test_negative_shapes_are_refused(ctx, shape) -> None:
    with pytest.raises(vkumd.VkumdValueError, match="negative"):
        ctx.empty(shape)


def test_bad_shape_types_are_refused(ctx) -> None:
    with pytest.raises(vkumd.VkumdTypeError):
        ctx.empty(("a", 2))
    with pytest.raises(vkumd.VkumdTypeError):
        ctx.empty((2.5,))


def test_size_above_max_storage_buffer_range_is_refused(ctx) -> None:
    limit = ctx.caps.max_storage_buffer_range
    used = ctx.memory.used_bytes()
    with pytest.raises(vkumd.VkumdValueError, match=f"maxStorageBufferRange = {limit}"):
        ctx.empty((limit // 4 + 1,), "float32")
    assert ctx.memory.used_bytes() == used


def test_zeros_are_zero_and_empty_has_the_shape(ctx) -> None:
    z = ctx.zeros((33, 3), "float16")
    assert z.numpy().dtype == np.float16 and not z.numpy().any()
    e = ctx.empty((5, 4), vkumd.int32)
    assert e.numpy().shape == (5, 4)


def test_write_checks_shape(ctx) -> None:
    t = ctx.empty((3,), "float32")
    with pytest.raises(vkumd.VkumdValueError, match="shape"):
        t.write(np.ones(4, np.float32))
    t.write(np.array([1, 2, 3], dtype=np.float64))
    np.testing.assert_array_equal(t.numpy(), [1, 2, 3])


def test_array_protocol(ctx) -> None:
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ctx.tensor(data)
    np.testing.assert_array_equal(np.asarray(t), data)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert len(t) == 2 and "shape=(2, 3)" in repr(t)


def test_dlpack_export_shares_host_visible_memory(ctx) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are not host-visible here (a discrete GPU, or "
                    "VKUMD_DEVICE_ONLY_MEMORY=1); tests/runtime/test_device_only_memory.py "
                    "checks that DLPack export is refused")
    data = np.random.default_rng().standard_normal((4, 5)).astype(np.float32)
    t = ctx.tensor(data)
    assert t.__dlpack_device__() == (1, 0)
    view = np.from_dlpack(t)
    np.testing.assert_array_equal(view, data)
    t.write(data * 2)
    np.testing.assert_array_equal(view, data * 2)  # shared, not copied


def test_dlpack_view_keeps_the_tensor_alive(ctx) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are not host-visible here (a discrete GPU, or "
                    "VKUMD_DEVICE_ONLY_MEMORY=1); tests/runtime/test_device_only_memory.py "
                    "checks that DLPack export is refused")
    t = ctx.tensor(np.arange(8, dtype=np.int32))
    view = np.from_dlpack(t)
    del t
    gc.collect()
    filler = ctx.tensor(np.full(8, -1, np.int32))
    np.testing.assert_array_equal(view, np.arange(8))
    del view, filler


def test_dlpack_refuses_bfloat16(ctx) -> None:
    t = ctx.tensor(np.ones(3, np.float32), dtype="bfloat16")
    with pytest.raises(vkumd.VkumdValueError, match="bfloat16"):
        t.__dlpack__()


def test_from_dlpack_copies_into_a_tensor(ctx) -> None:
    data = np.arange(10, dtype=np.float16)
    t = vkumd.from_dlpack(data, ctx)
    assert isinstance(t, vkumd.Tensor) and t.dtype is dtypes.float16
    np.testing.assert_array_equal(t.numpy(), data)
    assert vkumd.from_dlpack(t, ctx) is t


def test_use_after_close_is_a_clear_error() -> None:
    context = vkumd.Context()
    t = context.tensor(np.ones(3, np.float32))
    context.close()
    context.close()  # safe twice
    with pytest.raises(vkumd.ContextClosed, match="closed"):
        t.numpy()
    with pytest.raises(vkumd.ContextClosed):
        context.empty((2,))
    t.release()  # releasing after close does nothing harmful


def test_use_after_release_is_a_clear_error(ctx) -> None:
    t = ctx.tensor(np.ones(3, np.float32))
    t.release()
    t.release()
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        t.numpy()


def test_close_releases_every_vulkan_object() -> None:
    gc.collect()  # earlier tests' cyclic garbage (graphs, views) is not this test's to count
    before = vkumd.live_objects()
    with vkumd.Context() as context:
        tensors = [context.tensor(np.ones(100, np.float32)) for _ in range(10)]
        assert vkumd.live_objects().get("Block", 0) >= 1
    del tensors
    gc.collect()
    assert vkumd.live_objects() == before


def test_a_thousand_tensors_leak_nothing(ctx) -> None:
    rng = np.random.default_rng()
    gc.collect()
    objects_before = vkumd.live_objects()
    used_before = ctx.memory.used_bytes()
    for i in range(1000):
        t = ctx.tensor(rng.standard_normal(int(rng.integers(1, 2000))).astype(np.float32))
        if i % 100 == 0:
            assert t.numpy().size == t.size
        del t
    gc.collect()
    assert vkumd.live_objects() == objects_before
    assert ctx.memory.used_bytes() == used_before
