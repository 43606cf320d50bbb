"""Which submission of a stream last used each piece of memory.

A host read of a tensor waits for exactly that submission, and a released tensor's memory
goes back to the pool only after it. Streams record into this table from the thread that
records; the context reads and clears entries from any thread (a read-back, a release), so
every access takes the table's lock.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

MemoryKey = tuple[Any, int]  # (VkBuffer, offset) of an allocation
# Past this many entries, those whose submission completed are dropped at the next submit.
PRUNE_AT = 8192


class MemoryUses:
    """Memory key -> the last submission value that used it, safe to share between threads."""

    __slots__ = ("_last", "_lock")

    def __init__(self) -> None:
        self._last: dict[MemoryKey, int] = {}
        self._lock = threading.Lock()

    def mark(self, keys: Iterable[MemoryKey], value: int) -> None:
        """Record that submission ``value`` uses each of ``keys``."""
        with self._lock:
            last = self._last
            for key in keys:
                last[key] = value

    def last(self, key: MemoryKey) -> int | None:
        """The last submission that used ``key``, or None."""
        with self._lock:
            return self._last.get(key)

    def take(self, key: MemoryKey) -> int | None:
        """Forget ``key`` (its memory is being released); return its last submission."""
        with self._lock:
            return self._last.pop(key, None)

    def prune(self, completed: int) -> None:
        """Drop entries whose submission has completed, once the table has grown large."""
        with self._lock:
            if len(self._last) > PRUNE_AT:
                self._last = {k: v for k, v in self._last.items() if v > completed}

    def __len__(self) -> int:
        return len(self._last)
