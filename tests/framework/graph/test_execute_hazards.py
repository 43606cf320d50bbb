"""The hazard tracker's declared overlaps, alone (no device): arena sub-ranges that share
bytes conflict like one range, disjoint ones stay independent, undeclared memory keeps the
identity rule."""

from __future__ import annotations

from vkumd.submission.hazards import HazardTracker

BUF, OTHER = "arena", "other"


def tracker_with(*ranges):
    t = HazardTracker()
    t.track_overlaps(ranges)
    return t


def test_a_write_over_bytes_read_at_another_offset_needs_a_barrier() -> None:
    t = tracker_with((BUF, 0, 1024), (BUF, 768, 256), (BUF, 1024, 512))
    assert not t.access([(BUF, 0)], ())              # read P
    assert t.access([(BUF, 768)], [(BUF, 768)])  # write Q inside P: write after read
    assert not t.access([(BUF, 1024)], [(BUF, 1024)])  # disjoint from both: no barrier
    assert t.access([(BUF, 0)], ())                  # read P after Q's write: read after write
    assert t.barriers == 2


def test_identity_still_decides_for_undeclared_and_same_start_ranges() -> None:
    t = tracker_with((BUF, 0, 256), (BUF, 256, 256))
    assert not t.access([(OTHER, 0)], [(OTHER, 0)])
    assert not t.access([(OTHER, 64), (BUF, 0)], [(OTHER, 64)])  # undeclared offsets: independent
    assert t.access([(OTHER, 0)], ())                # the same key: read after write
    assert not t.access([(BUF, 256)], [(BUF, 256)])  # adjacent, not overlapping
    assert not t.access([(BUF, 0)], ())
    assert t.access([(BUF, 256)], ())                # the same start: identity
    assert t.barriers == 2


def test_one_start_with_several_sizes_takes_the_union() -> None:
    t = tracker_with((BUF, 0, 256), (BUF, 0, 1024), (BUF, 512, 256))
    assert not t.access([(BUF, 512)], [(BUF, 512)])
    assert t.access([(BUF, 0)], ())                  # the longer range at 0 reaches 512
    assert not HazardTracker().access([(BUF, 512)], [(BUF, 512)])


def test_declaring_twice_adds_up() -> None:
    t = tracker_with((BUF, 0, 512))
    t.track_overlaps([(BUF, 256, 256), (BUF, 4096, 0)])  # an empty range overlaps nothing
    assert not t.access([(BUF, 256)], [(BUF, 256)])
    assert t.access([(BUF, 0)], ())
