"""A pure-Python range sub-allocator: carves aligned ranges out of one memory block.

The Vulkan allocator creates large ``VkDeviceMemory`` blocks (tens of MiB) per memory type and
binds many buffers into each one at offsets chosen here. This module knows nothing of Vulkan;
it only manages integer offsets inside ``[0, size)``.

Design: the free ranges are kept twice, sorted by offset (to find the neighbours to merge
with on :meth:`RangeAllocator.free`) and sorted by ``(size, offset)`` (to find the best fit
on :meth:`RangeAllocator.allocate`). Both lookups are a ``bisect``; inserting into and
removing from a Python list is a ``memmove``, which stays cheap for the few thousand ranges
a block holds. Every byte of the block is at all times either inside exactly one allocation or
inside exactly one free range: alignment padding in front of an allocation and the tail after
it both stay free, so nothing is lost to rounding.
"""

from __future__ import annotations

import bisect
import operator

from vkumd.errors import VkumdTypeError, VkumdValueError

__all__ = ["RangeAllocator"]


def _check_int(name: str, value: object) -> int:
    """Return ``value`` as a plain int; numpy integers are accepted through ``__index__``."""
    # bool is an int subclass; True as a size or offset is always a caller bug.
    if not isinstance(value, bool):
        try:
            return operator.index(value)
        except TypeError:
            pass
    raise VkumdTypeError(f"{name} must be an int, got {type(value).__name__}: {value!r}")


class RangeAllocator:
    """Carves aligned ranges out of one block of ``size`` bytes; free ranges merge with neighbours.

    Allocation is best-fit: among the free ranges that can hold the request after aligning its
    start, the smallest one is used (the lowest offset breaks ties), which keeps large free
    ranges intact for large requests.

    Accounting: :attr:`used_bytes` is the sum of the sizes *asked for*; alignment padding is
    not counted because it stays in the free list and can serve later requests. Hence
    ``used_bytes + free_bytes == size`` always holds.

    Args:
        size: size of the block in bytes, at least 1.

    Raises:
        VkumdValueError: ``size`` is smaller than 1.
        VkumdTypeError: ``size`` is not an int.
    """

    def __init__(self, size: int) -> None:
        size = _check_int("size", size)
        if size < 1:
            raise VkumdValueError(f"block size must be at least 1 byte, got {size}")
        self.size: int = size
        # Free ranges by offset: sorted offsets plus offset -> size.
        self._free_offsets: list[int] = []
        self._free_size_at: dict[int, int] = {}
        # The same free ranges as sorted (size, offset) pairs for best-fit search.
        self._by_size: list[tuple[int, int]] = []
        # Live allocations: offset -> size asked for.
        self._allocs: dict[int, int] = {}
        self._used_bytes = 0
        self.reset()

    # -- statistics -------------------------------------------------------------------------

    @property
    def used_bytes(self) -> int:
        """Sum of the sizes of live allocations, excluding alignment padding (which stays free)."""
        return self._used_bytes

    @property
    def free_bytes(self) -> int:
        """Bytes in free ranges; always ``size - used_bytes``."""
        return self.size - self._used_bytes

    @property
    def largest_free(self) -> int:
        """Size of the largest free range (0 when the block is full).

        A request of this size with alignment 1 is guaranteed to succeed; with a larger
        alignment it may not, because the range's start may need padding.
        """
        return self._by_size[-1][0] if self._by_size else 0

    @property
    def is_empty(self) -> bool:
        """True when no allocation is live (the whole block is one free range)."""
        return not self._allocs

    @property
    def allocation_count(self) -> int:
        """Number of live allocations."""
        return len(self._allocs)

    def allocated_size(self, offset: int) -> int:
        """Size asked for by the live allocation at ``offset``.

        Raises:
            VkumdValueError: no live allocation starts at ``offset``.
        """
        try:
            return self._allocs[_check_int("offset", offset)]
        except KeyError:
            raise VkumdValueError(
                f"offset {offset!r} is not a live allocation in this block"
            ) from None

    def free_ranges(self) -> list[tuple[int, int]]:
        """The free ranges as ``(offset, size)`` pairs sorted by offset (a copy, for debugging)."""
        return [(off, self._free_size_at[off]) for off in self._free_offsets]

    def __repr__(self) -> str:
        return (
            f"RangeAllocator(size={self.size}, used_bytes={self._used_bytes}, "
            f"allocations={len(self._allocs)}, free_ranges={len(self._free_offsets)}, "
            f"largest_free={self.largest_free})"
        )

    # -- operations -------------------------------------------------------------------------

    def allocate(self, size: int, alignment: int) -> int | None:
        """Reserve ``size`` bytes starting at a multiple of ``alignment``.

        Args:
            size: bytes to reserve, at least 1.
            alignment: required alignment of the returned offset; any power of two.

        Returns:
            The offset of the new range inside the block, or ``None`` when no single free
            range can hold it (the block is full or too fragmented). ``None`` is not an error
            because the caller's usual answer is to try another block or create one.

        Raises:
            VkumdValueError: ``size`` < 1 or ``alignment`` is not a power of two.
            VkumdTypeError: ``size`` or ``alignment`` is not an int.
        """
        size = _check_int("size", size)
        alignment = _check_int("alignment", alignment)
        if size < 1:
            raise VkumdValueError(f"allocation size must be at least 1 byte, got {size}")
        if alignment < 1 or alignment & (alignment - 1):
            raise VkumdValueError(f"alignment must be a power of two, got {alignment}")

        mask = alignment - 1
        # Candidates are visited from the smallest free range of at least `size` bytes up.
        # Only ranges shorter than size + alignment - 1 can fail for lack of padding room, so
        # the scan stops after those at the latest: the first fit found is the best fit.
        index = bisect.bisect_left(self._by_size, (size, -1))
        while index < len(self._by_size):
            range_size, range_offset = self._by_size[index]
            aligned = (range_offset + mask) & ~mask
            padding = aligned - range_offset
            if padding + size <= range_size:
                self._take(index, range_offset, range_size, aligned, size)
                return aligned
            index += 1
        return None

    def free(self, offset: int) -> None:
        """Return the allocation starting at ``offset`` and merge it with free neighbours.

        Raises:
            VkumdValueError: ``offset`` is not a live allocation (a double free, or an offset
                this allocator never returned).
            VkumdTypeError: ``offset`` is not an int.
        """
        offset = _check_int("offset", offset)
        try:
            size = self._allocs.pop(offset)
        except KeyError:
            raise VkumdValueError(
                f"free of offset {offset!r}: not a live allocation in this block of "
                f"{self.size} bytes (double free or unknown offset)"
            ) from None
        self._used_bytes -= size

        start, end = offset, offset + size
        pos = bisect.bisect_left(self._free_offsets, offset)
        if pos > 0:
            left = self._free_offsets[pos - 1]
            left_size = self._free_size_at[left]
            if left + left_size == start:
                self._remove_free(pos - 1)
                start = left
                pos -= 1
        if pos < len(self._free_offsets):
            right = self._free_offsets[pos]
            if right == end:
                end += self._free_size_at[right]
                self._remove_free(pos)
        self._insert_free(pos, start, end - start)

    def reset(self) -> None:
        """Forget every allocation: the whole block becomes one free range again."""
        self._free_offsets = [0]
        self._free_size_at = {0: self.size}
        self._by_size = [(self.size, 0)]
        self._allocs = {}
        self._used_bytes = 0

    def check_invariants(self) -> None:
        """Verify the internal structure; raise ``AssertionError`` describing the first fault.

        Checked: free ranges are sorted, non-empty, inside the block and never adjacent (always
        merged); the size index holds exactly the free ranges; allocations and free ranges
        together tile ``[0, size)`` with no overlap and no gap; the byte totals add up.
        Meant for tests and debugging; it costs O(n log n).
        """

        # Explicit raises rather than `assert` so the check still works under `python -O`.
        def fail(msg: str) -> None:
            raise AssertionError(f"RangeAllocator invariant broken: {msg}; {self!r}")

        if self._free_offsets != sorted(set(self._free_offsets)):
            fail(f"free offsets not strictly sorted: {self._free_offsets}")
        if set(self._free_offsets) != set(self._free_size_at):
            fail("free offset list and free size map disagree")
        expected_index = sorted((s, o) for o, s in self._free_size_at.items())
        if self._by_size != expected_index:
            fail(f"size index {self._by_size} != free ranges {expected_index}")

        prev_free_end = -1
        for off in self._free_offsets:
            size = self._free_size_at[off]
            if size < 1:
                fail(f"empty free range at {off}")
            if off < 0 or off + size > self.size:
                fail(f"free range ({off}, {size}) outside the block")
            if off == prev_free_end:
                fail(f"free range at {off} touches the previous one: not merged")
            prev_free_end = off + size

        for off, size in self._allocs.items():
            if size < 1:
                fail(f"empty allocation at {off}")
            if off < 0 or off + size > self.size:
                fail(f"allocation ({off}, {size}) outside the block")

        ranges = sorted(
            [(o, s, "free") for o, s in self._free_size_at.items()]
            + [(o, s, "alloc") for o, s in self._allocs.items()]
        )
        cursor = 0
        for off, size, kind in ranges:
            if off < cursor:
                fail(f"{kind} range ({off}, {size}) overlaps the range before it")
            if off > cursor:
                fail(f"bytes [{cursor}, {off}) are neither free nor allocated")
            cursor = off + size
        if cursor != self.size:
            fail(f"bytes [{cursor}, {self.size}) are neither free nor allocated")

        if self._used_bytes != sum(self._allocs.values()):
            fail(f"used_bytes {self._used_bytes} != sum of allocations")
        if self.free_bytes != sum(self._free_size_at.values()):
            fail(f"free_bytes {self.free_bytes} != sum of free ranges")

    # -- internals --------------------------------------------------------------------------

    def _take(
        self, index: int, range_offset: int, range_size: int, aligned: int, size: int
    ) -> None:
        """Carve ``[aligned, aligned + size)`` out of the free range at ``_by_size[index]``."""
        del self._by_size[index]
        pos = bisect.bisect_left(self._free_offsets, range_offset)
        del self._free_offsets[pos]
        del self._free_size_at[range_offset]
        # The leftovers cannot touch other free ranges: the original range was not adjacent to
        # any, and the new allocation sits between the two pieces.
        padding = aligned - range_offset
        if padding:
            self._insert_free(pos, range_offset, padding)
            pos += 1
        tail = range_size - padding - size
        if tail:
            self._insert_free(pos, aligned + size, tail)
        self._allocs[aligned] = size
        self._used_bytes += size

    def _insert_free(self, pos: int, offset: int, size: int) -> None:
        self._free_offsets.insert(pos, offset)
        self._free_size_at[offset] = size
        bisect.insort(self._by_size, (size, offset))

    def _remove_free(self, pos: int) -> None:
        offset = self._free_offsets.pop(pos)
        size = self._free_size_at.pop(offset)
        del self._by_size[bisect.bisect_left(self._by_size, (size, offset))]
