"""Which submission of a stream last used each piece of memory.

A host read of a tensor waits for exactly that submission, and a released tensor's memory
goes back to the pool only after it. The table has no lock of its own: the owning stream
holds its lock around every access (recording already holds it, so the hot path pays
nothing more), including the reads and removals the context makes from other threads.

The batch being recorded is not marked dispatch by dispatch: it collects the ranges it
touches in a set of its own (one C-level set update per new set of buffers), which counts as
used by the submission that batch will be, and is written into the table when it is submitted.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

MemoryKey = tuple[Any, int]  # (VkBuffer, offset) of an allocation
# Past this many entries, those whose submission completed are dropped at the next submit.
PRUNE_AT = 8192


class MemoryUses:
    """Memory key -> the last submission value that used it (guarded by the stream's lock)."""

    __slots__ = ("_last", "_open", "_open_value")

    def __init__(self) -> None:
        self._last: dict[MemoryKey, int] = {}
        self._open: set[MemoryKey] = set()
        self._open_value = 0

    def mark(self, keys: Iterable[MemoryKey], value: int) -> None:
        """Record that submission ``value`` uses each of ``keys``."""
        self._last.update(dict.fromkeys(keys, value))

    def open_batch(self, touched: set[MemoryKey], value: int) -> None:
        """Count ``touched`` -- the ranges of the batch being recorded, a set the batch keeps
        filling -- as used by submission ``value``, the one that batch will be."""
        self._open = touched
        self._open_value = value

    def close_batch(self, value: int | None) -> None:
        """The open batch was submitted as ``value`` (its ranges are marked with it) or,
        with None, discarded (its ranges keep the submissions that used them before, since
        it never runs)."""
        if value is not None:
            self.mark(self._open, value)
        self._open = set()

    def last(self, key: MemoryKey) -> int | None:
        """The last submission that used ``key``, or None."""
        if key in self._open:
            return self._open_value
        return self._last.get(key)

    def take(self, key: MemoryKey) -> int | None:
        """Forget ``key`` (its memory is being released); return its last submission."""
        value = self._last.pop(key, None)
        if key in self._open:
            self._open.discard(key)  # freed memory is not marked when the batch is submitted
            return self._open_value
        return value

    def prune(self, completed: int) -> None:
        """Drop entries whose submission has completed, once the table has grown large."""
        if len(self._last) > PRUNE_AT:
            self._last = {k: v for k, v in self._last.items() if v > completed}

    def __len__(self) -> int:
        return len(self._last)
