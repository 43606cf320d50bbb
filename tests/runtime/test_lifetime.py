"""Objects used after their context closed or after their own release(): a typed vkumd error
(or a documented no-op), never a crash.

Each risky sequence runs in a child interpreter, so a regression that crashes the driver
(SIGSEGV, SIGABRT) fails one test instead of killing pytest. The child inherits the
suite's environment (validation on) and fails on any validation error itself.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import vkumd

_PRELUDE = '''
import gc, threading, time
import numpy as np
import vkumd
from vkumd import ops
from vkumd.vk.instance import add_validation_listener

_errors = []
add_validation_listener(lambda m: _errors.append(m.text) if m.severity == "error" else None)


def expect(kind, call, text):
    """``call()`` must raise ``kind`` whose message holds ``text``."""
    try:
        call()
    except kind as exc:
        assert text in str(exc), f"{kind.__name__} without {text!r}: {exc}"
        print("raised", type(exc).__name__, "-", exc)
    else:
        raise AssertionError(f"{call} raised no {kind.__name__}")

'''
_EPILOGUE = '''
assert not _errors, _errors
print("CHILD DONE")
'''


def run_isolated(body: str, helpers: str = "") -> str:
    """Run ``body`` (after ``helpers``) in a fresh interpreter; assert it exited cleanly and
    return its stdout."""
    code = _PRELUDE + helpers + textwrap.dedent(body) + _EPILOGUE
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, (f"child exited with {result.returncode}\n"
                                    f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}")
    assert "CHILD DONE" in result.stdout
    return result.stdout


# Every public method of a Stream, each as (name, call taking the stream).
_STREAM_CALLS = '''
def stream_calls(s, event, key):
    return [
        ("dispatch", lambda: s.dispatch(None, [], b"", (1, 1, 1))),
        ("copy", lambda: s.copy((None, 0, 4), (None, 0, 4))),
        ("upload", lambda: s.upload(None, memoryview(b"1234"))),
        ("flush", lambda: s.flush()),
        ("flush_to", lambda: s.flush_to(1)),
        ("synchronize", lambda: s.synchronize()),
        ("synchronize timeout", lambda: s.synchronize(timeout=1)),
        ("wait_value", lambda: s.wait_value(1)),
        ("wait_for_memory", lambda: s.wait_for_memory(key, "a read")),
        ("done", lambda: s.done),
        ("completed_value", lambda: s.completed_value()),
        ("defer_until", lambda: s.defer_until(lambda: None, 5)),
        ("record", lambda: s.record()),
        ("record event", lambda: s.record(event)),
        ("wait", lambda: s.wait(event)),
        ("submit_commands", lambda: s.submit_commands([], [], "nothing")),
        ("with", lambda: s.__enter__()),
    ]
'''


def test_stream_after_close_raises_context_closed() -> None:
    out = run_isolated(helpers=_STREAM_CALLS, body='''
    ctx = vkumd.Context()
    s = ctx.stream()
    t = ctx.tensor(np.ones(16, np.float32))
    with s:
        ops.scale(t, 2.0, out=t)           # leave work in flight on s
    event = s.record()
    key = (t.allocation.buffer, t.allocation.offset)
    ctx.close()
    for name, call in stream_calls(s, event, key):
        expect(vkumd.ContextClosed, call, "context was closed")
    s.submit_pending()                     # documented no-ops after close
    s.release()
    s.release()
    ctx.default_stream.release()
    ''')
    assert out.count("raised ContextClosed") == 17


def test_stream_after_release_raises_a_vkumd_error() -> None:
    out = run_isolated(helpers=_STREAM_CALLS, body='''
    ctx = vkumd.Context()
    s = ctx.stream()
    t = ctx.tensor(np.ones(16, np.float32))
    with s:
        ops.scale(t, 2.0, out=t)
    event = ctx.stream().record()
    key = (t.allocation.buffer, t.allocation.offset)
    s.release()
    s.release()                            # safe twice
    for name, call in stream_calls(s, event, key):
        expect(vkumd.VkumdError, call, "was released")
    s.submit_pending()
    # The context is still usable, and so are events recorded on the released stream.
    assert np.all(t.numpy() == 2.0)
    ctx.close()
    ''')
    assert out.count("raised VkumdError") == 17


def test_event_after_close_and_after_release() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    s = ctx.stream()
    start, end = s.record(), s.record()
    spare = vkumd.Event(ctx)
    mine = s.record()
    mine.release()
    mine.release()                         # safe twice
    for call in (lambda: mine.done, lambda: mine.query(), lambda: mine.synchronize(),
                 lambda: mine.timestamp_ns(), lambda: mine.elapsed_time(end),
                 lambda: start.elapsed_time(mine), lambda: s.record(mine),
                 lambda: s.wait(mine), lambda: mine.set_point(s, 1)):
        expect(vkumd.VkumdError, call, "event was released")
    ctx.close()
    expect(vkumd.ContextClosed, lambda: vkumd.Event(ctx), "context was closed")
    for event in (start, spare):
        for call in (lambda: event.done, lambda: event.query(), lambda: event.synchronize(),
                     lambda: event.synchronize(timeout=0), lambda: event.timestamp_ns(),
                     lambda: event.elapsed_time(end), lambda: event.set_point(s, 1),
                     lambda: event.check_usable("x")):
            expect(vkumd.ContextClosed, call, "context was closed")
        event.release()                    # a no-op after close
    ''')
    assert out.count("raised VkumdError") == 9
    assert out.count("raised ContextClosed") == 17


def test_an_event_of_a_released_stream_has_passed() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    s = ctx.stream()
    t = ctx.tensor(np.ones(8, np.float32))
    with s:
        ops.scale(t, 3.0, out=t)
    event = s.record()
    s.release()                            # waits for its work first
    assert event.done and event.query()
    event.synchronize()
    other = ctx.stream()
    other.wait(event)
    with other:
        ops.scale(t, 2.0, out=t)
    other.synchronize()
    assert np.all(t.numpy() == 6.0)
    print("passed", event.timestamp_ns() >= 0)
    ctx.close()
    ''')
    assert "passed True" in out


def test_waiting_for_another_contexts_event_is_refused() -> None:
    out = run_isolated('''
    ctx, other = vkumd.Context(), vkumd.Context()
    foreign = other.default_stream.record()
    s = ctx.stream()
    expect(vkumd.VkumdValueError, lambda: s.wait(foreign), "another context")
    expect(vkumd.VkumdValueError, lambda: s.record(foreign), "another context")
    t = ctx.tensor(np.ones(8, np.float32))
    with s:                                # the next submission must not carry that wait
        ops.scale(t, 2.0, out=t)
    s.synchronize()
    assert np.all(t.numpy() == 2.0)
    other.close()
    ctx.close()
    ''')
    assert out.count("raised VkumdValueError") == 2


def test_graph_after_close_and_after_release() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    t = ctx.zeros(8)
    with ctx.capture() as graph:
        ops.scale(t, 2.0, out=t)
    with ctx.capture() as kept:
        ops.scale(t, 2.0, out=t)
    s = ctx.stream()
    graph.release()
    graph.release()                        # safe twice
    buffer = (t.allocation.buffer, t.allocation.offset, t.nbytes)
    for call in (lambda: graph.replay(), lambda: graph.replay(stream=s),
                 lambda: graph.record_copy(buffer, buffer),
                 lambda: graph.record_dispatch(None, [buffer], b"", (1, 1, 1), ())):
        expect(vkumd.VkumdError, call, "graph was released")
    s.release()
    expect(vkumd.VkumdError, lambda: kept.replay(stream=s), "was released")
    kept.replay()
    ctx.close()
    for call in (lambda: kept.replay(), lambda: kept.replay(stream=s),
                 lambda: kept.record_copy(buffer, buffer),
                 lambda: kept.record_dispatch(None, [buffer], b"", (1, 1, 1), ())):
        expect(vkumd.ContextClosed, call, "context was closed")
    kept.end_capture(None)                 # no-ops after close
    kept.release()
    ''')
    assert out.count("raised VkumdError") == 5
    assert out.count("raised ContextClosed") == 4


def test_closing_the_context_inside_a_capture_block() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    t = ctx.zeros(8)
    with ctx.capture() as graph:
        ops.scale(t, 2.0, out=t)
        ctx.close()
    expect(vkumd.ContextClosed, lambda: graph.replay(), "context was closed")
    ''')
    assert "raised ContextClosed" in out


def test_replay_on_a_released_stream_is_refused() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    t = ctx.zeros(8)
    with ctx.capture() as graph:
        ops.scale(t, 2.0, out=t)
    s = ctx.stream()
    s.release()
    expect(vkumd.VkumdError, lambda: graph.replay(stream=s), "was released")
    ctx.synchronize()
    graph.replay()
    ctx.close()
    ''')
    assert "raised VkumdError" in out


def test_releasing_a_stream_while_another_thread_records_on_it() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    t = ctx.tensor(np.ones(1 << 12, np.float32))
    for attempt in range(5):
        s = ctx.stream(max_batch_dispatches=4)
        outcome = []
        started = threading.Event()

        def record():
            try:
                with s:
                    for i in range(5000):
                        ops.scale(t, 1.0, out=t)
                        if i == 8:
                            started.set()
            except vkumd.VkumdError as exc:
                outcome.append(str(exc))
            finally:
                started.set()

        worker = threading.Thread(target=record)
        worker.start()
        started.wait()
        s.release()
        worker.join()
        assert outcome and "was released" in outcome[0], outcome
    print("refused", len(outcome))
    ctx.synchronize()
    assert np.all(t.numpy() == 1.0)
    ctx.close()
    ''')
    assert "refused 1" in out


def test_dlpack_view_outlives_its_context(ctx) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are not host-visible here; DLPack export is refused instead")
    out = run_isolated('''
    ctx = vkumd.Context()
    t = ctx.tensor(np.arange(64, dtype=np.float32))
    view = np.from_dlpack(t)
    other = np.from_dlpack(ctx.tensor(np.ones(4, np.int32)))
    ctx.close()
    # close keeps the exported memory mapped until the last view dies
    print("sum", float(view.sum()), int(other.sum()))
    view[:] = 7.0
    assert float(view[3]) == 7.0
    for call in (lambda: np.from_dlpack(t), lambda: t.__dlpack__(),
                 lambda: t.__dlpack_device__()):
        expect(vkumd.ContextClosed, call, "context was closed")
    live = vkumd.live_objects()
    assert live.get("Block", 0) >= 1 and live.get("Device", 0) == 1, live
    del view
    gc.collect()
    assert vkumd.live_objects().get("Device", 0) == 1  # one view is left
    del other
    gc.collect()
    live = vkumd.live_objects()
    assert not live.get("Block") and not live.get("Device"), live   # the last view let go
    ''')
    assert "sum 2016.0 4" in out and out.count("ContextClosed") == 3


def test_a_view_keeps_released_tensor_memory_from_the_pool(ctx) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are not host-visible here; DLPack export is refused instead")
    t = ctx.tensor(np.arange(256, dtype=np.float32))
    view = np.from_dlpack(t)
    t.release()
    gc.collect()
    fresh = ctx.tensor(np.zeros(256, np.float32))
    view[:] = -1.0                           # the view still owns the old bytes
    np.testing.assert_array_equal(fresh.numpy(), np.zeros(256, np.float32))
    used = ctx.memory.used_bytes()
    del view
    gc.collect()
    assert ctx.memory.used_bytes() == used - 1024  # back to the pool once the view died
    fresh.release()


def test_views_of_a_live_tensor_pin_its_memory_only_while_they_live(ctx) -> None:
    if not ctx.memory.tensors_mapped:
        pytest.skip("tensors are not host-visible here; DLPack export is refused instead")
    used = ctx.memory.used_bytes()
    t = ctx.tensor(np.arange(16, dtype=np.int32))
    first, second = np.from_dlpack(t), np.from_dlpack(t)
    t.release()
    del first
    gc.collect()
    assert ctx.memory.used_bytes() == used + 64      # the second view still holds it
    np.testing.assert_array_equal(second, np.arange(16))
    del second
    gc.collect()
    assert ctx.memory.used_bytes() == used
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        np.from_dlpack(t)


def test_releasing_a_stream_while_another_thread_waits_on_it() -> None:
    out = run_isolated('''
    ctx = vkumd.Context()
    big = ctx.tensor(np.ones(1 << 21, np.float32))
    for attempt in range(3):
        s = ctx.stream()
        with s:
            for _ in range(8):
                ops.add(big, big, out=big)
        s.flush()
        outcome = []

        def wait():
            try:
                s.synchronize()
                outcome.append("waited")
            except vkumd.VkumdError as exc:   # released before this thread got to wait
                outcome.append(str(exc))

        worker = threading.Thread(target=wait)
        worker.start()
        s.release()
        worker.join()
        assert outcome == ["waited"] or "was released" in outcome[0], outcome
    print("value", float(big.numpy()[0]))
    ctx.close()
    ''')
    assert f"value {float(2 ** 24)}" in out
