"""The arena: intermediates share memory, views free nothing, overlapping sub-ranges get
barriers, and a released CompiledGraph gives back every byte.

``test_overlapping_values_without_tracking_are_reported`` removes the overlap tracking on
purpose: values at different offsets that share bytes are then unordered, which the
synchronization validation reports (see tests/runtime/test_sync_validation.py).
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from execute_checks import TOL, check_against_reference, random, rel

import vkumd
from vkumd.framework.execute import CompiledGraph, view
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.submission import hazards

M = 64  # floats per row: 256 bytes, the planner's alignment


def overlapping_graph():
    """P (4 rows) dies at step 1; R (3 rows) reuses its start, Q (1 row) its tail: Q is
    written at step 2 right after step 1 reads P, at another offset than P's."""
    b = GraphBuilder("overlap")
    x = b.input("x", (4, M))
    z = b.input("z", (1, M))
    y = b.input("y", (3, M))
    p = b.relu(x)                 # step 0: P
    total = b.sum(p)              # step 1: reads P, its last use
    q = b.silu(z)                 # step 2: Q, independent of step 1
    r = b.gelu(y)                 # step 3: R
    b.output(total, b.add(r, q))  # step 4
    return b.build()


def feeds(rng):
    return {"x": random(rng, 4, M), "z": random(rng, 1, M), "y": random(rng, 3, M)}


def check_the_overlap(compiled) -> None:
    (rec,) = compiled.bucket_memory()
    graph = compiled.graph
    alloc = rec.plan.allocations
    p, q = graph.nodes[0].outputs[0].id, graph.nodes[2].outputs[0].id
    # The situation the test is about: different starts, shared bytes.
    assert alloc[p].offset != alloc[q].offset
    assert alloc[q].offset < alloc[p].offset + alloc[p].nbytes
    assert alloc[p].offset < alloc[q].offset + alloc[q].nbytes


def test_overlapping_values_are_ordered(ctx) -> None:
    graph = overlapping_graph()
    compiled = CompiledGraph(graph, ctx)
    rng = np.random.default_rng()
    check_against_reference(graph, compiled, feeds(rng))
    check_the_overlap(compiled)
    check_against_reference(graph, compiled, feeds(rng))
    compiled.release()


@pytest.mark.expect_validation_error
def test_overlapping_values_without_tracking_are_reported(monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_SYNC_VALIDATION", "1")
    monkeypatch.setattr(hazards.HazardTracker, "track_overlaps", lambda self, ranges: None)
    with vkumd.Context(validation=True) as ctx:
        compiled = CompiledGraph(overlapping_graph(), ctx)
        compiled(**feeds(np.random.default_rng()))
        check_the_overlap(compiled)
        ctx.synchronize()
        compiled.release()


def test_a_chain_reuses_memory_and_stays_correct(ctx) -> None:
    b = GraphBuilder("long")
    x = b.input("x", (9, 31))
    t = x
    for i in range(8):
        t = b.layer_norm(b.add(b.relu(t), x), eps=1e-5) if i % 2 else b.scale(b.silu(t), 1.5)
    b.output(t)
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    rng = np.random.default_rng()
    check_against_reference(graph, compiled, {"x": random(rng, 9, 31)})
    check_against_reference(graph, compiled, {"x": random(rng, 9, 31)})
    (stats,) = compiled.buckets()
    (rec,) = compiled.bucket_memory()
    assert stats.arena_bytes < stats.intermediate_bytes
    assert any(a.reuses is not None for a in rec.plan.allocations.values())  # in place
    compiled.release()


def test_an_arena_past_the_binding_limit_splits(ctx, monkeypatch) -> None:
    """The device binds at most ``maxStorageBufferRange`` bytes of a buffer; a plan past it
    is split into arenas (a limit of 3 KiB forced here, in place of gigabytes): each value
    lies whole in one, the results match the reference with the arenas poisoned, and work
    reading two arenas is ordered as within one."""
    import vkumd.framework.execute.bucket as bucket_module

    limit = 3 * 1024
    monkeypatch.setattr(bucket_module, "binding_limit", lambda context: limit)
    b = GraphBuilder("wide")
    x = b.input("x", (7, 37))  # 1036 bytes: two 1280-byte slots fit in one arena
    parts = [b.silu(b.scale(x, 0.5 * (i + 1))) for i in range(6)]
    total = parts[0]
    for p in parts[1:]:
        total = b.add(total, b.relu(p))
    b.output(b.layer_norm(total, eps=1e-5))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    rng = np.random.default_rng()
    for _ in range(2):
        check_against_reference(graph, compiled, {"x": random(rng, 7, 37)})
    (bucket,) = compiled.bucket_memory()
    assert len(bucket.arenas) >= 2
    assert all(a.base.nbytes <= limit for a in bucket.arenas)
    (rec,) = bucket.recordings()
    bases = {id(v.base) for v in rec.arena_views}
    assert bases == {id(a.base) for a in bucket.arenas}
    compiled.release()


def test_views_share_bytes_and_free_nothing(ctx) -> None:
    base = ctx.tensor(np.arange(64, dtype=np.float32))
    part = view(base, (4, 4), offset=64 * 4 // 2)
    assert part.binding[1] == base.binding[1] + 128 and part.binding[2] == 64
    assert part.address in (0, base.address + 128)
    assert np.array_equal(part.numpy(), np.arange(32, 48, dtype=np.float32).reshape(4, 4))
    vkumd.ops.scale(part, 2.0, out=part)
    # Host access to a view waits for the work on its range (and on its base's key).
    assert np.array_equal(part.numpy().ravel(), 2 * np.arange(32, 48, dtype=np.float32))
    vkumd.ops.scale(part, 0.5, out=part)
    part.release()
    assert not base.released
    # The base's own key never saw the work through the view: wait for the device first.
    ctx.synchronize()
    assert np.array_equal(base.numpy(), np.arange(64, dtype=np.float32))
    with pytest.raises(vkumd.VkumdValueError, match="do not fit"):
        view(base, (65,))
    base.release()


def test_a_released_compiled_graph_gives_its_memory_back() -> None:
    with vkumd.Context() as ctx:
        rng = np.random.default_rng()
        b = GraphBuilder("mem")
        x = b.input("x", ("seq", 40))
        w = b.weight("w", random(rng, 40, 40))
        b.output(b.layer_norm(b.matmul(b.relu(x), w), eps=1e-5))
        graph = b.build()
        # Device-only memory reads back through a staging buffer the context keeps: make it
        # before the baseline, so only the compiled graph's own memory is counted.
        ctx.tensor(random(rng, 20, 40)).numpy()
        ctx.synchronize()
        baseline = ctx.memory.used_bytes()
        compiled = CompiledGraph(graph, ctx, max_recordings=2)
        for n in (5, 9, 20, 9):  # three buckets, one evicted
            data = random(rng, n, 40)
            (out,) = compiled(x=data)
            assert rel(out.numpy(), evaluate(graph, {"x": data})[0]) < TOL
        assert ctx.memory.used_bytes() > baseline
        compiled.release()
        compiled.release()  # safe twice
        del out
        gc.collect()
        ctx.synchronize()
        assert ctx.memory.used_bytes() == baseline
        with pytest.raises(vkumd.VkumdValueError, match="released"):
            compiled(x=random(rng, 5, 40))
