"""Tests for the range sub-allocator (no device needed)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    multiple,
    rule,
)

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.runtime.suballoc import RangeAllocator

# -- construction and argument checks ---------------------------------------------------------


def test_new_block_is_one_free_range() -> None:
    a = RangeAllocator(1024)
    assert a.size == 1024
    assert a.used_bytes == 0
    assert a.free_bytes == 1024
    assert a.largest_free == 1024
    assert a.is_empty
    assert a.allocation_count == 0
    assert a.free_ranges() == [(0, 1024)]
    a.check_invariants()


@pytest.mark.parametrize("size", [0, -1, -4096])
def test_block_size_must_be_positive(size: int) -> None:
    with pytest.raises(VkumdValueError, match=str(size)):
        RangeAllocator(size)


@pytest.mark.parametrize("size", [1.0, "64", True, None])
def test_non_int_sizes_are_type_errors(size: object) -> None:
    with pytest.raises(VkumdTypeError):
        RangeAllocator(size)  # type: ignore[arg-type]
    with pytest.raises(VkumdTypeError):
        RangeAllocator(64).allocate(size, 1)  # type: ignore[arg-type]


@pytest.mark.parametrize("size", [0, -1])
def test_zero_or_negative_allocation_rejected(size: int) -> None:
    a = RangeAllocator(64)
    with pytest.raises(VkumdValueError, match="at least 1 byte"):
        a.allocate(size, 1)
    assert a.is_empty


@pytest.mark.parametrize("alignment", [0, -1, -4, 3, 6, 12, 100, 2**20 + 1])
def test_alignment_must_be_power_of_two(alignment: int) -> None:
    a = RangeAllocator(1 << 22)
    with pytest.raises(VkumdValueError, match=f"power of two, got {alignment}") as info:
        a.allocate(16, alignment)
    # Callers catching the builtin or the package root both see it.
    assert isinstance(info.value, ValueError)
    assert isinstance(info.value, VkumdError)
    a.check_invariants()


# -- alignment ----------------------------------------------------------------------------------


@pytest.mark.parametrize("alignment", [1, 2, 4, 8, 64, 256, 4096, 65536])
def test_offsets_are_aligned(alignment: int) -> None:
    a = RangeAllocator(1 << 20)
    a.allocate(3, 1)  # misalign the start of the free space
    off = a.allocate(100, alignment)
    assert off is not None
    assert off % alignment == 0
    a.check_invariants()


def test_alignment_padding_stays_free_and_is_reused() -> None:
    a = RangeAllocator(1024)
    assert a.allocate(1, 1) == 0
    assert a.allocate(10, 256) == 256
    # The 255 bytes of padding in front of the aligned allocation are still free.
    assert a.free_ranges() == [(1, 255), (266, 758)]
    assert a.used_bytes == 11
    assert a.free_bytes == 1024 - 11
    a.check_invariants()
    # Best fit: the padding (255 bytes) is smaller than the tail, so it serves this request.
    assert a.allocate(200, 8) == 8
    assert a.free_ranges() == [(1, 7), (208, 48), (266, 758)]
    a.check_invariants()


def test_alignment_larger_than_block() -> None:
    a = RangeAllocator(100)
    assert a.allocate(10, 4096) == 0
    assert a.allocate(10, 4096) is None
    a.check_invariants()


def test_request_fits_only_after_padding_check() -> None:
    a = RangeAllocator(64)
    assert a.allocate(1, 1) == 0
    # 63 bytes free starting at 1, but 32 bytes aligned to 32 fit only at 32.
    assert a.allocate(32, 32) == 32
    # 31 bytes free at [1, 32): 31 bytes aligned to 2 would need to start at 2 and overflow.
    assert a.allocate(31, 2) is None
    assert a.allocate(30, 2) == 2
    a.check_invariants()


# -- best fit -------------------------------------------------------------------------------------


def test_best_fit_prefers_smallest_fitting_range() -> None:
    a = RangeAllocator(1000)
    offs = [a.allocate(s, 1) for s in (100, 10, 50, 10, 20, 10)]
    assert offs == [0, 100, 110, 160, 170, 190]
    a.free(0)  # hole of 100 at 0
    a.free(110)  # hole of 50 at 110
    a.free(170)  # hole of 20 at 170
    # Tail hole of 800 at 200. A 15-byte request should go to the 20-byte hole.
    assert a.allocate(15, 1) == 170
    assert a.allocate(40, 1) == 110
    assert a.allocate(90, 1) == 0
    assert a.allocate(101, 1) == 200
    a.check_invariants()


def test_equal_sizes_tie_break_on_lowest_offset() -> None:
    a = RangeAllocator(40)
    offs = [a.allocate(10, 1) for _ in range(4)]
    assert offs == [0, 10, 20, 30]
    a.free(30)
    a.free(10)
    assert a.allocate(10, 1) == 10


# -- exhaustion and fragmentation ------------------------------------------------------------------


def test_full_block_returns_none() -> None:
    a = RangeAllocator(256)
    offs = [a.allocate(64, 64) for _ in range(4)]
    assert offs == [0, 64, 128, 192]
    assert a.allocate(1, 1) is None
    assert a.free_bytes == 0
    assert a.largest_free == 0
    assert a.free_ranges() == []
    a.check_invariants()


def test_exact_fit_of_whole_block() -> None:
    a = RangeAllocator(4096)
    assert a.allocate(4097, 1) is None
    assert a.allocate(4096, 4096) == 0
    assert a.allocate(1, 1) is None
    a.free(0)
    assert a.free_ranges() == [(0, 4096)]


def test_fragmentation_returns_none_although_total_free_would_fit() -> None:
    a = RangeAllocator(64 * 1024)
    offs = [a.allocate(1024, 256) for _ in range(64)]
    assert None not in offs
    assert a.allocate(1, 1) is None
    for off in offs[::2]:
        a.free(off)
    assert a.free_bytes == 32 * 1024
    assert a.largest_free == 1024
    assert len(a.free_ranges()) == 32
    assert a.allocate(2048, 1) is None
    assert a.allocate(1025, 1) is None
    assert a.allocate(1024, 1024) is not None  # a single hole still fits exactly
    a.check_invariants()
    # Freeing one survivor merges its two neighbouring holes into one of 3 KiB.
    a.free(offs[3])
    assert a.largest_free == 3 * 1024
    assert a.allocate(2048, 1) == 2 * 1024
    a.check_invariants()


# -- free and merging ------------------------------------------------------------------------------


def _three_blocks() -> tuple[RangeAllocator, int, int, int]:
    a = RangeAllocator(400)
    x, y, z = (a.allocate(100, 1) for _ in range(3))
    assert (x, y, z) == (0, 100, 200)
    assert a.free_ranges() == [(300, 100)]
    return a, x, y, z


def test_free_merges_with_left_neighbour() -> None:
    a, x, y, _ = _three_blocks()
    a.free(x)
    a.free(y)
    assert a.free_ranges() == [(0, 200), (300, 100)]
    a.check_invariants()


def test_free_merges_with_right_neighbour() -> None:
    a, _, y, z = _three_blocks()
    a.free(z)
    assert a.free_ranges() == [(200, 200)]
    a.free(y)
    assert a.free_ranges() == [(100, 300)]
    a.check_invariants()


def test_free_merges_with_both_neighbours() -> None:
    a, x, y, z = _three_blocks()
    a.free(x)
    a.free(z)
    assert a.free_ranges() == [(0, 100), (200, 200)]
    a.free(y)
    assert a.free_ranges() == [(0, 400)]
    assert a.is_empty
    assert a.largest_free == 400
    a.check_invariants()


def test_free_without_neighbours_makes_new_range() -> None:
    a, _, y, _ = _three_blocks()
    a.free(y)
    assert a.free_ranges() == [(100, 100), (300, 100)]
    a.check_invariants()


def test_free_merges_with_alignment_padding() -> None:
    a = RangeAllocator(1024)
    a.allocate(1, 1)
    off = a.allocate(10, 512)
    assert off == 512
    a.free(off)
    assert a.free_ranges() == [(1, 1023)]
    a.free(0)
    assert a.free_ranges() == [(0, 1024)]


def test_double_free_raises() -> None:
    a = RangeAllocator(128)
    off = a.allocate(16, 16)
    assert off is not None
    a.free(off)
    with pytest.raises(VkumdValueError, match="double free") as info:
        a.free(off)
    assert isinstance(info.value, ValueError)
    a.check_invariants()


@pytest.mark.parametrize("offset", [-1, 1, 8, 128, 10**9])
def test_free_unknown_offset_raises(offset: int) -> None:
    a = RangeAllocator(128)
    a.allocate(16, 16)
    a.allocate(16, 16)
    with pytest.raises(VkumdValueError, match=f"offset {offset}"):
        a.free(offset)
    assert a.allocation_count == 2
    a.check_invariants()


@pytest.mark.parametrize("offset", ["0", None, 0.0, [0], False])
def test_free_non_int_offset_is_type_error(offset: object) -> None:
    a = RangeAllocator(128)
    a.allocate(16, 16)  # offset 0 is live, so 0.0 or False must not free it
    with pytest.raises(VkumdTypeError):
        a.free(offset)  # type: ignore[arg-type]
    assert a.allocation_count == 1


def test_numpy_style_integers_accepted() -> None:
    class Index:
        """Stands in for numpy.int64: an integer through __index__ only."""

        def __init__(self, value: int) -> None:
            self.value = value

        def __index__(self) -> int:
            return self.value

    a = RangeAllocator(Index(256))  # type: ignore[arg-type]
    off = a.allocate(Index(16), Index(64))  # type: ignore[arg-type]
    assert off == 0 and type(off) is int
    a.free(Index(0))  # type: ignore[arg-type]
    assert a.is_empty


def test_allocated_size() -> None:
    a = RangeAllocator(128)
    off = a.allocate(24, 16)
    assert a.allocated_size(off) == 24
    with pytest.raises(VkumdValueError):
        a.allocated_size(off + 1)


def test_reset_restores_whole_block() -> None:
    a = RangeAllocator(1000)
    for _ in range(5):
        a.allocate(33, 8)
    a.free(40)
    a.reset()
    assert a.is_empty
    assert a.used_bytes == 0
    assert a.free_ranges() == [(0, 1000)]
    a.check_invariants()
    assert a.allocate(1000, 1) == 0


def test_check_invariants_detects_corruption() -> None:
    a = RangeAllocator(100)
    a.allocate(10, 1)
    a._used_bytes += 1
    with pytest.raises(AssertionError, match="used_bytes"):
        a.check_invariants()

    b = RangeAllocator(100)
    b.allocate(10, 1)
    b.free(0)
    # Split the single free range into two touching ones behind the allocator's back.
    b._remove_free(0)
    b._insert_free(0, 0, 50)
    b._insert_free(1, 50, 50)
    with pytest.raises(AssertionError, match="not merged"):
        b.check_invariants()

    c = RangeAllocator(100)
    c.allocate(10, 1)
    c._allocs[5] = 10  # overlaps [0, 10) and the free range
    with pytest.raises(AssertionError):
        c.check_invariants()


def test_many_allocations_free_everything_in_any_order() -> None:
    a = RangeAllocator(1 << 20)
    offs = []
    for i in range(2000):
        off = a.allocate(1 + (i * 37) % 300, 1 << (i % 8))
        assert off is not None
        offs.append(off)
    a.check_invariants()
    # Free in an order that exercises all merge cases.
    for off in offs[1::3] + offs[::3] + offs[2::3]:
        a.free(off)
    a.check_invariants()
    assert a.free_ranges() == [(0, 1 << 20)]
    assert a.used_bytes == 0


# -- random sequences ------------------------------------------------------------------------------


class RangeAllocatorMachine(RuleBasedStateMachine):
    """Random allocate/free sequences checked against a plain model of the live allocations."""

    allocations = Bundle("allocations")

    def __init__(self) -> None:
        super().__init__()
        self.alloc: RangeAllocator | None = None
        self.live: dict[int, tuple[int, int]] = {}  # offset -> (size, alignment)

    @initialize(size=st.integers(1, 4096))
    def make_block(self, size: int) -> None:
        self.alloc = RangeAllocator(size)

    @rule(
        target=allocations,
        size=st.integers(1, 600),
        alignment=st.sampled_from([1, 2, 4, 8, 16, 64, 256, 1024]),
    )
    def allocate(self, size: int, alignment: int) -> object:
        a = self.alloc
        before = a.free_ranges()
        fitting = [(rsize, roff) for roff, rsize in before if (-roff % alignment) + size <= rsize]
        off = a.allocate(size, alignment)
        if off is None:
            assert not fitting, f"{size}@{alignment} fits in {fitting} but got None"
            assert a.free_ranges() == before
            return multiple()
        assert off % alignment == 0
        assert 0 <= off and off + size <= a.size
        for other, (osize, _) in self.live.items():
            assert off + size <= other or other + osize <= off, "allocations overlap"
        # Best fit: the range used is the smallest (then lowest) free range that fits.
        best_size, best_off = min(fitting)
        assert best_off <= off and off + size <= best_off + best_size
        self.live[off] = (size, alignment)
        return off

    @rule(offset=consumes(allocations))
    def free(self, offset: int) -> None:
        self.alloc.free(offset)
        del self.live[offset]

    @rule(offset=st.integers(-1, 4097))
    def free_arbitrary(self, offset: int) -> None:
        # Covers double frees (offsets already freed) and never-returned offsets.
        if offset in self.live:
            return
        with pytest.raises(VkumdValueError):
            self.alloc.free(offset)

    @invariant()
    def consistent(self) -> None:
        a = self.alloc
        if a is None:
            return
        a.check_invariants()
        used = sum(size for size, _ in self.live.values())
        assert a.used_bytes == used
        assert a.used_bytes + a.free_bytes == a.size
        assert a.allocation_count == len(self.live)
        assert a.is_empty == (not self.live)
        ranges = a.free_ranges()
        assert a.largest_free == max((s for _, s in ranges), default=0)

    def teardown(self) -> None:
        a = self.alloc
        if a is None:
            return
        for off in list(self.live):
            a.free(off)
            a.check_invariants()
        assert a.used_bytes == 0
        assert a.allocation_count == 0
        assert a.free_ranges() == [(0, a.size)]


RangeAllocatorMachine.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestRangeAllocatorMachine = RangeAllocatorMachine.TestCase
