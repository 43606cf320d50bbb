"""Threads sharing streams, submitters and timelines: results, validation and bounded time.

The stress test runs with a tiny GIL switch interval so that threads interleave inside the
bookkeeping; the targeted tests widen one race window each with a slowed binding call, so
that they fail deterministically without the lock that closes it.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from thread_runner import run_threads

import vkumd
from vkumd import ops
from vkumd.submission import timeline as timeline_module
from vkumd.submission.submitter import Submitter
from vkumd.submission.timeline import Timeline
from vkumd.testing.numerics import rel_error
from vkumd.vk.binding import ffi, lib, vk

JOIN_TIMEOUT_S = 60.0


@pytest.fixture
def racy() -> Iterator[None]:
    """Switch threads every 10 us instead of 5 ms, so races show up within seconds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    yield
    sys.setswitchinterval(before)


@pytest.fixture(params=["timeline", "fences"])
def fresh_ctx(request: pytest.FixtureRequest,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[vkumd.Context]:
    """A new context counting submissions with timeline semaphores, or with fences."""
    fences = request.param == "fences"
    if fences:
        monkeypatch.setenv("VKUMD_DISABLE_TIMELINE_SEMAPHORES", "1")
    ctx = vkumd.Context()
    assert ctx.uses_timeline_semaphores is not fences
    yield ctx
    ctx.close()


class _GatedLib:
    """Forwards to the real binding; ``name`` first runs ``before(call_index)``."""

    def __init__(self, real: Any, name: str, before: Callable[[int], Any]) -> None:
        self._real = real
        self._name = name
        self._before = before
        self._calls = 0
        self._calls_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        real = getattr(self._real, name)
        if name != self._name:
            return real

        def gated(*args: Any) -> Any:
            with self._calls_lock:
                index = self._calls
                self._calls += 1
            override = self._before(index)
            return real(*args) if override is None else override

        return gated


# -- stress ------------------------------------------------------------------------------
def _worker(ctx: vkumd.Context, index: int, deadline: float, private: vkumd.Stream) -> None:
    """Mix ops, reads, flushes, done checks and cross-stream events until ``deadline``."""
    rng = np.random.default_rng(1000 + index)
    shared = ctx.default_stream
    step = 0
    while time.monotonic() < deadline or step < 8:
        step += 1
        here, there = (shared, private) if step % 2 else (private, shared)
        n = int(rng.integers(1, 200))
        a, b = (rng.standard_normal(n, dtype=np.float32) for _ in range(2))
        with here:
            ta, tb = ctx.tensor(a), ctx.tensor(b)
            product = ops.mul(ops.add(ta, tb), tb)
        want = (a.astype(np.float64) + b) * b
        action = step % 4
        if action == 1:
            here.flush()
        elif action == 2:
            assert isinstance(here.done, bool)
        elif action == 3:
            m, k, cols = (int(x) for x in rng.integers(1, 24, size=3))
            x = rng.standard_normal((m, k), dtype=np.float32)
            y = rng.standard_normal((k, cols), dtype=np.float32)
            with here:
                mm = ops.matmul(ctx.tensor(x), ctx.tensor(y))
                event = here.record()
            there.wait(event)
            with there:
                doubled = ops.add(mm, mm)
            x64, y64 = x.astype(np.float64), y.astype(np.float64)
            # Relative to |x| @ |y|: a tiny product of cancelling terms has a large relative
            # error even when float32 summation is as exact as it can be.
            mm_err = np.max(np.abs(doubled.numpy() - 2 * (x64 @ y64)) / (np.abs(x64) @ np.abs(y64)))
            assert mm_err < 1e-5, f"thread {index} step {step}: matmul error {mm_err}"
        err = rel_error(product.numpy(), want)
        assert err < 1e-5, f"thread {index} step {step}: (a+b)*b error {err}"
        if here is private:
            assert private.done  # only this thread records on it, and it just read back
    private.synchronize()


def test_eight_threads_share_the_default_stream_and_own_streams(fresh_ctx, racy) -> None:
    ctx = fresh_ctx
    privates = [ctx.stream(name=f"thread {i}", max_batch_dispatches=5) for i in range(8)]
    deadline = time.monotonic() + 2.5
    run_threads([lambda i=i: _worker(ctx, i, deadline, privates[i]) for i in range(8)],
                JOIN_TIMEOUT_S)
    ctx.synchronize()
    assert ctx.default_stream.done
    for stream in privates:
        stream.release()


def test_pollers_do_not_recycle_work_still_in_flight(fresh_ctx, racy) -> None:
    """``done``, ``Event.done`` and ``completed_value()`` from other threads while one
    thread keeps several submissions in flight and reads results."""
    ctx = fresh_ctx
    stream = ctx.stream(max_batch_dispatches=2)
    stop = threading.Event()
    events: list[vkumd.Event] = []
    rng = np.random.default_rng(7)
    a = rng.standard_normal(4099, dtype=np.float32)

    def produce() -> None:
        try:
            ta = ctx.tensor(a)
            for i in range(300):
                with stream:
                    out = ops.add(ops.mul(ta, ta), ta)
                    events.append(stream.record())
                if i % 4 == 3:
                    assert rel_error(out.numpy(), a.astype(np.float64) * a + a) < 1e-6
        finally:
            stop.set()

    def poll() -> None:
        while not stop.is_set():
            if events:
                assert isinstance(events[-1].done, bool)
            stream.completed_value()

    def poll_done() -> None:
        while not stop.is_set():
            assert isinstance(stream.done, bool)

    run_threads([produce, poll, poll, poll_done], JOIN_TIMEOUT_S)
    stream.synchronize()
    assert stream.done and all(event.done for event in events)
    stream.release()


# -- targeted races ----------------------------------------------------------------------
def _submitter(ctx: vkumd.Context, *, semaphore: bool) -> Submitter:
    return Submitter(ctx.device.handle, ctx.device.compute_queue, compute=True,
                     push_descriptors=ctx.kernels.push_descriptors,
                     timeline_semaphore=semaphore, name="test submitter")


def _counter(device: Any, timeline: Timeline) -> int:
    out = ffi.new("uint64_t*")
    assert lib.vkGetSemaphoreCounterValue(device, timeline.handle, out) == vk.VK_SUCCESS
    return int(out[0])


def test_two_waiters_on_one_timeline_each_wait_for_their_own_value(ctx, monkeypatch) -> None:
    """A waiter's value must not be overwritten by another thread's wait (once a wrong
    result: a read returned before the work it waited for had finished)."""
    if not ctx.uses_timeline_semaphores:
        pytest.skip("needs timeline semaphores")
    submitter = _submitter(ctx, semaphore=True)
    timeline = submitter.timeline
    second_entered = threading.Event()

    def hold_first_until_second_enters(index: int) -> None:
        if index == 0:
            second_entered.wait(2.0)
        else:
            second_entered.set()

    gated = _GatedLib(lib, "vkWaitSemaphores", hold_first_until_second_enters)
    monkeypatch.setattr(timeline_module, "lib", gated)
    seen: dict[str, int] = {}

    def wait_for(value: int, key: str) -> Callable[[], None]:
        def run() -> None:
            timeline.wait(value)  # before its submission: timeline semaphores allow that
            seen[key] = _counter(ctx.device.handle, timeline)
        return run

    late = threading.Thread(target=wait_for(2, "late"), daemon=True)
    early = threading.Thread(target=wait_for(1, "early"), daemon=True)
    try:
        late.start()
        while gated._calls == 0:
            time.sleep(0.001)
        early.start()
        assert second_entered.wait(5.0)
        submitter.submit([], describe="value 1")
        early.join(5.0)
        late.join(0.2)
        assert "late" not in seen, f"the wait for value 2 returned at counter {seen['late']}"
    finally:
        submitter.submit([], describe="value 2")
        late.join(5.0)
        monkeypatch.undo()
    assert seen["early"] >= 1 and seen["late"] == 2
    submitter.wait(2)
    submitter.release()


def test_fences_polled_from_two_threads_retire_each_fence_once(ctx, monkeypatch) -> None:
    """Two threads that both see the oldest fence signalled must not both retire it
    (``IndexError`` escaped, or a fence was reset twice and reused while pending)."""
    submitter = _submitter(ctx, semaphore=False)
    timeline = submitter.timeline
    for _ in range(2):
        submitter.submit([], describe="an empty submission")
    ctx.device.wait_idle()
    both_looked = threading.Barrier(2)

    def meet_once(index: int) -> None:
        if index < 2:
            try:
                both_looked.wait(0.5)
            except threading.BrokenBarrierError:
                pass  # the other thread is kept out (by the lock): go on alone

    monkeypatch.setattr(timeline_module, "lib", _GatedLib(lib, "vkGetFenceStatus", meet_once))
    run_threads([timeline.completed, timeline.completed], timeout=10.0)
    monkeypatch.undo()
    assert timeline.completed() == 2
    for _ in range(3):  # reuses the retired fences: one of them twice would be reset in use
        value = submitter.submit([], describe="an empty submission")
    submitter.wait(value)
    assert submitter.collect() == 5
    ctx.device.wait_idle()
    submitter.release()


def test_fence_waits_and_polls_from_threads_while_one_submits(ctx, racy) -> None:
    """Waiters and pollers racing the retirement of fences (``StopIteration`` escaped
    ``Timeline.wait``, ``IndexError`` escaped ``completed()``)."""
    submitter = _submitter(ctx, semaphore=False)
    timeline = submitter.timeline
    stop = threading.Event()

    def submit() -> None:
        try:
            for _ in range(1500):
                submitter.submit([], describe="an empty submission")
        finally:
            stop.set()

    def wait_and_poll() -> None:
        while not stop.is_set():
            target = timeline.submitted
            timeline.wait(target)
            assert timeline.completed() >= target
            submitter.collect()

    run_threads([submit, wait_and_poll, wait_and_poll, wait_and_poll], JOIN_TIMEOUT_S)
    submitter.wait(timeline.submitted)
    assert timeline.completed() == timeline.submitted == 1500
    submitter.release()

