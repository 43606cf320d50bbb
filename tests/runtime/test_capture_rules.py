"""What a capture records, and what it refuses instead of getting silently wrong."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd import ops


def test_zeros_inside_a_capture_are_zeroed_on_every_replay(ctx) -> None:
    one = ctx.tensor(np.ones(37, np.float32))
    with ctx.capture() as graph:
        acc = ctx.zeros(37)
        ops.add(acc, one, out=acc)
    assert graph.dispatches == 2          # the zero fill is part of the graph
    for _ in range(3):
        graph.replay()
        np.testing.assert_array_equal(acc.numpy(), np.ones(37, np.float32))
    graph.release()


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_zeros_of_other_dtypes_inside_a_capture(ctx, dtype) -> None:
    if dtype == "float16" and not ctx.caps.storage_16bit:
        pytest.skip(f"{ctx.caps.name} has no 16-bit storage")
    with ctx.capture() as graph:
        t = ctx.zeros((3, 5), dtype)
        ops.scale(t, 2, out=t)
    t.write(np.full((3, 5), 9, dtype))
    graph.replay()
    np.testing.assert_array_equal(t.numpy(), np.zeros((3, 5)))
    graph.release()


def test_zeros_the_fill_cannot_record_are_refused_inside_a_capture(ctx) -> None:
    used = ctx.memory.used_bytes()
    with pytest.raises(vkumd.CaptureError, match=r"ctx.zeros\(dtype=int8\).*before the capture"):
        with ctx.capture():
            ctx.zeros(16, "int8")
    assert ctx.memory.used_bytes() == used  # the refused tensor went back
    assert np.all(ctx.zeros(16, "int8").numpy() == 0)  # outside a capture it works


def test_with_stream_inside_a_capture_is_refused(ctx) -> None:
    s = ctx.stream()
    t = ctx.tensor(np.zeros(8, np.float32))
    with pytest.raises(vkumd.CaptureError, match=r"'with .*:' inside ctx.capture\(\).*"
                                                 r"graph.replay\(stream=\.\.\.\)"):
        with ctx.capture():
            with s:
                ops.fill(t, 5.0)
    assert ctx.current_stream() is ctx.default_stream
    with s:                               # the stream still works after the capture
        ops.fill(t, 4.0)
    assert np.all(t.numpy() == 4.0)
    s.release()


def test_nested_captures_are_refused(ctx) -> None:
    t = ctx.tensor(np.zeros(8, np.float32))
    with ctx.capture() as outer:
        ops.fill(t, 1.0)
        with pytest.raises(vkumd.CaptureError, match="captures do not nest"):
            with ctx.capture():
                pass
        ops.scale(t, 3.0, out=t)          # the outer capture goes on
    assert outer.dispatches == 2
    outer.replay()
    assert np.all(t.numpy() == 3.0)
    outer.release()


def test_replay_inside_a_capture_is_refused(ctx) -> None:
    t = ctx.tensor(np.zeros(8, np.float32))
    with ctx.capture() as graph:
        ops.fill(t, 1.0)
    with pytest.raises(vkumd.CaptureError, match="graphs do not nest"):
        with ctx.capture():
            graph.replay()
    graph.replay()
    assert np.all(t.numpy() == 1.0)
    graph.release()


def test_recording_after_the_capture_ended_is_refused(ctx) -> None:
    t = ctx.tensor(np.zeros(8, np.float32))
    with ctx.capture() as graph:
        capture_stream = ctx.current_stream()
    assert not graph.capturing
    buffer = (t.allocation.buffer, t.allocation.offset, t.nbytes)
    with pytest.raises(vkumd.CaptureError, match="capture has ended"):
        capture_stream.copy(buffer, buffer)
    with pytest.raises(vkumd.VkumdError, match="captured no work"):
        graph.replay()
    graph.release()


def test_captures_on_two_threads_are_independent(ctx) -> None:
    import threading

    a = ctx.tensor(np.zeros(8, np.float32))
    b = ctx.tensor(np.zeros(8, np.float32))
    graphs: list[vkumd.Graph] = []
    errors: list[BaseException] = []

    def capture_b() -> None:
        try:
            with ctx.capture() as graph:
                ops.fill(b, 2.0)
            graphs.append(graph)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with ctx.capture() as graph_a:
        ops.fill(a, 1.0)
        worker = threading.Thread(target=capture_b)
        worker.start()
        worker.join()
    assert not errors, errors
    graph_a.replay()
    graphs[0].replay()
    assert np.all(a.numpy() == 1.0) and np.all(b.numpy() == 2.0)
    graph_a.release()
    graphs[0].release()
