"""The validation layer's synchronization checks watch the barriers the recorder inserts.

With ``VKUMD_SYNC_VALIDATION=1`` a missing barrier between dependent commands, or between a
submission and the next, is an error-severity message, which fails the test that caused it
(see ``tests/conftest.py``). The last test removes the hazard tracker's barriers on purpose
to show that the checks do catch a missing one.
"""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.submission import hazards
from vkumd.testing.numerics import rel_error


@pytest.fixture
def sync_ctx(monkeypatch):
    monkeypatch.setenv("VKUMD_SYNC_VALIDATION", "1")
    context = vkumd.Context(validation=True)
    assert context.instance.sync_validation
    yield context
    context.close()


def test_dependent_and_independent_work_passes_the_sync_checks(sync_ctx) -> None:
    ctx = sync_ctx
    rng = np.random.default_rng()
    a = rng.standard_normal((33, 17), dtype=np.float32)
    ta = ctx.tensor(a)
    x = ops.scale(ta, 2.0)
    y = ops.add(x, ta)             # read after write
    ops.mul(y, y, out=x)           # write after read of x
    ops.fill(y, 0.5)               # write after write of y
    outs = [ops.add(ta, ta) for _ in range(8)]  # independent: no barrier needed or recorded
    ctx.default_stream.flush()
    ops.add(x, y, out=x)           # the next submission reads what the previous wrote
    want = (3 * a.astype(np.float64)) ** 2 + 0.5
    assert rel_error(x.numpy(), want) < 1e-5
    assert all(np.allclose(o.numpy(), 2 * a) for o in outs)


def test_streams_events_and_replays_pass_the_sync_checks(sync_ctx) -> None:
    ctx = sync_ctx
    data = np.arange(1000, dtype=np.float32)
    other = ctx.stream()
    t = ctx.tensor(data)
    with other:
        ops.scale(t, 2.0, out=t)
        done = other.record()
    ctx.default_stream.wait(done)
    out = ops.add(t, t)
    with ctx.capture() as graph:
        ops.add(out, t, out=out)
    graph.replay()
    graph.replay()
    assert np.array_equal(out.numpy(), data * 8)
    graph.release()
    other.release()


@pytest.mark.expect_validation_error
def test_a_missing_barrier_is_reported(sync_ctx, monkeypatch) -> None:
    monkeypatch.setattr(hazards.HazardTracker, "access", lambda self, keys, writes: False)
    ctx = sync_ctx
    t = ctx.tensor(np.ones(4096, np.float32))
    u = ops.scale(t, 3.0)
    ops.add(u, t, out=t)  # reads u right after it was written, with no barrier between
    ctx.synchronize()
