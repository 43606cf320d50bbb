"""Device memory: large ``VkDeviceMemory`` blocks per memory type, carved into buffers.

Each block (:mod:`vkumd.runtime.blocks`) owns one ``VkBuffer`` over all of it, so a tensor is
a ``(buffer, offset, size)`` range: creating one costs no Vulkan call once a block exists.
Requests above ``dedicated_threshold`` get a block of their own. Empty blocks are kept for
reuse until :meth:`MemoryPool.free_all_blocks`, or until an allocation would otherwise fail.
"""

from __future__ import annotations

import logging
import operator
import threading
from typing import Any

from vkumd import settings
from vkumd.errors import ContextClosed, VkumdTypeError, VkumdValueError
from vkumd.runtime.blocks import Allocation, Block, MemoryUsage
from vkumd.vk.binding import BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT, ffi, lib, new, vk
from vkumd.vk.caps import DeviceCaps, MemoryType
from vkumd.vk.errors import OutOfDeviceMemory, OutOfHostMemory, VulkanError, check

__all__ = ["DEFAULT_BLOCK_SIZE", "MIN_ALIGNMENT", "Allocation", "Block", "MemoryPool",
           "MemoryUsage", "MiB"]

log = logging.getLogger("vkumd.memory")

MiB = 1 << 20
DEFAULT_BLOCK_SIZE = 64 * MiB
# Wide (vec4) loads and cache lines both like 64-byte starts; drivers may ask for more.
MIN_ALIGNMENT = 64


def _score(mem_type: MemoryType, usage: MemoryUsage, unified: bool) -> int | None:
    """Rank a memory type for a use; ``None`` means unusable, lower is better."""
    if usage is MemoryUsage.DEVICE:
        if not mem_type.device_local:
            return None
        if unified:
            return 0 if mem_type.host_visible and mem_type.host_coherent else (
                1 if mem_type.host_visible else 5)
        return 0 if not mem_type.host_visible else 1
    if not mem_type.host_visible:
        return None
    score = 0 if mem_type.host_coherent else 2
    if usage is MemoryUsage.READBACK:
        score += 0 if mem_type.host_cached else 1
    else:
        score += 1 if mem_type.host_cached else 0
        score += 1 if mem_type.device_local and not unified else 0
    return score


def _limit_bytes(size: object) -> int | None:
    """A memory limit in bytes from an int or a size string, checked."""
    if size is None:
        return None
    if isinstance(size, str):
        try:
            size = settings.parse_size(size)
        except ValueError as exc:
            raise VkumdValueError(f"memory limit: {exc}") from None
    try:
        if isinstance(size, bool):
            raise TypeError("a bool is no byte count")
        # numpy integers pass through __index__; floats are refused (bytes are whole).
        size = operator.index(size)  # type: ignore[arg-type]
    except TypeError:
        raise VkumdTypeError(f"memory limit must be a byte count or a size string such as "
                             f"'1GB', got {type(size).__name__}: {size!r}") from None
    if size < 0:
        raise VkumdValueError(f"memory limit size={size} must not be negative")
    return size


class MemoryPool:
    """Allocates :class:`Allocation` ranges for one device, with CuPy-style statistics.

    Args:
        device_handle: the ``VkDevice``.
        caps: the device's capabilities.
        block_size: size of each shared block.
        dedicated_threshold: requests at least this large get their own block.
        limit: most bytes of blocks the pool may hold, as :meth:`set_limit` takes it;
            ``None`` reads ``VKUMD_MEMORY_LIMIT``.
        queue_families: the queue families that use the buffers; more than one makes every
            block's buffer ``VK_SHARING_MODE_CONCURRENT`` across them.
        device_only: never map tensor (``DEVICE``) memory, so every host access to a tensor
            goes through staging memory as on a discrete GPU; ``None`` reads
            ``VKUMD_DEVICE_ONLY_MEMORY``. Staging memory stays mapped.

    Attributes:
        device_only: the ``device_only`` setting in force.
        unified: whether tensors are placed as on a unified-memory device (host-visible types
            preferred). False on a discrete GPU even where it maps its VRAM (resizable BAR):
            host reads of that memory are uncached and far slower than a staging copy.
        tensors_mapped: whether ``DEVICE`` allocations are host-visible (mapped).
    """

    def __init__(self, device_handle: Any, caps: DeviceCaps, *,
                 block_size: int = DEFAULT_BLOCK_SIZE, dedicated_threshold: int | None = None,
                 limit: int | str | None = None, queue_families: tuple[int, ...] = (),
                 device_only: bool | None = None) -> None:
        if block_size < MiB:
            raise VkumdValueError(f"block_size={block_size} is below the 1 MiB minimum")
        self.device_handle = device_handle
        self.caps = caps
        families = sorted(set(queue_families))
        self.queue_families = ffi.new("uint32_t[]", families) if len(families) > 1 else None
        self.block_size = block_size
        self.dedicated_threshold = dedicated_threshold or block_size // 2
        self.alignment = max(MIN_ALIGNMENT, caps.min_storage_buffer_offset_alignment,
                             caps.non_coherent_atom_size)
        self.buffer_usage = (vk.VK_BUFFER_USAGE_STORAGE_BUFFER_BIT
                             | vk.VK_BUFFER_USAGE_TRANSFER_SRC_BIT
                             | vk.VK_BUFFER_USAGE_TRANSFER_DST_BIT)
        if caps.buffer_device_address:
            self.buffer_usage |= BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT
        self._blocks: dict[MemoryUsage, list[Block]] = {usage: [] for usage in MemoryUsage}
        self._lock = threading.RLock()
        self._used = 0
        self._limit: int | None = None
        # Where the limit came from, for the out-of-memory message (a per-process quota set
        # in the environment is easy to forget).
        self._limit_source = ""
        self._closed = False
        env_limit = settings.text("VKUMD_MEMORY_LIMIT")
        if limit is not None:
            self.set_limit(size=limit)
        elif env_limit is not None:
            try:
                self.set_limit(size=env_limit)
            except VkumdValueError as exc:
                raise VkumdValueError(f"VKUMD_MEMORY_LIMIT: {exc}") from None
            self._limit_source = f"VKUMD_MEMORY_LIMIT={env_limit}"
        self.device_only = (settings.flag("VKUMD_DEVICE_ONLY_MEMORY") if device_only is None
                            else bool(device_only))
        self.unified = (caps.unified_memory and caps.device_type != "discrete"
                        and not self.device_only)
        self._types = {usage: self._choose_type(usage) for usage in MemoryUsage}
        self.tensors_mapped = self.unified and self._types[MemoryUsage.DEVICE].host_visible

    def _choose_type(self, usage: MemoryUsage) -> MemoryType:
        scored = [(score, t.index, t) for t in self.caps.memory_types
                  if (score := _score(t, usage, self.unified)) is not None]
        if not scored:
            raise VkumdValueError(f"device {self.caps.name} has no memory type for {usage.value}")
        return min(scored)[2]

    # -- statistics ---------------------------------------------------------------------
    def used_bytes(self) -> int:
        """Bytes in live allocations (as asked for, before alignment)."""
        return self._used

    def total_bytes(self) -> int:
        """Bytes of device memory the pool holds, in use or cached."""
        with self._lock:
            return sum(b.size for blocks in self._blocks.values() for b in blocks)

    def block_count(self) -> int:
        """Number of ``VkDeviceMemory`` objects the pool holds."""
        with self._lock:
            return sum(len(blocks) for blocks in self._blocks.values())

    def get_limit(self) -> int | None:
        """The byte limit on :meth:`total_bytes`, or ``None``."""
        return self._limit

    def set_limit(self, size: int | str | None = None, fraction: float | None = None) -> None:
        """Bound the bytes the pool may hold.

        A limit smaller than the block size is honoured by making smaller blocks, so any
        request that fits the limit can be served.

        Args:
            size: a byte count, or a string as ``VKUMD_MEMORY_LIMIT`` takes: a size
                (``"1GB"``, ``"512MiB"``) or a share of the device-local heap (``"0.25"``,
                ``"25%"``); ``None`` or 0 removes the limit.
            fraction: a share of the device-local memory (0 < fraction <= 1) instead.

        Raises:
            VkumdTypeError: ``size`` is neither an int nor a string (or is a bool), or
                ``fraction`` is not a number.
            VkumdValueError: a negative size, a string that is not a size, or a fraction
                outside (0, 1].
        """
        self._limit_source = ""
        if isinstance(size, str) and fraction is None:
            try:
                fraction = settings.parse_fraction(size)
            except VkumdValueError as exc:
                raise VkumdValueError(f"memory limit: {exc}") from None
            if fraction is not None:
                size = None
        if fraction is not None:
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)):
                raise VkumdTypeError(f"fraction must be a number, got "
                                     f"{type(fraction).__name__}: {fraction!r}")
            if not 0 < fraction <= 1:
                raise VkumdValueError(f"fraction={fraction} must be in (0, 1]")
            size = int(self.caps.device_local_bytes * fraction)
        self._limit = _limit_bytes(size) or None

    def free_all_blocks(self) -> int:
        """Release every cached block that holds no allocation; return the bytes released."""
        released = 0
        with self._lock:
            for usage, blocks in self._blocks.items():
                keep = []
                for block in blocks:
                    if block.ranges.is_empty:
                        released += block.size
                        block.release()
                    else:
                        keep.append(block)
                self._blocks[usage] = keep
        return released

    # -- allocation ---------------------------------------------------------------------
    def allocate(self, size: int, usage: MemoryUsage = MemoryUsage.DEVICE) -> Allocation:
        """Return a range of at least ``size`` bytes (>= 1) for ``usage``.

        Raises:
            OutOfDeviceMemory: the limit or the device's memory is exhausted even after the
                cached blocks were released.
            OutOfHostMemory: the driver ran out of host memory, likewise.
            ContextClosed: the pool was released (its context closed).
            VkumdTypeError, VkumdValueError: ``size`` is not an int, or is negative.
        """
        try:
            size = operator.index(size)  # "10" or 10.5 would fail deeper, naming another size
        except TypeError:
            raise VkumdTypeError(f"cannot allocate {size!r} bytes; pass an int") from None
        if size < 0:
            raise VkumdValueError(f"cannot allocate {size} bytes")
        size = max(size, 1)
        with self._lock:
            if self._closed:
                raise ContextClosed(f"allocating {size} bytes needs an open context, but the "
                                    "memory pool's context was closed; create a new "
                                    "vkumd.Context")
            try:
                return self._allocate(size, usage)
            except (OutOfDeviceMemory, OutOfHostMemory):
                if self.free_all_blocks() == 0:
                    raise
                log.info("out of memory for %d bytes: released cached blocks, retrying", size)
                return self._allocate(size, usage)

    def _allocate(self, size: int, usage: MemoryUsage) -> Allocation:
        rounded = -(-size // 16) * 16
        if rounded < self.dedicated_threshold:
            for block in self._blocks[usage]:
                if block.dedicated:
                    continue
                offset = block.ranges.allocate(rounded, self.alignment)
                if offset is not None:
                    return self._hand_out(block, offset, size, usage)
        shared = rounded < self.dedicated_threshold
        block_bytes = self._shared_block_bytes(rounded) if shared else rounded
        block_bytes = -(-block_bytes // self.alignment) * self.alignment
        # A request of exactly block_size bytes gets an ordinary block, kept after its free.
        dedicated = not shared and block_bytes != self.block_size
        block = self._new_block(usage, block_bytes, size, dedicated=dedicated)
        offset = block.ranges.allocate(rounded, self.alignment)
        assert offset == 0
        return self._hand_out(block, offset, size, usage)

    def _shared_block_bytes(self, rounded: int) -> int:
        """Size of a new shared block: ``block_size``, or, under a limit that leaves less room
        than that, half the room (at least the request). A limit below the block size then
        still serves small allocations, and each use (tensors, upload and read-back staging
        keep blocks apart) still finds room after another took its block."""
        if self._limit is None:
            return self.block_size
        room = self._limit - self.total_bytes()
        if room >= self.block_size:
            return self.block_size
        return max(room // 2 // self.alignment * self.alignment, rounded)

    def _new_block(self, usage: MemoryUsage, block_bytes: int, requested: int,
                   dedicated: bool) -> Block:
        if self._limit is not None and self.total_bytes() + block_bytes > self._limit:
            raise self._oom(requested, f"a {block_bytes}-byte block would pass the limit")
        try:
            block = Block(self, self._types[usage], block_bytes, dedicated,
                          map_memory=usage is not MemoryUsage.DEVICE or self.tensors_mapped)
        except (OutOfDeviceMemory, OutOfHostMemory) as exc:
            raise self._oom(requested, exc.detail, exc) from exc
        self._blocks[usage].append(block)
        return block

    def _oom(self, requested: int, why: str,
             cause: VulkanError | None = None) -> OutOfDeviceMemory | OutOfHostMemory:
        """The out-of-memory error for ``requested`` bytes, with the pool's numbers.

        ``cause`` is the driver's refusal, whose call and result it keeps (a host
        out-of-memory from ``vkCreateBuffer`` stays one); without it the pool's own limit
        refused.
        """
        limit = "no limit" if self._limit is None else f"limit {self._limit} bytes"
        if self._limit is not None and self._limit_source:
            limit += f" from {self._limit_source}"
        call, result = ("vkAllocateMemory", vk.VK_ERROR_OUT_OF_DEVICE_MEMORY) if cause is None \
            else (cause.call, cause.result)
        kind = OutOfHostMemory if result == vk.VK_ERROR_OUT_OF_HOST_MEMORY else OutOfDeviceMemory
        error = kind(
            call, result,
            f"asked for {requested} bytes with {self._used} bytes in use and "
            f"{self.total_bytes()} held ({limit}): {why}. Free tensors, call "
            "free_all_blocks(), or raise the limit (set_limit / VKUMD_MEMORY_LIMIT)")
        error.requested, error.in_use, error.limit = requested, self._used, self._limit
        return error

    def _hand_out(self, block: Block, offset: int, size: int, usage: MemoryUsage) -> Allocation:
        self._used += size
        return Allocation(block, offset, size, usage)

    def free(self, allocation: Allocation) -> None:
        """Return a range to its block; the block stays cached (or goes, if dedicated)."""
        if allocation.freed or self._closed:
            return
        with self._lock:
            allocation.freed = True
            block = allocation.block
            block.ranges.free(allocation.offset)
            self._used -= allocation.size
            if block.dedicated and block.ranges.is_empty:
                self._blocks[allocation.usage].remove(block)
                block.release()

    def flush_range(self, allocation: Allocation, *, invalidate: bool) -> None:
        """Flush (or invalidate) a non-coherent range, widened to ``nonCoherentAtomSize``."""
        atom = self.caps.non_coherent_atom_size
        start = allocation.offset // atom * atom
        end = min(-(-(allocation.offset + allocation.size) // atom) * atom,
                  allocation.block.size)
        mapped = new("VkMappedMemoryRange", vk.VK_STRUCTURE_TYPE_MAPPED_MEMORY_RANGE,
                     memory=allocation.block.handle, offset=start, size=end - start)
        if invalidate:
            check("vkInvalidateMappedMemoryRanges",
                  lib.vkInvalidateMappedMemoryRanges(self.device_handle, 1, mapped))
        else:
            check("vkFlushMappedMemoryRanges",
                  lib.vkFlushMappedMemoryRanges(self.device_handle, 1, mapped))

    def release(self) -> None:
        """Release every block, in use or not (the context is closing); later allocations
        raise :class:`ContextClosed`."""
        with self._lock:
            self._closed = True
            for blocks in self._blocks.values():
                for block in blocks:
                    block.release()
                blocks.clear()
            self._used = 0
