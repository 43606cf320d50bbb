"""Streams, events, hazard-tracked barriers, descriptor recycling, threads and failures."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.submission import timeline as timeline_module
from vkumd.testing.numerics import poisoned, rel_error


def test_ops_run_asynchronously_and_a_read_back_waits(ctx) -> None:
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(1031, dtype=np.float32) for _ in range(2))
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    out = poisoned(ctx, 1031)
    stream = ctx.default_stream
    stream.synchronize()
    ops.add(ta, tb, out=out)
    assert not stream.done  # recorded, not yet submitted
    got = out.numpy()
    assert stream.done
    assert rel_error(got, a.astype(np.float64) + b) < 1e-6


def test_dependent_chain_matches_sequential_numpy_with_barriers(ctx) -> None:
    rng = np.random.default_rng()
    shape = (67, 13)
    a, b = (rng.standard_normal(shape, dtype=np.float32) for _ in range(2))
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    stream = ctx.default_stream
    stream.synchronize()
    before = stream.barriers
    x = ops.add(ta, tb)          # x = a + b
    y = ops.mul(x, tb)           # reads x: read after write
    ops.sub(y, ta, out=x)        # writes x, which y's op read: write after read
    ops.add(x, x, out=x)         # reads and writes x again
    want_x = ((a.astype(np.float64) + b) * b - a) * 2
    assert rel_error(x.numpy(), want_x) < 1e-5
    assert stream.barriers - before == 3


def test_independent_dispatches_record_no_barrier(ctx) -> None:
    rng = np.random.default_rng()
    a, b = (rng.standard_normal(257, dtype=np.float32) for _ in range(2))
    ta, tb = ctx.tensor(a), ctx.tensor(b)
    outs = [poisoned(ctx, 257) for _ in range(40)]
    stream = ctx.default_stream
    stream.synchronize()
    before = stream.barriers
    for out in outs:
        ops.add(ta, tb, out=out)
    assert stream.barriers == before
    want = a.astype(np.float64) + b
    assert all(rel_error(out.numpy(), want) < 1e-6 for out in outs)


def test_write_after_write_gets_a_barrier(ctx) -> None:
    t = ctx.empty(99)
    stream = ctx.default_stream
    stream.synchronize()
    before = stream.barriers
    ops.fill(t, 1.0)
    ops.fill(t, 2.0)
    assert stream.barriers - before == 1
    assert np.all(t.numpy() == 2.0)


def test_batches_submit_at_the_dispatch_budget(ctx) -> None:
    stream = ctx.stream(max_batch_dispatches=5)
    t = ctx.tensor(np.zeros(16, np.float32))
    one = ctx.tensor(np.ones(16, np.float32))
    submitted = stream.submitter.submissions
    with stream:
        for _ in range(12):
            ops.add(t, one, out=t)
    assert stream.submitter.submissions - submitted == 2  # 10 sent, 2 still recording
    assert np.all(t.numpy() == 12.0)
    stream.release()


def test_with_stream_is_per_thread_and_nests(ctx) -> None:
    s1, s2 = ctx.stream(name="one"), ctx.stream(name="two")
    seen: list[str] = []
    assert ctx.current_stream() is ctx.default_stream
    with s1:
        assert ctx.current_stream() is s1
        with s2:
            assert ctx.current_stream() is s2
            worker = threading.Thread(target=lambda: seen.append(ctx.current_stream().name))
            worker.start()
            worker.join()
        assert ctx.current_stream() is s1
    assert ctx.current_stream() is ctx.default_stream
    assert seen == ["default stream"]
    s1.release()
    s2.release()


def test_events_order_streams_on_the_device_and_time_work(ctx) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal(4099, dtype=np.float32)
    producer, consumer = ctx.stream(name="producer"), ctx.stream(name="consumer")
    ta = ctx.tensor(a)
    mid = ctx.empty(4099)
    out = poisoned(ctx, 4099)
    with producer:
        start = producer.record()
        ops.scale(ta, 3.0, out=mid)
        ready = producer.record()
    with consumer:
        consumer.wait(ready)  # no host wait here
        ops.add(mid, ta, out=out)
        finished = consumer.record()
    assert not isinstance(ready, type(None)) and ready.stream is producer
    finished.synchronize()
    assert finished.done and ready.done
    assert rel_error(out.numpy(), a.astype(np.float64) * 4) < 1e-6
    assert start.elapsed_time(ready) >= 0.0
    producer.release()
    consumer.release()


def test_event_errors(ctx) -> None:
    stream = ctx.stream()
    with pytest.raises(vkumd.VkumdTypeError, match="takes an Event"):
        stream.wait("not an event")  # type: ignore[arg-type]
    never = vkumd.Event(ctx)
    with pytest.raises(vkumd.VkumdValueError, match="never recorded"):
        never.elapsed_time(stream.record())
    with pytest.raises(vkumd.VkumdValueError, match="'compute' or 'transfer'"):
        ctx.stream("graphics")
    stream.release()
    with pytest.raises(vkumd.VkumdError, match="released"):
        with stream:
            ops.fill(ctx.empty(3), 1.0)
    with pytest.raises(vkumd.VkumdError, match="lives as long as its context"):
        ctx.default_stream.release()


def test_transfer_stream_upload_overlaps_and_orders_with_an_event(ctx) -> None:
    rng = np.random.default_rng()
    data = rng.standard_normal(5003, dtype=np.float32)
    transfer = ctx.stream("transfer", name="uploads")
    target = poisoned(ctx, 5003)
    out = poisoned(ctx, 5003)
    # Through staging memory even where the host could map the tensor, so the copy path runs.
    transfer.upload(target.allocation, memoryview(data).cast("B"))
    landed = transfer.record()
    ctx.default_stream.wait(landed)
    ops.scale(target, 2.0, out=out)
    assert rel_error(out.numpy(), data.astype(np.float64) * 2) < 1e-6
    if ctx.device.transfer_queue is None:
        assert transfer.compute  # no transfer-only family: the compute queue serves
    transfer.release()


def test_released_tensor_memory_returns_only_after_its_work(ctx) -> None:
    stream = ctx.default_stream
    stream.synchronize()
    t = ctx.tensor(np.zeros(1 << 16, np.float32))
    ops.fill(t, 5.0)
    used = ctx.memory.used_bytes()
    t.release()
    assert ctx.memory.used_bytes() == used  # still in use by recorded work
    stream.synchronize()
    assert ctx.memory.used_bytes() == used - (1 << 18)


@pytest.mark.parametrize("push_descriptors", [True, False])
def test_descriptor_pools_are_recycled_when_submissions_complete(push_descriptors) -> None:
    with vkumd.Context(push_descriptors=push_descriptors) as ctx:
        if push_descriptors and not ctx.caps.push_descriptors:
            pytest.skip(f"{ctx.caps.name} has no VK_KHR_push_descriptor")
        stream = ctx.stream(max_batch_dispatches=100)
        t = ctx.tensor(np.zeros(8, np.float32))
        one = ctx.tensor(np.ones(8, np.float32))
        with stream:
            for _ in range(30):
                for _ in range(100):
                    ops.add(t, one, out=t)
                stream.synchronize()
        assert np.all(t.numpy() == 3000.0)
        if push_descriptors:
            assert stream.submitter.binder.pool_count == 0
        else:
            # One set, bound once per batch and cached from one batch to the next.
            assert stream.submitter.binder.sets_allocated == 1
            assert stream.submitter.binder.pool_count == 1


def test_fence_fallback_without_timeline_semaphores(monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_DISABLE_TIMELINE_SEMAPHORES", "1")
    rng = np.random.default_rng()
    a = rng.standard_normal(333, dtype=np.float32)
    with vkumd.Context() as ctx:
        assert not ctx.default_stream.submitter.timeline.uses_semaphore
        other = ctx.stream()
        ta = ctx.tensor(a)
        mid = ctx.empty(333)
        with other:
            ops.scale(ta, 2.0, out=mid)
            event = other.record()
        ctx.default_stream.wait(event)  # falls back to a host wait
        out = ops.add(mid, ta)
        assert rel_error(out.numpy(), a.astype(np.float64) * 3) < 1e-6
        assert ctx.default_stream.done


def test_threads_each_with_a_stream_get_correct_results(ctx) -> None:
    rng = np.random.default_rng()
    inputs = [rng.standard_normal(2053, dtype=np.float32) for _ in range(2)]
    results: dict[int, np.ndarray] = {}
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            stream = ctx.stream(name=f"thread {i}", max_batch_dispatches=7)
            with stream:
                x = ctx.tensor(inputs[i])
                acc = ctx.tensor(np.zeros(2053, np.float32))
                for _ in range(25):
                    ops.add(acc, x, out=acc)
                results[i] = acc.numpy()
            stream.release()
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors
    for i in range(2):
        assert rel_error(results[i], inputs[i].astype(np.float64) * 25) < 1e-5


def _heavy_work(ctx, stream) -> vkumd.Tensor:
    big = ctx.tensor(np.ones(1 << 22, np.float32))
    with stream:
        for _ in range(12):
            ops.add(big, big, out=big)
    stream.flush()
    return big


def test_the_gil_is_released_while_waiting(ctx) -> None:
    stream = ctx.stream()
    _heavy_work(ctx, stream)
    counter = [0]
    stop = threading.Event()

    def count() -> None:
        while not stop.is_set():
            counter[0] += 1

    thread = threading.Thread(target=count)
    thread.start()
    try:
        start = time.perf_counter()
        stream.synchronize()
        waited = time.perf_counter() - start
    finally:
        stop.set()
        thread.join()
    assert waited > 0.001 and counter[0] > 100
    stream.release()


def test_timeout_raises_and_leaves_the_context_usable(ctx) -> None:
    stream = ctx.stream()
    big = _heavy_work(ctx, stream)
    with pytest.raises(vkumd.TimeoutError, match="had not finished"):
        stream.synchronize(timeout=0)
    with pytest.raises(vkumd.VkumdValueError, match="negative"):
        stream.synchronize(timeout=-1)
    stream.synchronize()
    assert big.numpy()[0] == 4096.0
    stream.release()


@pytest.mark.parametrize("where", ["stream", "context", "event"])
def test_a_timeout_that_is_not_seconds_is_a_typed_error(ctx, where) -> None:
    stream = ctx.stream()
    event = stream.record()
    wait = {"stream": stream.synchronize, "context": ctx.synchronize,
            "event": event.synchronize}[where]
    for bad in ("1", [1], True, None.__class__):
        with pytest.raises(vkumd.VkumdTypeError, match="timeout=.*number of seconds"):
            wait(timeout=bad)
    with pytest.raises(vkumd.VkumdValueError, match="negative or NaN"):
        wait(timeout=float("nan"))
    wait(timeout=2.5)
    wait(timeout=np.float32(1))
    stream.release()


def test_context_synchronize_with_a_timeout(ctx) -> None:
    stream = ctx.stream()
    big = _heavy_work(ctx, stream)
    with pytest.raises(vkumd.TimeoutError, match="had not finished"):
        ctx.synchronize(timeout=0)
    ctx.synchronize(timeout=60)
    assert big.numpy()[0] == 4096.0
    stream.release()


class _LosingLib:
    """Forwards to the real binding, except that waits report a lost device."""

    def __init__(self, real) -> None:
        self._real = real

    def __getattr__(self, name):
        return getattr(self._real, name)

    def vkWaitSemaphores(self, *args) -> int:  # noqa: N802 - Vulkan's name
        return vkumd.vk.binding.vk.VK_ERROR_DEVICE_LOST

    def vkGetSemaphoreCounterValue(self, *args) -> int:  # noqa: N802
        return vkumd.vk.binding.vk.VK_ERROR_DEVICE_LOST


def test_device_lost_names_the_last_work_submitted(monkeypatch) -> None:
    with vkumd.Context() as ctx:
        t = ctx.tensor(np.zeros(64, np.float32))
        ops.fill(t, 1.0)
        ctx.default_stream.flush()
        monkeypatch.setattr(timeline_module, "lib", _LosingLib(timeline_module.lib))
        with pytest.raises(vkumd.DeviceLost, match="elementwise_fill"):
            ctx.default_stream.synchronize()
        monkeypatch.undo()


def test_an_interrupted_recording_is_discarded_not_submitted(ctx, monkeypatch) -> None:
    stream = ctx.stream()
    t = ctx.tensor(np.zeros(32, np.float32))
    with stream:
        ops.fill(t, 7.0)
    stream.synchronize()
    binder = stream.submitter.binder
    real_record = binder.record

    def interrupted(*args):
        raise KeyboardInterrupt("simulated ^C between two commands")

    monkeypatch.setattr(binder, "record", interrupted)
    with stream, pytest.raises(KeyboardInterrupt):
        ops.fill(t, 9.0)
    monkeypatch.setattr(binder, "record", real_record)
    with pytest.raises(vkumd.VkumdError, match="discarded, not submitted"):
        stream.flush()
    assert np.all(t.numpy() == 7.0)  # the half-recorded fill never ran
    with stream:
        ops.fill(t, 3.0)
    assert np.all(t.numpy() == 3.0)
    stream.release()


def test_events_fall_back_to_host_time_without_timestamp_queries(ctx, monkeypatch) -> None:
    stream = ctx.stream()
    monkeypatch.setattr(stream, "timestamps", None)
    start = stream.record()
    with stream:
        ops.fill(ctx.empty(1000), 1.0)
    end = stream.record()
    assert end.elapsed_time(start) <= 0.0 <= start.elapsed_time(end)
    assert start.timestamp_ns() == start.host_ns
    stream.release()


def test_streams_captures_and_events_do_not_import_the_context() -> None:
    """The context builds on these modules; an import back up would tie the knot again."""
    import ast
    import pathlib

    import vkumd.runtime

    folder = pathlib.Path(vkumd.runtime.__file__).parent
    for name in ("stream.py", "capture.py", "current.py", "event.py"):
        tree = ast.parse((folder / name).read_text(encoding="utf-8"))
        for node in tree.body:  # module level only; `if TYPE_CHECKING:` blocks are skipped
            if isinstance(node, ast.ImportFrom):
                assert node.module != "vkumd.runtime.context", f"{name} imports the context"
            if isinstance(node, ast.Import):
                assert all(a.name != "vkumd.runtime.context" for a in node.names), name


def test_an_upload_submitted_by_the_byte_budget_keeps_its_staging_until_it_ran() -> None:
    with vkumd.Context(device_only_memory=True) as ctx:
        stream = ctx.stream(max_batch_bytes=1)  # each copy submits its batch at once
        big = _heavy_work(ctx, stream)  # keeps the copies below pending for a while
        first, second = ctx.empty(1024), ctx.empty(1024)
        ones = np.ones(1024, np.float32)
        first.write(ones, stream=stream)
        stream.flush()  # the batch after the copy holds nothing: it is discarded
        second.write(ones * 2, stream=stream)  # staging from the pool again
        assert np.array_equal(first.numpy(), ones)
        assert np.array_equal(second.numpy(), ones * 2)
        assert big.numpy()[0] == 4096.0
        stream.release()
