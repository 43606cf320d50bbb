"""Asynchronous uploads through staging memory, for tensors the host cannot map.

Staging comes from the pool in pieces of at most ``STAGING_MAX_BYTES`` (never a staging copy
of all of a large upload), each returned to the pool once its copy has completed. The host
bytes are copied before :func:`upload_in_pieces` returns; the device copies run later, in
order with the stream's other work.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vkumd.errors import VkumdValueError
from vkumd.runtime.memory import MemoryPool, MemoryUsage
from vkumd.runtime.transfer import STAGING_MAX_BYTES, as_bytes

if TYPE_CHECKING:
    from vkumd.runtime.stream import Stream


def upload_in_pieces(stream: Stream, memory: MemoryPool, allocation: Any, data: memoryview
                     ) -> None:
    """Copy ``data`` into ``allocation`` on ``stream`` through pooled staging memory.

    Raises:
        VkumdValueError: ``data`` is larger than the allocation.
    """
    n = data.nbytes
    if n > allocation.size:
        raise VkumdValueError(f"upload of {n} bytes into an allocation of "
                              f"{allocation.size} bytes")
    source = as_bytes(data)
    dst = (allocation.buffer, allocation.offset, allocation.size)
    for start in range(0, n, STAGING_MAX_BYTES):
        size = min(STAGING_MAX_BYTES, n - start)
        staging = memory.allocate(size, MemoryUsage.UPLOAD)
        try:
            staging.host_view()[:size] = source[start:start + size]
            staging.flush()
            # The value the copy was recorded into, not the stream's value after it: the
            # byte budget (or another thread) may have submitted that batch already.
            value = stream.copy((staging.buffer, staging.offset, size), dst, start)
        except BaseException:
            memory.free(staging)
            raise
        stream.defer_until(lambda piece=staging: memory.free(piece), value)
