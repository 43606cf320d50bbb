"""Which dispatches and copies need a barrier between them, within one submission.

Memory is tracked by range identity: a range is ``(VkBuffer, offset)`` of an allocation, and
every access names a whole allocation (a tensor, a staging area). Ranges of two live
allocations never overlap, and memory freed while work is in flight is only reused after
that work completes, so identity is exact for everything vkumd records eagerly.

A compiled graph binds sub-ranges of one arena allocation, and the memory planner reuses
bytes: two values at different offsets may share memory. Such ranges are declared with
:meth:`HazardTracker.track_overlaps`; the tracker then also treats an access to a declared
range as an access to every declared range whose bytes it shares. Undeclared memory keeps the
identity fast path (one ``None`` test per command).

A read after a write, a write after a read, or a write after a write of the same range (or
of overlapping declared ranges) needs a barrier; anything else does not. One global memory
barrier then orders everything before it against everything after, so both sets start again
empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

MemoryKey = tuple[Any, int]


class HazardTracker:
    """Read and written ranges since the last barrier of one command buffer.

    Attributes:
        barriers: barriers this tracker asked for (a recorder statistic for tests and the
            profiler: independent work should record none).
    """

    __slots__ = ("_reads", "_writes", "_aliases", "_declared", "barriers")

    def __init__(self) -> None:
        self._reads: set[MemoryKey] = set()
        self._writes: set[MemoryKey] = set()
        # key -> keys of the other declared ranges sharing bytes with it; None: none declared.
        self._aliases: dict[MemoryKey, frozenset[MemoryKey]] | None = None
        self._declared: dict[Any, set[tuple[int, int]]] = {}  # buffer -> (start, end) spans
        self.barriers = 0

    def track_overlaps(self, ranges: Iterable[tuple[Any, int, int]]) -> None:
        """Declare ``(VkBuffer, offset, nbytes)`` sub-ranges that may share bytes.

        From now on an access to one of them conflicts with earlier accesses to any declared
        range it overlaps, not only to the same ``(VkBuffer, offset)``. Ranges declared with
        one start and several sizes count with the union of their overlaps (the key carries
        no size), which may order more than needed but never less.

        Args:
            ranges: the sub-ranges, e.g. every value of a graph's arena.
        """
        declared = self._declared
        for buffer, offset, nbytes in ranges:
            if nbytes > 0:
                declared.setdefault(buffer, set()).add((offset, offset + nbytes))
        aliases: dict[MemoryKey, set[MemoryKey]] = {}
        for buffer, found in declared.items():
            spans = sorted(found)
            # A sweep over starts: each span meets the later-starting spans that begin
            # before it ends.
            for i, (start, end) in enumerate(spans):
                for other_start, _ in spans[i + 1:]:
                    if other_start >= end:
                        break
                    if other_start != start:
                        aliases.setdefault((buffer, start), set()).add((buffer, other_start))
                        aliases.setdefault((buffer, other_start), set()).add((buffer, start))
        self._aliases = {k: frozenset(v) for k, v in aliases.items()} or None

    def access(self, keys: Sequence[MemoryKey], written: Sequence[MemoryKey]) -> bool:
        """Record one command's accesses; return whether a barrier must precede it.

        Args:
            keys: ``(VkBuffer, offset)`` of each range the command touches.
            written: those of ``keys`` that it writes (the rest it only reads).
        """
        reads, writes = self._reads, self._writes
        # Set operations run in C: a dispatch costs no Python loop here.
        hazard = not (writes.isdisjoint(keys) and reads.isdisjoint(written))
        if not hazard and self._aliases is not None:
            hazard = self._overlapping(keys, written)
        if hazard:
            reads.clear()
            writes.clear()
            self.barriers += 1
        # A range both read and written lands in both sets; any later access of it then
        # finds it written, which is the hazard it is.
        reads.update(keys)
        writes.update(written)
        return hazard

    def _overlapping(self, keys: Sequence[MemoryKey], written: Sequence[MemoryKey]) -> bool:
        """Whether an access conflicts through a declared overlap (the slow path)."""
        aliases = self._aliases
        assert aliases is not None
        for key in keys:
            others = aliases.get(key)
            if others is None:
                continue
            if not self._writes.isdisjoint(others):
                return True
            if key in written and not self._reads.isdisjoint(others):
                return True
        return False
