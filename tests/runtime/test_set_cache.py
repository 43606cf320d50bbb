"""The stream's descriptor-set cache: sets reused across dispatches and submissions, never
for a buffer they do not reference, retired only after the work that used them."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.framework import ops
from vkumd.submission import descriptors
from vkumd.testing.numerics import rel_error
from vkumd.vk.binding import ffi


def _adds(ctx: vkumd.Context, stream: vkumd.Stream, n: int, rounds: int) -> list[vkumd.Tensor]:
    """``rounds`` batches of ``n`` adds, each into an output of its own (poisoned first),
    checked against float64; then once more into the last output alone. Returns the
    outputs."""
    rng = np.random.default_rng()
    a, b = rng.standard_normal((2, 257), dtype=np.float32)
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    outs = [ctx.empty(257) for _ in range(n)]
    want = a.astype(np.float64) + b
    for _ in range(rounds):
        with stream:
            for out in outs:
                ops.fill(out, np.nan)
        stream.synchronize()
        before = stream.barriers
        with stream:
            for out in outs:
                ops.add(ta, tb, out=out)
        assert stream.barriers == before, "adds into distinct outputs need no barrier"
        stream.synchronize()
        for out in outs:
            got = out.numpy()
            assert not np.isnan(got).any()
            assert rel_error(got, want) < 1e-6
    # The last binding of a round is the one a cache that has just retired still holds.
    with stream:
        ops.fill(outs[-1], np.nan)
        ops.add(ta, tb, out=outs[-1])
    assert rel_error(outs[-1].numpy(), want) < 1e-6
    return outs


def test_cpu_drivers_default_to_cached_sets() -> None:
    with vkumd.Context() as ctx:
        if ctx.caps.device_type != "cpu":
            pytest.skip(f"{ctx.caps.name} is not a CPU driver; push descriptors stay default")
        assert not ctx.kernels.push_descriptors
        assert not ctx.descriptors.push_descriptors


def test_sets_are_reused_across_submissions() -> None:
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream(max_batch_dispatches=1000)
        binder = stream.submitter.binder
        _adds(ctx, stream, 37, rounds=1)
        allocated = binder.sets_allocated
        assert allocated >= 37
        assert binder.cached_sets >= 37
        # The same bindings again, in new submissions: no set is allocated.
        rng = np.random.default_rng()
        x = ctx.tensor(rng.standard_normal(64, dtype=np.float32))
        y = ctx.empty(64)
        for _ in range(3):
            with stream:
                ops.add(x, x, out=y)
            stream.synchronize()
        assert binder.sets_allocated == allocated + 1
        np.testing.assert_allclose(y.numpy(), 2 * x.numpy(), rtol=1e-7)
        stream.release()


def test_an_equal_handle_of_another_object_misses() -> None:
    """A VkBuffer handle value can return for a new buffer after the old one is destroyed;
    the cache must then not hand out the old buffer's set. A second cdata object with the
    same value stands in for that new buffer."""
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream()
        binder = stream.submitter.binder
        t = ctx.zeros((16,))
        program = ctx.kernels.program(_add_variant(ctx, t))
        buffers = (t.binding,) * 3
        first = binder.prepare(program.layout, buffers)
        assert binder.prepare(program.layout, buffers) == first
        handle, offset, size = t.binding
        same_value = ffi.cast("VkBuffer", int(ffi.cast("uintptr_t", handle)))
        assert same_value == handle and same_value is not handle
        binder.prepare(program.layout, ((same_value, offset, size),) * 3)
        assert binder.sets_allocated == 2
        stream.release()


def _add_variant(ctx: vkumd.Context, t: vkumd.Tensor):
    from vkumd.compiler.kernels.elementwise_plan import binary_plan

    return binary_plan(ctx.caps, "add", "F32", t.shape, t.shape, t.shape).program


def test_a_full_cache_retires_its_sets_after_the_work_that_used_them(monkeypatch) -> None:
    monkeypatch.setattr(descriptors, "CACHED_SETS", 4)
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream(max_batch_dispatches=1000)
        binder = stream.submitter.binder
        # 45 outputs: the cache fills and retires eleven times a round, in the middle of a
        # batch whose earlier dispatches still bind the retired sets; the validation layer
        # (VKUMD_VALIDATION=1) reports a set used after its pool was reset.
        _adds(ctx, stream, 45, rounds=3)
        _adds(ctx, stream, 5, rounds=1)
        assert binder.cached_sets <= 4
        # Retired pools came back once their submission completed: one round's worth (a
        # pool per four sets) at most, not one per retirement of every round.
        assert binder.pool_count <= -(-45 // 4) + 1
        stream.release()


def test_a_discarded_batch_keeps_retired_pools_for_the_next_submission(monkeypatch) -> None:
    monkeypatch.setattr(descriptors, "CACHED_SETS", 4)
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream(max_batch_dispatches=1000)
        binder = stream.submitter.binder
        t = ctx.zeros((16,))
        program = ctx.kernels.program(_add_variant(ctx, t))
        others = [ctx.zeros((16,)) for _ in range(6)]
        for other in others:
            binder.prepare(program.layout, (t.binding, t.binding, other.binding))
        # Six sets through a cache of four: its first pool retired. The cached sets came
        # from the cache's own pools, so a discarded batch has nothing to give back, and the
        # retired pool waits for the next submission.
        assert binder.take_unsubmitted_pools() == []
        taken = binder.take_pools()
        assert len(taken) == 1
        binder.recycle(taken)
        stream.release()


def test_freeing_cached_sets_leaves_no_pool_and_waits_first(monkeypatch) -> None:
    """``free_cached_sets()`` submits what is recorded and waits for it before it destroys a
    pool (the validation layer reports a pool destroyed while a set of it is in use), leaves
    no pool however many the cache had filled, and the stream goes on working."""
    monkeypatch.setattr(descriptors, "SETS_PER_POOL", 4)
    monkeypatch.setattr(descriptors, "BUFFERS_PER_POOL", 32)
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream(max_batch_dispatches=1000)
        binder = stream.submitter.binder
        before = vkumd.live_objects().get("DescriptorPool", 0)
        a = ctx.tensor(np.arange(64, dtype=np.float32))
        outs = [ctx.empty(64) for _ in range(10)]
        with stream:
            for out in outs:
                ops.add(a, a, out=out)
        assert binder.pool_count == 3  # ten sets, four to a pool; recorded, not submitted
        assert stream.free_cached_sets() == 3
        assert binder.pool_count == 0 and binder.cached_sets == 0
        assert vkumd.live_objects().get("DescriptorPool", 0) == before
        want = 2 * np.arange(64, dtype=np.float32)
        for out in outs:
            np.testing.assert_array_equal(out.numpy(), want)
        with stream:
            ops.add(a, outs[0], out=outs[1])
        stream.synchronize()
        np.testing.assert_array_equal(outs[1].numpy(), 3 * np.arange(64, dtype=np.float32))
        assert binder.pool_count == 1
        stream.release()
