"""Running out: memory under a limit, descriptor pools, and a long burst of queued work."""

from __future__ import annotations

import faulthandler
import os

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.runtime.memory import MiB
from vkumd.submission.submitter import MAX_IN_FLIGHT

_PAGE = os.sysconf("SC_PAGE_SIZE")


def _rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE / MiB


@pytest.mark.parametrize("elements", [1000, 48 * 1024, 160 * 1024],
                         ids=["small", "shared", "dedicated"])
def test_allocating_until_out_of_memory_then_freeing_leaves_the_pool_reusable(
        elements: int) -> None:
    limit = 8 * MiB
    with vkumd.Context(memory_limit=limit, block_size=1 * MiB) as ctx:
        held = []
        with pytest.raises(vkumd.OutOfDeviceMemory) as info:
            for _ in range(100_000):
                held.append(ctx.empty(elements))
        assert info.value.limit == limit and info.value.requested == elements * 4
        assert ctx.memory.total_bytes() <= limit
        count = len(held)
        assert count * elements * 4 > limit // 2, "the pool wasted most of its limit"
        for t in held:
            t.release()
        assert ctx.memory.used_bytes() == 0
        again = [ctx.empty(elements) for _ in range(count)]  # the same amount fits again
        for t in again[2:]:  # room for staging memory, where tensors are not mapped
            t.release()
        x = np.arange(elements, dtype=np.float32)
        again[0].write(x)
        ops.add(again[0], again[0], out=again[1])
        np.testing.assert_array_equal(again[1].numpy(), 2 * x)
        for t in again[:2]:
            t.release()


def test_descriptor_pool_exhaustion_is_absorbed() -> None:
    from vkumd.submission.descriptors import SETS_PER_POOL

    dispatches = 3 * SETS_PER_POOL + 17
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream(max_batch_dispatches=10 * dispatches)  # all in one batch
        binder = stream.submitter.binder
        # An accumulator each: every dispatch of a round binds buffers no other one binds.
        accs = [ctx.tensor(np.zeros(33, np.float32)) for _ in range(dispatches)]
        one = ctx.tensor(np.ones(33, np.float32))
        for _round in range(2):
            with stream:
                for acc in accs:
                    ops.add(acc, one, out=acc)
            assert stream.submitter.submissions == _round, "the batch was split"
            stream.synchronize()
        for acc in (accs[0], accs[SETS_PER_POOL], accs[-1]):
            np.testing.assert_array_equal(acc.numpy(), np.full(33, 2, np.float32))
        # Every pool filled up and a new one joined; the second round found every set in the
        # stream's cache.
        assert binder.pool_count == -(-dispatches // SETS_PER_POOL)
        assert binder.sets_allocated == dispatches
        stream.release()


def test_a_long_burst_of_small_dispatches_stays_bounded() -> None:
    """10^5 eager ops queued on one stream without waiting (4-7 s here, half of it the
    validation layer). The host records faster than lavapipe runs them, so this checks the
    submitter's back-pressure: at most MAX_IN_FLIGHT submissions queued, host memory flat once
    the rings have filled, every batch full and the host blocked at most once per submission
    (a burst that waited on the device per op, or cut its batches short, would fail here)."""
    total, sample_every, warm_up = 100_000, 10_000, 20_000
    faulthandler.dump_traceback_later(300, exit=True)  # a deadlock fails loudly, not hangs
    try:
        with vkumd.Context() as ctx:
            stream = ctx.default_stream
            submitter = stream.submitter
            x = np.arange(64, dtype=np.float32)
            a, b, c = ctx.tensor(x), ctx.tensor(2 * x), ctx.empty(64)
            stream.synchronize()  # the uploads' own submissions (device-only lane) are done
            host_waits = [0]
            timeline_wait = submitter.timeline.wait

            def counted_wait(*args, **kwargs):
                host_waits[0] += 1
                return timeline_wait(*args, **kwargs)

            submitter.timeline.wait = counted_wait
            submitted_before = submitter.submissions
            rss: dict[int, float] = {}
            rings = {"in flight": 0, "free command buffers": 0, "uses": 0,
                     "descriptor pools": 0, "fences": 0}
            for i in range(1, total + 1):
                ops.add(a, b, out=c)
                if i % 500 == 0:
                    sizes = {"in flight": len(submitter._in_flight),
                             "free command buffers": len(submitter._free_commands),
                             "uses": len(stream.uses),
                             "descriptor pools": submitter.binder.pool_count,
                             "fences": len(submitter.timeline._fences)
                             + len(submitter.timeline._spare_fences)}
                    rings = {k: max(v, sizes[k]) for k, v in rings.items()}
                if i % sample_every == 0:
                    rss[i] = _rss_mib()
            ctx.synchronize()
            burst = submitter.submissions - submitted_before
            waits = host_waits[0]
            del submitter.timeline.wait
            np.testing.assert_array_equal(c.numpy(), 3 * x)
            assert burst == -(-total // stream.max_batch_dispatches), "batches were cut short"
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert rings["in flight"] <= MAX_IN_FLIGHT, rings
    assert rings["free command buffers"] <= MAX_IN_FLIGHT + 1, rings
    assert rings["uses"] <= 16 and rings["descriptor pools"] <= 2 * MAX_IN_FLIGHT, rings
    growth = max(rss.values()) - rss[warm_up]
    assert growth < 48, f"host memory grew {growth:.0f} MiB after the rings filled: {rss}"
    # Back-pressure waits for the oldest submission once MAX_IN_FLIGHT are queued: at most
    # one wait per submission past the first MAX_IN_FLIGHT, and the final synchronize.
    assert waits <= burst - MAX_IN_FLIGHT + 1, (waits, burst)
