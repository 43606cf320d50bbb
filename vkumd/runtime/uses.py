"""Which submission of a stream last used each piece of memory.

A host read of a tensor waits for exactly that submission, and a released tensor's memory
goes back to the pool only after it. The table has no lock of its own: the owning stream
holds its lock around every access (recording already holds it, so the hot path pays
nothing more), including the reads and removals the context makes from other threads.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MemoryKey = tuple[Any, int]  # (VkBuffer, offset) of an allocation
# Past this many entries, those whose submission completed are dropped at the next submit.
PRUNE_AT = 8192


class MemoryUses:
    """Memory key -> the last submission value that used it (guarded by the stream's lock)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: dict[MemoryKey, int] = {}

    def mark(self, keys: Iterable[MemoryKey], value: int) -> None:
        """Record that submission ``value`` uses each of ``keys``."""
        last = self._last
        for key in keys:
            last[key] = value

    def last(self, key: MemoryKey) -> int | None:
        """The last submission that used ``key``, or None."""
        return self._last.get(key)

    def take(self, key: MemoryKey) -> int | None:
        """Forget ``key`` (its memory is being released); return its last submission."""
        return self._last.pop(key, None)

    def prune(self, completed: int) -> None:
        """Drop entries whose submission has completed, once the table has grown large."""
        if len(self._last) > PRUNE_AT:
            self._last = {k: v for k, v in self._last.items() if v > completed}

    def __len__(self) -> int:
        return len(self._last)
