"""The memory pool: alignment, statistics, limits, out-of-memory and zeroing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import vkumd
from vkumd.runtime.memory import MemoryPool, MemoryUsage, MiB


@pytest.fixture
def pool(ctx):
    memory = MemoryPool(ctx.device.handle, ctx.caps, block_size=4 * MiB)
    yield memory
    memory.release()


def test_allocations_are_aligned_and_disjoint(pool) -> None:
    rng = np.random.default_rng()
    allocations = [pool.allocate(int(rng.integers(1, 100_000))) for _ in range(50)]
    spans = sorted((id(a.block), a.offset, a.offset + a.size) for a in allocations)
    for a in allocations:
        assert a.offset % pool.alignment == 0
        assert a.offset % pool.caps.min_storage_buffer_offset_alignment == 0
    for (b1, _, end), (b2, start, _) in zip(spans, spans[1:], strict=False):
        assert b1 != b2 or end <= start
    for a in allocations:
        pool.free(a)
    assert pool.used_bytes() == 0


def test_statistics_and_free_all_blocks(pool) -> None:
    a = pool.allocate(1000)
    b = pool.allocate(3000)
    assert pool.used_bytes() == 4000
    assert pool.total_bytes() == 4 * MiB
    pool.free(a)
    pool.free(b)
    pool.free(b)  # a second free of the same allocation does nothing
    assert pool.used_bytes() == 0
    assert pool.total_bytes() == 4 * MiB, "an empty block stays cached for reuse"
    assert pool.free_all_blocks() == 4 * MiB
    assert pool.total_bytes() == 0


def test_large_requests_get_dedicated_blocks(pool) -> None:
    big = pool.allocate(3 * MiB)
    assert big.block.dedicated
    assert pool.block_count() == 1
    pool.free(big)
    assert pool.block_count() == 0, "a dedicated block goes back with its allocation"


def test_limit_raises_out_of_device_memory_with_the_numbers(pool) -> None:
    pool.set_limit(size=4 * MiB)
    held = pool.allocate(1 * MiB)
    with pytest.raises(vkumd.OutOfDeviceMemory) as info:
        pool.allocate(8 * MiB)
    error = info.value
    assert isinstance(error, MemoryError)
    assert error.requested == 8 * MiB and error.in_use == 1 * MiB and error.limit == 4 * MiB
    assert "8388608" in str(error) and "limit 4194304" in str(error)
    pool.free(held)
    pool.set_limit(None)
    assert pool.get_limit() is None


def test_out_of_memory_releases_cached_blocks_and_retries(pool) -> None:
    pool.set_limit(size=4 * MiB)
    cached = pool.allocate(100)
    pool.free(cached)
    assert pool.total_bytes() == 4 * MiB
    # The cached shared block keeps the dedicated block from fitting under the limit, so
    # the pool must let it go and try again.
    big = pool.allocate(3 * MiB)
    assert pool.block_count() == 1 and big.block.dedicated
    assert pool.total_bytes() == big.block.size <= 4 * MiB
    pool.free(big)


def test_limit_from_environment(monkeypatch, ctx) -> None:
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", "8MiB")
    memory = MemoryPool(ctx.device.handle, ctx.caps, block_size=4 * MiB)
    assert memory.get_limit() == 8 * MiB
    memory.release()
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", "lots")
    with pytest.raises(vkumd.VkumdValueError, match="VKUMD_MEMORY_LIMIT"):
        MemoryPool(ctx.device.handle, ctx.caps)


def test_set_limit_fraction(pool) -> None:
    pool.set_limit(fraction=0.5)
    assert pool.get_limit() == pool.caps.device_local_bytes // 2
    with pytest.raises(vkumd.VkumdValueError):
        pool.set_limit(fraction=1.5)


def test_memory_types_by_use(pool) -> None:
    device = pool.allocate(64, MemoryUsage.DEVICE)
    upload = pool.allocate(64, MemoryUsage.UPLOAD)
    readback = pool.allocate(64, MemoryUsage.READBACK)
    assert device.block.mem_type.device_local
    assert upload.host_visible and readback.host_visible
    # Unified memory maps tensors directly, unless VKUMD_DEVICE_ONLY_MEMORY=1 runs this.
    assert device.host_visible == pool.tensors_mapped == pool.unified
    assert pool.unified == (pool.caps.unified_memory and not pool.device_only)
    for a in (device, upload, readback):
        pool.free(a)


@pytest.mark.parametrize("device_type", ["discrete", None])
def test_device_only_and_discrete_gpus_never_map_tensors(ctx, device_type) -> None:
    """A discrete GPU that maps its VRAM (resizable BAR) still keeps tensors unmapped: host
    reads of that memory are uncached, far slower than a staging copy."""
    caps = ctx.caps if device_type is None else replace(ctx.caps, device_type=device_type)
    memory = MemoryPool(ctx.device.handle, caps, block_size=1 * MiB,
                        device_only=device_type is None)
    try:
        assert not memory.unified and not memory.tensors_mapped
        device = memory.allocate(100, MemoryUsage.DEVICE)
        assert not device.host_visible and device.block.mapped is None
        with pytest.raises(vkumd.VkumdValueError, match="staging"):
            device.host_view()
        for usage in (MemoryUsage.UPLOAD, MemoryUsage.READBACK):
            staging = memory.allocate(100, usage)
            assert staging.host_visible, f"{usage} staging memory stays mapped"
            memory.free(staging)
        memory.free(device)
    finally:
        memory.release()


def test_zero_memory_context_never_shows_old_data() -> None:
    with vkumd.Context(zero_memory=True, block_size=1 * MiB) as context:
        secret = context.tensor(np.full(1000, 7, dtype=np.int32))
        secret.release()
        again = context.empty(1000, "int32")
        assert not again.numpy().any()


def test_pools_of_two_contexts_share_no_blocks() -> None:
    with vkumd.Context() as a, vkumd.Context() as b:
        ta = a.tensor(np.ones(4, np.float32))
        tb = b.tensor(np.ones(4, np.float32))
        assert ta.allocation.block is not tb.allocation.block
        assert ta.allocation.block.pool is a.memory


def test_a_limit_below_the_block_size_shrinks_the_block(monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", "1MiB")
    with vkumd.Context() as context:  # 64 MiB blocks by default
        small = context.tensor(np.arange(4, dtype=np.float32))
        assert context.memory.total_bytes() <= 1 * MiB
        np.testing.assert_array_equal(small.numpy(), np.arange(4, dtype=np.float32))
        more = [context.empty(1000) for _ in range(50)]
        assert len({t.allocation.block for t in (small, *more)}) == 1, "one shrunken block"
        with pytest.raises(vkumd.OutOfDeviceMemory, match="limit 1048576"):
            context.empty(1 << 20)
        for t in (small, *more):
            t.release()


def test_a_new_block_takes_what_room_the_limit_leaves(pool) -> None:
    pool.set_limit(size=7 * MiB)  # room for one 4 MiB block, then less
    pieces = [pool.allocate(1 * MiB) for _ in range(5)]
    assert pieces[0].block is pieces[3].block is not pieces[4].block
    # Half the 3 MiB left, so that other uses (staging) find room too.
    assert pieces[4].block.size == 1536 * 1024 and not pieces[4].block.dedicated
    assert pool.total_bytes() == 4 * MiB + 1536 * 1024
    for piece in pieces:
        pool.free(piece)


def test_limits_accept_size_strings_and_refuse_other_types(ctx, pool) -> None:
    pool.set_limit(size="1GB")
    assert pool.get_limit() == 10**9
    pool.set_limit(size="512MiB")
    assert pool.get_limit() == 512 * MiB
    with pytest.raises(vkumd.VkumdValueError, match="cannot read 'lots'"):
        pool.set_limit(size="lots")
    for bad in (1.5, True, [1]):
        with pytest.raises(vkumd.VkumdTypeError, match="byte count or a size string"):
            pool.set_limit(size=bad)
    with pytest.raises(vkumd.VkumdTypeError):
        pool.set_limit(fraction="half")
    pool.set_limit(size=np.int64(8 * MiB))
    assert pool.get_limit() == 8 * MiB
    with vkumd.Context(memory_limit="1GB") as context:
        assert context.memory.get_limit() == 10**9


def test_the_pool_of_a_closed_context_refuses_to_allocate() -> None:
    context = vkumd.Context()
    t = context.tensor(np.ones(4, np.float32))
    memory = context.memory
    context.close()
    with pytest.raises(vkumd.ContextClosed, match="closed"):
        memory.allocate(64)
    memory.free(t.allocation)  # a free after the close does nothing
    assert memory.used_bytes() == 0
