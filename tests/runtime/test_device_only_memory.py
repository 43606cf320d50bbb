"""Tensors in memory the host cannot map, as on a discrete GPU, exercised on any device.

A context made with ``device_only_memory=True`` (``VKUMD_DEVICE_ONLY_MEMORY=1``) never maps
tensor memory, so every host read and write goes through staging memory and copy commands:
the paths a discrete GPU takes, which a unified-memory driver such as lavapipe never runs
otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vkumd
from vkumd import ops, settings
from vkumd.framework import dtypes
from vkumd.runtime import transfer as transfer_module
from vkumd.runtime.memory import MemoryPool, MemoryUsage, MiB
from vkumd.runtime.transfer import Transfers
from vkumd.testing.numerics import poisoned, rel_error

DTYPES = ("float32", "float16", "bfloat16", "int32", "int8", "uint8")
# 0-d, empty, one element, odd and prime sizes (3 int8 bytes is not a 4-byte multiple).
SHAPES = ((), (0,), (3, 0), (1,), (3,), (5, 7), (1031,), (2, 3, 17))


def _random(rng: np.random.Generator, shape: tuple[int, ...], name: str) -> np.ndarray:
    if name in ("int8", "uint8", "int32"):
        info = np.iinfo(name)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=name)
    storage = np.float16 if name == "float16" else np.float32
    return rng.standard_normal(shape).astype(storage)


@pytest.fixture(scope="module")
def dctx() -> Iterator[vkumd.Context]:
    """A context whose tensors live in device-only memory."""
    context = vkumd.Context(device_only_memory=True)
    yield context
    context.close()


def test_every_variable_has_its_readme_row() -> None:
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    assert "VKUMD_DEVICE_ONLY_MEMORY" in settings.VARIABLES
    missing = [name for name, meaning in settings.VARIABLES.items()
               if f"| `{name}` | {meaning} |" not in readme]
    assert not missing, f"README's variable table lacks or differs for {missing}"


def test_option_and_environment_variable(ctx, monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_DEVICE_ONLY_MEMORY", "1")
    from_env = MemoryPool(ctx.device.handle, ctx.caps, block_size=1 * MiB)
    explicit = MemoryPool(ctx.device.handle, ctx.caps, block_size=1 * MiB, device_only=False)
    monkeypatch.setenv("VKUMD_DEVICE_ONLY_MEMORY", "0")
    off = MemoryPool(ctx.device.handle, ctx.caps, block_size=1 * MiB)
    try:
        assert from_env.device_only and not from_env.tensors_mapped
        assert not explicit.device_only and not off.device_only
        assert off.tensors_mapped == explicit.tensors_mapped
    finally:
        for pool in (from_env, explicit, off):
            pool.release()


def test_tensors_are_unmapped_and_staging_is_mapped(dctx) -> None:
    assert dctx.memory.device_only and not dctx.memory.tensors_mapped
    t = dctx.empty((4, 4))
    assert not t.allocation.host_visible and t.allocation.block.mapped is None
    with pytest.raises(vkumd.VkumdValueError, match="cannot map"):
        t.allocation.host_view()
    for usage in (MemoryUsage.UPLOAD, MemoryUsage.READBACK):
        staging = dctx.memory.allocate(100, usage)
        assert staging.host_visible
        dctx.memory.free(staging)


@pytest.mark.parametrize("name", DTYPES)
def test_round_trip_every_dtype_and_odd_shape(dctx, name) -> None:
    rng = np.random.default_rng()
    dtype = dtypes.dtype(name)
    for shape in SHAPES:
        data = _random(rng, shape, name)
        want = dtypes.from_storage(dtypes.to_storage(data, dtype), dtype)
        t = dctx.tensor(data, dtype=name)
        assert t.allocation is None or not t.allocation.host_visible
        got = t.numpy()
        assert got.shape == shape, f"{name} {shape}"
        np.testing.assert_array_equal(got, want, err_msg=f"{name} {shape}")
        again = _random(rng, shape, name)
        t.write(again)
        np.testing.assert_array_equal(
            t.numpy(), dtypes.from_storage(dtypes.to_storage(again, dtype), dtype),
            err_msg=f"{name} {shape} after write")
        t.release()


def test_write_op_read_and_host_access_waits_for_pending_work(dctx) -> None:
    rng = np.random.default_rng()
    n = 4099
    t = dctx.empty(n)
    out = poisoned(dctx, n)
    for _ in range(3):
        data = rng.standard_normal(n, dtype=np.float32)
        t.write(data)                     # staging copy, then a kernel reads it at once
        ops.scale(t, 3.0, out=out)
        assert rel_error(out.numpy(), data.astype(np.float64) * 3) < 1e-6
    # The fill is recorded, not yet submitted: write() must let it finish first, or the fill
    # would land after the copy and overwrite it.
    ops.fill(t, 5.0)
    data = rng.standard_normal(n, dtype=np.float32)
    t.write(data)
    np.testing.assert_array_equal(t.numpy(), data)
    # A kernel writes the tensor and the host reads it back with no synchronisation between.
    ops.scale(t, -1.0, out=t)
    np.testing.assert_array_equal(t.numpy(), -data)


def test_transfer_stream_upload_ordered_by_an_event(dctx) -> None:
    rng = np.random.default_rng()
    n = 5003
    transfer = dctx.stream("transfer", name="uploads")
    target = poisoned(dctx, n)
    direct = poisoned(dctx, n)
    out = poisoned(dctx, n)
    used = dctx.memory.used_bytes()
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    target.write(a, stream=transfer)       # through Tensor.write, without waiting
    transfer.upload(direct.allocation, memoryview(b).cast("B"))
    assert dctx.memory.used_bytes() == used + 2 * a.nbytes, "staging held until the copy ran"
    landed = transfer.record()
    dctx.default_stream.wait(landed)
    ops.add(target, direct, out=out)
    assert rel_error(out.numpy(), a.astype(np.float64) + b) < 1e-6
    transfer.synchronize()
    assert dctx.memory.used_bytes() == used, "staging goes back once its copy completed"
    transfer.release()


def test_two_uploads_in_flight_use_separate_staging(dctx) -> None:
    rng = np.random.default_rng()
    n = 70_001
    transfer = dctx.stream("transfer")
    tensors = [dctx.empty(n) for _ in range(4)]
    datas = [rng.standard_normal(n, dtype=np.float32) for _ in tensors]
    used = dctx.memory.used_bytes()
    for t, data in zip(tensors, datas, strict=True):
        t.write(data, stream=transfer)
    # Each upload in flight holds its own staging range until its submission completes.
    assert dctx.memory.used_bytes() == used + sum(d.nbytes for d in datas)
    transfer.synchronize()
    for t, data in zip(tensors, datas, strict=True):
        np.testing.assert_array_equal(t.numpy(), data)
    transfer.release()


def test_concurrent_reads_share_the_staging_buffer_safely(dctx) -> None:
    rng = np.random.default_rng()
    sizes = (3 * MiB // 4 + 1, 257 * 1024 + 3)   # float32 elements; different staging pieces
    datas = [rng.standard_normal(n, dtype=np.float32) for n in sizes]
    tensors = [dctx.tensor(d) for d in datas]
    errors: list[str] = []

    def reader(index: int) -> None:
        for round_ in range(6):
            got = tensors[index].numpy()
            if not np.array_equal(got, datas[index]):
                errors.append(f"reader {index} round {round_} read corrupted data")

    threads = [threading.Thread(target=reader, args=(i,)) for i in range(len(tensors))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors


def test_graph_replay_with_inputs_written_between_replays(dctx) -> None:
    rng = np.random.default_rng()
    shape = (37, 41)
    x = dctx.tensor(np.zeros(shape, np.float32))
    w = dctx.tensor(np.zeros(shape[1], np.float32))
    out = poisoned(dctx, shape)
    with dctx.capture() as graph:
        ops.mul(ops.add(x, w), x, out=out)
    transfer = dctx.stream("transfer")
    for round_ in range(4):
        a = rng.standard_normal(shape, dtype=np.float32)
        b = rng.standard_normal(shape[1], dtype=np.float32)
        if round_ % 2:
            # Asynchronous: the copy must wait for the previous replay that reads x and w.
            dctx.default_stream.synchronize()
            x.write(a, stream=transfer)
            w.write(b, stream=transfer)
            dctx.default_stream.wait(transfer.record())
        else:
            x.write(a)
            w.write(b)
        graph.replay()
        want = (a.astype(np.float64) + b) * a
        assert rel_error(out.numpy(), want) < 1e-6, f"round {round_}"
    graph.release()
    transfer.release()


def test_zero_memory_fills_unmapped_memory_on_the_device() -> None:
    with vkumd.Context(device_only_memory=True, zero_memory=True, block_size=1 * MiB) as c:
        secret = c.tensor(np.full(1000, 7, dtype=np.int32))
        assert not secret.allocation.host_visible
        secret.release()
        again = c.empty(1000, "int32")
        assert not again.numpy().any()
        for shape, name in (((3,), "int8"), ((4097,), "float16"), ((), "float32")):
            poison = c.tensor(np.full(shape, 0x7F, dtype=np.int8 if name == "int8" else
                                      np.float32), dtype=name)
            poison.release()
            assert not c.zeros(shape, name).numpy().any(), f"{name} {shape}"
    with vkumd.Context(device_only_memory=True, block_size=1 * MiB) as c:
        dirty = c.tensor(np.full(513, -1, dtype=np.int32))
        dirty.release()
        zeros = c.zeros(513, "int32")   # zeros() clears on the device without zero_memory too
        assert not zeros.numpy().any()


def test_dlpack_export_is_refused_with_a_clear_error(dctx) -> None:
    t = dctx.tensor(np.arange(6, dtype=np.float32))
    assert t.__dlpack_device__() == (7, dctx.caps.index)   # kDLVulkan
    with pytest.raises(vkumd.VkumdValueError, match=r"cannot map.*\.numpy\(\)"):
        t.__dlpack__()
    with pytest.raises(vkumd.VkumdValueError, match="cannot map"):
        np.from_dlpack(t)
    np.testing.assert_array_equal(np.asarray(t), np.arange(6))   # the copy path still works
    imported = vkumd.from_dlpack(np.arange(4, dtype=np.int32), dctx)
    np.testing.assert_array_equal(imported.numpy(), np.arange(4))


def test_upload_larger_than_any_cached_staging_buffer(dctx) -> None:
    rng = np.random.default_rng()
    n = 16 * MiB + 3                        # 64 MiB + 12 bytes of float32
    data = rng.standard_normal(n, dtype=np.float32)
    before = dctx.transfers.staged_copies
    t = dctx.tensor(data)
    pieces = -(-data.nbytes // transfer_module.STAGING_MAX_BYTES)
    assert dctx.transfers.staged_copies - before == pieces
    ops.scale(t, 2.0, out=t)
    got = t.numpy()
    assert dctx.transfers.staged_copies - before == 2 * pieces
    np.testing.assert_array_equal(got, data * 2)
    for staging in dctx.transfers._staging.values():
        assert staging.size <= transfer_module.STAGING_MAX_BYTES
    t.release()


def test_stream_upload_stages_large_data_in_bounded_pieces(dctx, monkeypatch) -> None:
    rng = np.random.default_rng()
    n = (2 * transfer_module.STAGING_MAX_BYTES) // 4 + 1001   # two full pieces and a tail
    data = rng.standard_normal(n, dtype=np.float32)
    t = poisoned(dctx, n)
    pool = dctx.memory
    original = pool.allocate
    staged: list[int] = []

    def recording(size: int, usage: MemoryUsage = MemoryUsage.DEVICE, *args, **kwargs):
        if usage is MemoryUsage.UPLOAD:
            staged.append(size)
        return original(size, usage, *args, **kwargs)

    monkeypatch.setattr(pool, "allocate", recording)
    transfer = dctx.stream("transfer")
    used = pool.used_bytes()
    t.write(data, stream=transfer)
    assert staged == [transfer_module.STAGING_MAX_BYTES] * 2 + [1001 * 4]
    transfer.synchronize()
    assert pool.used_bytes() == used, "every piece of staging went back to the pool"
    dctx.default_stream.wait(transfer.record())
    ops.scale(t, -1.0, out=t)
    np.testing.assert_array_equal(t.numpy(), -data)
    with pytest.raises(vkumd.VkumdValueError, match="offset"):
        transfer.copy((t.allocation.buffer, t.allocation.offset, 8),
                      (t.allocation.buffer, t.allocation.offset, t.nbytes), t.nbytes - 4)
    transfer.release()
    t.release()


def test_pieces_with_offsets_land_in_place(dctx, monkeypatch) -> None:
    monkeypatch.setattr(transfer_module, "STAGING_MIN_BYTES", 4096)
    monkeypatch.setattr(transfer_module, "STAGING_MAX_BYTES", 4096)
    transfers = Transfers(dctx.memory, dctx._oneshot)
    rng = np.random.default_rng()
    dst = dctx.memory.allocate(3 * 4096 + 77)
    try:
        data = rng.integers(0, 256, dst.size, dtype=np.uint8)
        transfers.upload(dst, memoryview(data))
        head = rng.integers(0, 256, 5000, dtype=np.uint8)
        transfers.upload(dst, memoryview(head), dst_offset=13)   # straddles two pieces
        data[13:5013] = head
        out = np.empty(dst.size, np.uint8)
        transfers.download(dst, memoryview(out))
        np.testing.assert_array_equal(out, data)
        tail = np.empty(4099, np.uint8)
        transfers.download(dst, memoryview(tail), src_offset=dst.size - 4099)
        np.testing.assert_array_equal(tail, data[-4099:])
        with pytest.raises(vkumd.VkumdValueError, match="does not fit"):
            transfers.upload(dst, memoryview(head), dst_offset=dst.size - 10)
        with pytest.raises(vkumd.VkumdValueError, match="does not fit"):
            transfers.download(dst, memoryview(tail), src_offset=dst.size)
    finally:
        transfers.release()
        dctx.memory.free(dst)


def test_write_with_a_stream_of_another_context_is_refused(dctx, ctx) -> None:
    t = dctx.empty(3)
    with pytest.raises(vkumd.VkumdValueError, match="another context"):
        t.write(np.ones(3, np.float32), stream=ctx.default_stream)
    t.write(np.ones(3, np.float32), stream=dctx.default_stream)   # still usable
    np.testing.assert_array_equal(t.numpy(), np.ones(3))
