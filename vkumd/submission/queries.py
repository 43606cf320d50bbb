"""GPU timestamps: query pools handed out one slot at a time, read back in nanoseconds."""

from __future__ import annotations

import threading
from typing import Any

from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import check
from vkumd.vk.handle import Handle

SLOTS_PER_POOL = 1024
_RESULT_FLAGS = vk.VK_QUERY_RESULT_64_BIT | vk.VK_QUERY_RESULT_WITH_AVAILABILITY_BIT


class _QueryPool(Handle):
    def __init__(self, device: Any, count: int) -> None:
        super().__init__()
        self.device = device
        info = new("VkQueryPoolCreateInfo", vk.VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO,
                   queryType=vk.VK_QUERY_TYPE_TIMESTAMP, queryCount=count)
        out = ffi.new("VkQueryPool*")
        check("vkCreateQueryPool", lib.vkCreateQueryPool(device, info, NULL, out))
        self.handle = out[0]

    def _release(self) -> None:
        lib.vkDestroyQueryPool(self.device, self.handle, NULL)


class TimestampSlots:
    """Timestamp query slots for events and the profiler.

    A slot is an int; :meth:`location` gives the ``(VkQueryPool, index)`` to record into and
    :meth:`read` the time in nanoseconds once the command that wrote it has completed.

    Args:
        device: the ``VkDevice``.
        period_ns: nanoseconds per tick (``timestampPeriod``).
        valid_bits: meaningful low bits of a timestamp.
    """

    def __init__(self, device: Any, period_ns: float, valid_bits: int) -> None:
        self.device = device
        self.period_ns = period_ns
        self.mask = (1 << valid_bits) - 1 if 0 < valid_bits < 64 else (1 << 64) - 1
        self._pools: list[_QueryPool] = []
        self._free: list[int] = []
        self._lock = threading.Lock()
        self._result = ffi.new("uint64_t[2]")

    def allocate(self) -> int:
        """A free slot; a new pool of slots is created when all are taken."""
        with self._lock:
            if not self._free:
                base = len(self._pools) * SLOTS_PER_POOL
                self._pools.append(_QueryPool(self.device, SLOTS_PER_POOL))
                self._free.extend(range(base + SLOTS_PER_POOL - 1, base - 1, -1))
            return self._free.pop()

    def free(self, slot: int) -> None:
        """Give a slot back (its last write must have completed)."""
        with self._lock:
            if self._pools:
                self._free.append(slot)

    def location(self, slot: int) -> tuple[Any, int]:
        """``(VkQueryPool, query index)`` of ``slot``."""
        return self._pools[slot // SLOTS_PER_POOL].handle, slot % SLOTS_PER_POOL

    def read(self, slot: int) -> int | None:
        """The timestamp of ``slot`` in nanoseconds, or ``None`` if it is not written yet."""
        pool, index = self.location(slot)
        with self._lock:
            result = lib.vkGetQueryPoolResults(self.device, pool, index, 1, 16, self._result, 16,
                                               _RESULT_FLAGS)
            if result == vk.VK_NOT_READY or self._result[1] == 0:
                return None
            check("vkGetQueryPoolResults", result)
            ticks = int(self._result[0]) & self.mask
        return int(ticks * self.period_ns)

    def release(self) -> None:
        """Destroy the query pools."""
        with self._lock:
            for pool in self._pools:
                pool.release()
            self._pools.clear()
            self._free.clear()
