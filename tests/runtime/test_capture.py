"""Capture and replay: ops recorded once, replayed with new inputs, host work refused."""

from __future__ import annotations

import gc

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.testing.numerics import poisoned, rel_error


def test_replay_reruns_the_captured_ops_on_new_inputs(ctx) -> None:
    rng = np.random.default_rng()
    shape = (29, 31)
    x = ctx.tensor(np.zeros(shape, np.float32))
    w = ctx.tensor(np.zeros(shape[1], np.float32))
    out = poisoned(ctx, shape)
    with ctx.capture() as graph:
        h = ops.add(x, w)            # broadcast add into a tensor made during capture
        h2 = ops.mul(h, h)
        ops.sub(h2, x, out=out)
    assert graph.dispatches == 3 and graph.barriers == 2
    assert np.isnan(out.numpy()).all()  # capture ran nothing
    del h, h2                        # intermediates stay alive inside the graph
    gc.collect()
    for _ in range(3):
        a = rng.standard_normal(shape, dtype=np.float32)
        b = rng.standard_normal(shape[1], dtype=np.float32)
        x.write(a)
        w.write(b)
        graph.replay()
        want = (a.astype(np.float64) + b) ** 2 - a
        assert rel_error(out.numpy(), want) < 1e-5
    assert graph.replays == 3
    graph.release()
    graph.release()  # safe twice
    with pytest.raises(vkumd.VkumdError, match="released"):
        graph.replay()


def test_replay_on_another_stream_and_back_to_back(ctx) -> None:
    acc = ctx.tensor(np.zeros(101, np.float32))
    one = ctx.tensor(np.ones(101, np.float32))
    with ctx.capture() as graph:
        ops.add(acc, one, out=acc)
    stream = ctx.stream()
    for _ in range(5):
        graph.replay(stream)
    graph.replay()
    stream.synchronize()
    ctx.default_stream.synchronize()
    assert np.all(acc.numpy() == 6.0)
    graph.release()
    stream.release()


@pytest.mark.parametrize("what", ["numpy", "write", "tensor", "synchronize", "stream sync",
                                  "event"])
def test_host_work_during_capture_is_refused_by_name(ctx, what) -> None:
    t = ctx.tensor(np.zeros(4, np.float32))
    actions = {
        "numpy": (lambda: t.numpy(), "Tensor.numpy()"),
        "write": (lambda: t.write(np.ones(4, np.float32)), "Tensor.write()"),
        "tensor": (lambda: ctx.tensor(np.ones(4, np.float32)), "Tensor.write()"),
        "synchronize": (lambda: ctx.synchronize(), "ctx.synchronize()"),
        "stream sync": (lambda: ctx.default_stream.synchronize(), "synchronize()"),
        "event": (lambda: ctx.default_stream.record(), "record()"),
    }
    action, name = actions[what]
    with pytest.raises(vkumd.CaptureError, match=name.replace("(", r"\(").replace(")", r"\)")):
        with ctx.capture():
            ops.fill(t, 2.0)
            action()
    # The failed capture left nothing behind, and the context still works.
    ops.fill(t, 3.0)
    assert np.all(t.numpy() == 3.0)


def test_an_empty_graph_cannot_be_replayed(ctx) -> None:
    with ctx.capture() as graph:
        pass
    with pytest.raises(vkumd.VkumdError, match="captured no work"):
        graph.replay()
    with pytest.raises(vkumd.VkumdTypeError, match="Stream"):
        with ctx.capture() as other:
            ops.fill(ctx.empty(2), 1.0)
        other.replay(stream="default")  # type: ignore[arg-type]


def test_graph_memory_returns_to_the_pool_on_release(ctx) -> None:
    ctx.synchronize()
    used = ctx.memory.used_bytes()
    x = ctx.tensor(np.ones(1000, np.float32))
    with ctx.capture() as graph:
        y = ops.scale(x, 2.0)
    del y
    x.release()
    gc.collect()
    assert ctx.memory.used_bytes() == used + 2 * 4000  # pinned by the graph
    graph.replay()
    graph.release()
    ctx.synchronize()
    assert ctx.memory.used_bytes() == used
