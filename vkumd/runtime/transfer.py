"""Host↔device copies: plain memory copies on mapped memory, a staging buffer otherwise."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from vkumd.runtime.memory import Allocation, MemoryPool, MemoryUsage
from vkumd.submission.oneshot import OneShotQueue
from vkumd.vk.binding import ffi, lib

_COPY_REGION = "VkBufferCopy*"


class Transfers:
    """Moves bytes between host memory and :class:`Allocation` ranges.

    On a unified-memory device tensors are mapped and a copy is ``memmove``; elsewhere a
    staging allocation (kept and grown, not re-created per copy) and a blocking copy command.
    """

    def __init__(self, pool: MemoryPool, queue: OneShotQueue) -> None:
        self.pool = pool
        self.queue = queue
        self._staging: dict[Any, Allocation] = {}
        self._lock = threading.Lock()

    def _staging_for(self, usage: MemoryUsage, size: int) -> Allocation:
        current = self._staging.get(usage)
        if current is None or current.size < size:
            if current is not None:
                self.pool.free(current)
            current = self.pool.allocate(max(size, 1 << 20), usage)
            self._staging[usage] = current
        return current

    def upload(self, dst: Allocation, data: memoryview, dst_offset: int = 0) -> None:
        """Copy ``data`` (bytes) into ``dst`` at ``dst_offset``; returns when it is there."""
        n = data.nbytes
        if n == 0:
            return
        if dst.host_visible:
            ffi.memmove(dst.block.mapped + dst.offset + dst_offset, data, n)
            dst.flush()
            return
        with self._lock:
            staging = self._staging_for(MemoryUsage.UPLOAD, n)
            ffi.memmove(staging.block.mapped + staging.offset, data, n)
            staging.flush()
            self._copy(staging, 0, dst, dst_offset, n)

    def download(self, src: Allocation, out: memoryview, src_offset: int = 0) -> None:
        """Copy ``out.nbytes`` bytes of ``src`` from ``src_offset`` into ``out``."""
        n = out.nbytes
        if n == 0:
            return
        if src.host_visible:
            src.invalidate()
            ffi.memmove(out, src.block.mapped + src.offset + src_offset, n)
            return
        with self._lock:
            staging = self._staging_for(MemoryUsage.READBACK, n)
            self._copy(src, src_offset, staging, 0, n)
            staging.invalidate()
            ffi.memmove(out, staging.block.mapped + staging.offset, n)

    def fill_zero(self, dst: Allocation) -> None:
        """Set every byte of ``dst`` to zero."""
        if dst.host_visible:
            np.frombuffer(dst.host_view(), dtype=np.uint8)[:] = 0
            dst.flush()
            return
        size = -(-dst.size // 4) * 4  # vkCmdFillBuffer works in 4-byte words
        self.queue.run(lambda cmd: lib.vkCmdFillBuffer(cmd, dst.buffer, dst.offset, size, 0))

    def _copy(self, src: Allocation, src_offset: int, dst: Allocation, dst_offset: int,
              n: int) -> None:
        region = ffi.new(_COPY_REGION)
        region.srcOffset = src.offset + src_offset
        region.dstOffset = dst.offset + dst_offset
        region.size = n
        self.queue.run(lambda cmd: lib.vkCmdCopyBuffer(cmd, src.buffer, dst.buffer, 1, region))

    def release(self) -> None:
        """Free the staging allocations."""
        for staging in self._staging.values():
            self.pool.free(staging)
        self._staging.clear()
