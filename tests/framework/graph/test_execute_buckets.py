"""Shape buckets: a bucket owns the memory, the launches run at the true sizes.

Every size of a bucket computes exactly what an exact-shape run (``buckets={...: None}``)
computes, bit for bit, including reductions over the bucketed axis (softmax, layer_norm,
sum, a matmul's inner dimension) and attention; each size is recorded once and replayed,
over the one bucket's memory; both caches are bounded and release what they evict.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from execute_checks import TOL, poison, random, rel
from test_execute import transformer_block

import vkumd
from vkumd.errors import VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, GraphError, evaluate
from vkumd.framework.graph.dims import sym


def reduce_graph(rng):
    """Ops that reduce over ``seq``: softmax, layer_norm and sum over the last axis, and a
    matmul whose inner dimension is ``seq``; a matmul over rows of ``seq`` besides."""
    b = GraphBuilder("reduce")
    x = b.input("x", (6, "seq"))
    y = b.input("y", ("seq", 20))
    probs = b.softmax(x)
    w = b.weight("w", random(rng, 20, 12))
    b.output(probs, b.layer_norm(x, eps=1e-5), b.sum(x), b.matmul(probs, y),
             b.matmul(y, w, activation="gelu"))
    return b.build()


def reduce_feeds(rng, n: int) -> dict:
    return {"x": random(rng, 6, n), "y": random(rng, n, 20)}


def attention_graph():
    b = GraphBuilder("attn")
    q = b.input("q", ("batch", 2, "seq", 16))
    k = b.input("k", ("batch", 2, "seq", 16))
    v = b.input("v", ("batch", 2, "seq", 16))
    b.output(b.attention(q, k, v), b.attention(q, k, v, causal=True))
    return b.build()


def run(compiled: CompiledGraph, feeds: dict) -> list[np.ndarray]:
    """The outputs of a call whose memory was poisoned first (when a bucket exists)."""
    poison(compiled)
    return [o.numpy() for o in compiled(**feeds)]


def check_sizes(graph, ctx, sizes_feeds, symbols=("seq",), **kwargs) -> CompiledGraph:
    """Each call of the bucketed graph equals the float64 reference and, bit for bit, the
    exact-shape compiled run; returns the bucketed graph (still open)."""
    bucketed = CompiledGraph(graph, ctx, **kwargs)
    exact = CompiledGraph(graph, ctx, buckets={s: None for s in symbols})
    try:
        for feeds in sizes_feeds:
            got = run(bucketed, feeds)
            same = run(exact, feeds)
            for i, (g, s, w) in enumerate(zip(got, same, evaluate(graph, feeds), strict=True)):
                assert g.shape == w.shape, (i, g.shape, w.shape)
                assert rel(g, w) < TOL, f"output {i}: {rel(g, w):.3g}"
                assert np.array_equal(g, s), f"output {i} differs from the exact-shape run"
    except BaseException:
        bucketed.release()
        raise
    finally:
        exact.release()
    return bucketed


def test_reductions_over_a_bucketed_axis_equal_the_exact_run(ctx) -> None:
    rng = np.random.default_rng()
    sizes = (37, 33, 63, 37, 45)
    compiled = check_sizes(reduce_graph(rng), ctx, [reduce_feeds(rng, n) for n in sizes])
    (stats,) = compiled.buckets()
    assert stats.bindings == {"seq": 64}
    assert [e["seq"] for e in stats.sizes] == [33, 63, 37, 45]  # 37 replayed, not recorded
    assert stats.recorded == 4 and stats.replays == 5 and compiled.allocated == 1
    compiled.release()


def test_attention_at_batch_3_and_seq_37_equals_the_exact_run(ctx) -> None:
    rng = np.random.default_rng()
    feeds = [{n: random(rng, 3, 2, s, 16) for n in "qkv"} for s in (37, 51)]
    compiled = check_sizes(attention_graph(), ctx, feeds, symbols=("batch", "seq"))
    assert compiled.buckets()[0].bindings == {"batch": 4, "seq": 64}
    compiled.release()


def test_a_transformer_block_at_seq_37(ctx) -> None:
    rng = np.random.default_rng()
    graph = transformer_block(rng)
    feeds = [{"x": random(rng, 2, s, 32)} for s in (37, 41)]
    check_sizes(graph, ctx, feeds, buckets={"seq": [48, 96]}).release()


def test_alternating_sizes_share_the_buckets_memory_and_record_once_each(ctx) -> None:
    rng = np.random.default_rng()
    graph = reduce_graph(rng)
    compiled = CompiledGraph(graph, ctx)
    bucket = None
    for n in (37, 50, 37, 50, 33, 37):
        feeds = reduce_feeds(rng, n)
        outs = compiled(x=ctx.tensor(feeds["x"]), y=feeds["y"])  # a device tensor input too
        (held,) = compiled.bucket_memory()
        bucket = bucket or held
        (arena,) = bucket.arenas
        assert held is bucket and held.arenas[0].base.binding == arena.base.binding
        for recording in held.recordings():  # every view points into the bucket's memory
            assert recording.inputs["x"].base is bucket.inputs["x"]
            assert all(v.base is arena.base for v in recording.arena_views)
        for o, w in zip(outs, evaluate(graph, feeds), strict=True):
            assert o.shape == w.shape and rel(o.numpy(), w) < TOL
    assert compiled.recorded == 3 and compiled.allocated == 1
    assert compiled.buckets()[0].replays == 6
    text = compiled.summary()
    assert "seq=64" in text and "recorded at seq=50; seq=33; seq=37" in text
    compiled.release()


def _live() -> dict[str, int]:
    gc.collect()
    return vkumd.live_objects()


def test_size_recordings_are_bounded_and_released(ctx) -> None:
    rng = np.random.default_rng()
    graph = reduce_graph(rng)
    compiled = CompiledGraph(graph, ctx, sizes_per_bucket=2)
    for n in (40, 41, 42):
        compiled(**reduce_feeds(rng, n))
    before = _live()
    for n in (43, 44, 45, 46, 47, 48):  # each evicts the oldest size
        outs = compiled(**reduce_feeds(rng, n))
        del outs
    (stats,) = compiled.buckets()
    assert [e["seq"] for e in stats.sizes] == [47, 48]
    assert stats.recorded == 9 and stats.evicted == 7
    assert _live() == before  # evicted recordings left nothing behind
    feeds = reduce_feeds(rng, 40)  # evicted: recorded again, and right
    got = run(compiled, feeds)
    assert all(rel(g, w) < TOL for g, w in zip(got, evaluate(graph, feeds), strict=True))
    assert compiled.recorded == 10
    compiled.release()


def test_the_least_recently_used_bucket_is_evicted(ctx) -> None:
    rng = np.random.default_rng()
    graph = reduce_graph(rng)
    compiled = CompiledGraph(graph, ctx, max_recordings=2)
    for n in (3, 7, 3, 13):  # buckets 4, 8, 4, 16: the 8 goes when 16 comes
        compiled(**reduce_feeds(rng, n))
    assert [s.bindings["seq"] for s in compiled.buckets()] == [4, 16]
    assert compiled.allocated == 3 and compiled.evicted == 1 and compiled.recorded == 3
    compiled(**reduce_feeds(rng, 6))
    assert compiled.allocated == 4
    assert [s.bindings["seq"] for s in compiled.buckets()] == [16, 8]
    before, used = _live(), ctx.memory.used_bytes()
    for n in (30, 60, 13, 6):  # buckets 32 and 64 come and go; 16 and 8 come back
        compiled(**reduce_feeds(rng, n))
    assert compiled.evicted == 6 and [s.bindings["seq"] for s in compiled.buckets()] == [16, 8]
    ctx.synchronize()
    assert _live() == before and ctx.memory.used_bytes() == used  # evicted memory went back
    compiled.release()


def test_bucket_lists_and_their_limit(ctx) -> None:
    rng = np.random.default_rng()
    graph = reduce_graph(rng)
    compiled = CompiledGraph(graph, ctx, buckets={"seq": [40, 80]})
    feeds = reduce_feeds(rng, 37)
    outs = compiled(**feeds)
    assert compiled.buckets()[0].bindings == {"seq": 40}
    assert rel(outs[3].numpy(), evaluate(graph, feeds)[3]) < TOL
    with pytest.raises(VkumdValueError, match="seq is 81, past its largest bucket 80"):
        compiled(**reduce_feeds(rng, 81))
    feeds = reduce_feeds(rng, 80)  # the graph is still usable
    got = run(compiled, feeds)
    assert all(rel(g, w) < TOL for g, w in zip(got, evaluate(graph, feeds), strict=True))
    assert compiled.allocated == 2
    compiled.release()


def test_bad_shapes_and_bounds_are_refused_and_leave_the_graph_usable(ctx) -> None:
    rng = np.random.default_rng()
    graph = reduce_graph(rng)
    compiled = CompiledGraph(graph, ctx)
    with pytest.raises(VkumdValueError, match=r"inputs 'x' and 'y' must agree on seq: 'x' "
                                              r"gives 37, 'y' gives 40"):
        compiled(x=random(rng, 6, 37), y=random(rng, 40, 20))
    with pytest.raises(VkumdValueError, match=r"missing 'y'"):
        compiled(x=random(rng, 6, 37))
    with pytest.raises(VkumdValueError, match=r"input 'x' has shape \(6, 37, 1\) of rank 3; "
                                              r"the graph declares \[6, seq\], of rank 2"):
        compiled(x=random(rng, 6, 37, 1), y=random(rng, 37, 20))
    with pytest.raises(VkumdValueError, match=r"input 'y' has shape \(37, 21\)"):
        compiled(x=random(rng, 6, 37), y=random(rng, 37, 21))
    assert compiled.recorded == 0 and compiled.allocated == 0
    feeds = reduce_feeds(rng, 37)
    got = run(compiled, feeds)
    assert all(rel(g, w) < TOL for g, w in zip(got, evaluate(graph, feeds), strict=True))
    compiled.release()
    for bad in ({"max_recordings": 0}, {"sizes_per_bucket": 0}, {"sizes_per_bucket": True}):
        with pytest.raises(VkumdValueError, match="keep at least 1"):
            CompiledGraph(graph, ctx, **bad)


def test_a_dimension_that_shrinks_as_its_symbol_grows_is_refused_naming_the_fix(ctx) -> None:
    b = GraphBuilder("shrinks")
    x = b.input("x", ("n",))
    y = b.input("y", (20 - sym("n"),))  # at n=5 (bucket 8): 15 elements in a slot of 12
    b.output(b.relu(x), b.relu(y))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    with pytest.raises(GraphError, match=r"does not fit in its slot for the bucket \{'n': 8\}"
                                         r".*buckets=\{'n': None\}"):
        compiled(x=random(np.random.default_rng(), 5), y=random(np.random.default_rng(), 15))
    feeds = {"x": random(np.random.default_rng(), 8), "y": random(np.random.default_rng(), 12)}
    got = run(compiled, feeds)  # a size that fits still runs
    assert all(rel(g, w) < TOL for g, w in zip(got, evaluate(graph, feeds), strict=True))
    compiled.release()
    exact = CompiledGraph(graph, ctx, buckets={"n": None})
    feeds = {"x": random(np.random.default_rng(), 5), "y": random(np.random.default_rng(), 15)}
    got = run(exact, feeds)
    assert all(rel(g, w) < TOL for g, w in zip(got, evaluate(graph, feeds), strict=True))
    exact.release()
