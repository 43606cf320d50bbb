"""Which dispatches and copies need a barrier between them, within one submission.

Memory is tracked by range identity: a range is ``(VkBuffer, offset)`` of an allocation, and
every access names a whole allocation (a tensor, a staging area). Ranges of two live
allocations never overlap, and memory freed while work is in flight is only reused after
that work completes, so identity is exact for everything vkumd records.

A read after a write, a write after a read, or a write after a write of the same range needs
a barrier; anything else does not. One global memory barrier then orders everything before
it against everything after, so both sets start again empty.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class HazardTracker:
    """Read and written ranges since the last barrier of one command buffer.

    Attributes:
        barriers: barriers this tracker asked for (a recorder statistic for tests and the
            profiler: independent work should record none).
    """

    __slots__ = ("_reads", "_writes", "barriers")

    def __init__(self) -> None:
        self._reads: set[tuple[Any, int]] = set()
        self._writes: set[tuple[Any, int]] = set()
        self.barriers = 0

    def access(self, keys: Sequence[tuple[Any, int]], writes: Sequence[int]) -> bool:
        """Record one command's accesses; return whether a barrier must precede it.

        Args:
            keys: ``(VkBuffer, offset)`` of each range the command touches.
            writes: indices into ``keys`` that it writes (the rest it only reads).
        """
        reads, written = self._reads, self._writes
        # Set operations run in C; only the (usually one) written range loops in Python.
        hazard = not written.isdisjoint(keys)
        if not hazard:
            for i in writes:
                if keys[i] in reads:
                    hazard = True
                    break
        if hazard:
            reads.clear()
            written.clear()
            self.barriers += 1
        # A range both read and written lands in both sets; any later access of it then
        # finds it written, which is the hazard it is.
        reads.update(keys)
        for i in writes:
            written.add(keys[i])
        return hazard
