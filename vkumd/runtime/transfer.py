"""Host↔device copies: plain memory copies on mapped memory, a staging buffer otherwise.

Tensor memory the host cannot map (a discrete GPU, or ``VKUMD_DEVICE_ONLY_MEMORY=1``) is
read and written through one cached staging allocation per direction and a copy command
submitted on the compute queue, which the host waits for. Each such submission carries its
own barriers, because the batches of the streams only order work within a stream:

- before the copy, against every earlier command of the queue (a kernel that wrote the
  source, or still reads the destination);
- after it, for every later command of the queue (a kernel that reads what was copied) and
  for the host (which reads the read-back staging memory once the fence has signalled).

Copies larger than :data:`STAGING_MAX_BYTES` go through the staging buffer in pieces, so a
multi-GiB upload does not keep a multi-GiB staging buffer alive.

:meth:`vkumd.runtime.stream.Stream.upload` is the asynchronous counterpart: a staging area per
call, recorded on a stream and returned to the pool when that submission completes.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.runtime.memory import Allocation, MemoryPool, MemoryUsage, MiB
from vkumd.submission.oneshot import OneShotQueue
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import OutOfDeviceMemory

STAGING_MIN_BYTES = 1 * MiB
"""The smallest staging allocation made (small copies share it)."""
STAGING_MAX_BYTES = 16 * MiB
"""The largest staging allocation kept; larger copies are split into pieces of this size."""

_ALL = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
_TRANSFER = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
_HOST = vk.VK_PIPELINE_STAGE_HOST_BIT


def _barrier(src_access: int, dst_access: int) -> Any:
    return new("VkMemoryBarrier", vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER,
               srcAccessMask=src_access, dstAccessMask=dst_access)


def as_bytes(view: memoryview) -> memoryview:
    """A flat unsigned-byte view, so pieces can be sliced by byte offsets."""
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


class Transfers:
    """Moves bytes between host memory and :class:`Allocation` ranges.

    On a unified-memory device tensors are mapped and a copy is ``memmove``; elsewhere a
    staging allocation (kept and grown up to :data:`STAGING_MAX_BYTES`, not re-created per
    copy) and a blocking copy command.

    Args:
        pool: the memory pool that staging allocations come from.
        queue: the one-shot queue (the compute queue) that runs the copies.
    """

    def __init__(self, pool: MemoryPool, queue: OneShotQueue) -> None:
        self.pool = pool
        self.queue = queue
        self._staging: dict[MemoryUsage, Allocation] = {}
        self._lock = threading.Lock()
        self._before = _barrier(vk.VK_ACCESS_MEMORY_WRITE_BIT,
                                vk.VK_ACCESS_TRANSFER_READ_BIT | vk.VK_ACCESS_TRANSFER_WRITE_BIT)
        self._after = _barrier(vk.VK_ACCESS_TRANSFER_WRITE_BIT,
                               vk.VK_ACCESS_MEMORY_READ_BIT | vk.VK_ACCESS_MEMORY_WRITE_BIT
                               | vk.VK_ACCESS_HOST_READ_BIT)
        self.staged_copies = 0
        """Copy commands submitted through staging memory (tests and benchmarks read it)."""

    def _staging_for(self, usage: MemoryUsage, size: int) -> Allocation:
        """The cached staging allocation for ``usage``, grown to hold ``size`` bytes (capped)."""
        wanted = min(max(size, STAGING_MIN_BYTES), STAGING_MAX_BYTES)
        current = self._staging.get(usage)
        if current is None or current.size < wanted:
            if current is not None:
                # The copies that used it were waited for; nothing on the device holds it.
                self._staging.pop(usage)
                self.pool.free(current)
            try:
                current = self.pool.allocate(wanted, usage)
            except OutOfDeviceMemory:
                if wanted <= size:
                    raise
                # Under a tight memory limit a small copy must not fail for want of the
                # 1 MiB a staging buffer usually takes: stage just what it needs.
                current = self.pool.allocate(size, usage)
            self._staging[usage] = current
        return current

    def upload(self, dst: Allocation, data: memoryview, dst_offset: int = 0) -> None:
        """Copy ``data`` (bytes) into ``dst`` at ``dst_offset``; returns when it is there.

        The caller waits first for device work that still uses ``dst``
        (``RuntimeContext.before_host_access``).

        Raises:
            VkumdValueError: the bytes would not fit in ``dst`` from ``dst_offset``.
        """
        n = data.nbytes
        self._check_range("upload", dst, dst_offset, n)
        if n == 0:
            return
        if dst.host_visible:
            ffi.memmove(dst.block.mapped + dst.offset + dst_offset, data, n)
            dst.flush()
            return
        source = as_bytes(data)
        with self._lock:
            staging = self._staging_for(MemoryUsage.UPLOAD, n)
            pointer = staging.block.mapped + staging.offset
            for start in range(0, n, staging.size):
                piece = min(staging.size, n - start)
                ffi.memmove(pointer, source[start:start + piece], piece)
                staging.flush()
                self._copy(staging, 0, dst, dst_offset + start, piece)

    def download(self, src: Allocation, out: memoryview, src_offset: int = 0) -> None:
        """Copy ``out.nbytes`` bytes of ``src`` from ``src_offset`` into ``out``.

        Raises:
            VkumdValueError: the range would run past the end of ``src``.
        """
        n = out.nbytes
        self._check_range("download", src, src_offset, n)
        if n == 0:
            return
        if src.host_visible:
            src.invalidate()
            ffi.memmove(out, src.block.mapped + src.offset + src_offset, n)
            return
        target = as_bytes(out)
        with self._lock:
            staging = self._staging_for(MemoryUsage.READBACK, n)
            pointer = staging.block.mapped + staging.offset
            for start in range(0, n, staging.size):
                piece = min(staging.size, n - start)
                self._copy(src, src_offset + start, staging, 0, piece)
                staging.invalidate()
                ffi.memmove(target[start:start + piece], pointer, piece)

    def fill_zero(self, dst: Allocation) -> None:
        """Set every byte of ``dst`` to zero (``vkCmdFillBuffer`` where the host cannot map it)."""
        if dst.host_visible:
            np.frombuffer(dst.host_view(), dtype=np.uint8)[:] = 0
            dst.flush()
            return
        # vkCmdFillBuffer works in 4-byte words; the pool rounds every range to 16 bytes, so
        # the rounded size stays inside the allocation's reserved range.
        size = -(-dst.size // 4) * 4

        def record(cmd: Any) -> None:
            lib.vkCmdPipelineBarrier(cmd, _ALL, _TRANSFER, 0, 1, self._before, 0, NULL, 0, NULL)
            lib.vkCmdFillBuffer(cmd, dst.buffer, dst.offset, size, 0)
            lib.vkCmdPipelineBarrier(cmd, _TRANSFER, _ALL | _HOST, 0, 1, self._after, 0, NULL,
                                     0, NULL)

        self.queue.run(record)

    @staticmethod
    def _check_range(what: str, allocation: Allocation, offset: int, n: int) -> None:
        if offset < 0 or offset + n > allocation.size:
            raise VkumdValueError(
                f"{what} of {n} bytes at offset {offset} does not fit an allocation of "
                f"{allocation.size} bytes; pass a range inside it")

    def _copy(self, src: Allocation, src_offset: int, dst: Allocation, dst_offset: int,
              n: int) -> None:
        region = ffi.new("VkBufferCopy*")
        region.srcOffset = src.offset + src_offset
        region.dstOffset = dst.offset + dst_offset
        region.size = n

        def record(cmd: Any) -> None:
            lib.vkCmdPipelineBarrier(cmd, _ALL, _TRANSFER, 0, 1, self._before, 0, NULL, 0, NULL)
            lib.vkCmdCopyBuffer(cmd, src.buffer, dst.buffer, 1, region)
            lib.vkCmdPipelineBarrier(cmd, _TRANSFER, _ALL | _HOST, 0, 1, self._after, 0, NULL,
                                     0, NULL)

        self.queue.run(record)
        self.staged_copies += 1

    def release(self) -> None:
        """Free the staging allocations."""
        for staging in self._staging.values():
            self.pool.free(staging)
        self._staging.clear()
