"""Shape buckets: one recording per bucket, inputs padded, outputs cut, a bounded LRU cache.

A padded run must equal an exact-shape run (``buckets={"seq": None}``) and the float64
reference, for ops where padding cannot leak: elementwise, matmul over rows, layer_norm over
the unpadded last axis, attention over padded keys (masked by the true length).
"""

from __future__ import annotations

import numpy as np
import pytest
from execute_checks import TOL, poison, random, rel
from test_execute import transformer_block

from vkumd.errors import VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate


def rows_graph(rng):
    """Elementwise, matmul over rows and layer_norm over the last axis, along ``seq``."""
    b = GraphBuilder("rows")
    x = b.input("x", ("seq", 24))
    y = b.input("y", ("seq", 24))
    w = b.weight("w", random(rng, 24, 40))
    h = b.matmul(b.add(x, y), w, bias=b.weight("bias", random(rng, 40)), activation="gelu")
    b.output(b.layer_norm(h, eps=1e-5), b.relu(b.sub(x, y)))
    return b.build()


def attention_graph():
    b = GraphBuilder("attn")
    q = b.input("q", ("batch", 2, "seq", 16))
    k = b.input("k", ("batch", 2, "seq", 16))
    v = b.input("v", ("batch", 2, "seq", 16))
    b.output(b.attention(q, k, v), b.attention(q, k, v, causal=True))
    return b.build()


def compare(graph, ctx, feeds) -> None:
    """Bucketed, exact and reference results agree; the bucketed one is recorded twice."""
    padded = CompiledGraph(graph, ctx)
    exact = CompiledGraph(graph, ctx, buckets={s: None for s in ("seq", "batch")})
    want = evaluate(graph, feeds)
    padded(**feeds)
    poison(padded)
    got = [o.numpy() for o in padded(**feeds)]
    same = [o.numpy() for o in exact(**feeds)]
    for g, s, w in zip(got, same, want, strict=True):
        assert g.shape == w.shape
        assert rel(g, w) < TOL and rel(s, w) < TOL
        assert rel(g, s) < TOL
    padded.release()
    exact.release()


def test_seq_37_runs_in_the_64_bucket(ctx) -> None:
    rng = np.random.default_rng()
    graph = rows_graph(rng)
    compiled = CompiledGraph(graph, ctx)
    assert compiled.leaky == {}
    compiled(x=random(rng, 37, 24), y=random(rng, 37, 24))
    (stats,) = compiled.buckets()
    assert stats.bindings == {"seq": 64}
    compiled.release()
    compare(graph, ctx, {"x": random(rng, 37, 24), "y": random(rng, 37, 24)})


def test_attention_pads_keys_and_masks_them(ctx) -> None:
    rng = np.random.default_rng()
    shape = (3, 2, 37, 16)  # batch 3 -> 4 and seq 37 -> 64: the cut is a gather, not a prefix
    feeds = {n: random(rng, *shape) for n in "qkv"}
    compare(attention_graph(), ctx, feeds)


def test_a_transformer_block_at_seq_37(ctx) -> None:
    rng = np.random.default_rng()
    graph = transformer_block(rng)
    compiled = CompiledGraph(graph, ctx)
    assert compiled.leaky == {}
    compiled.release()
    compare(graph, ctx, {"x": random(rng, 2, 37, 32)})


def test_a_recording_serves_every_size_of_its_bucket(ctx) -> None:
    rng = np.random.default_rng()
    graph = rows_graph(rng)
    compiled = CompiledGraph(graph, ctx)
    for n in (33, 37, 64, 50):
        x, y = random(rng, n, 24), random(rng, n, 24)
        outs = compiled(x=ctx.tensor(x), y=y)  # a device tensor input is padded on the device
        for o, w in zip(outs, evaluate(graph, {"x": x, "y": y}), strict=True):
            assert o.shape == w.shape and rel(o.numpy(), w) < TOL
    assert compiled.recorded == 1
    assert compiled.buckets()[0].replays == 4
    compiled.release()


def test_the_least_recently_used_recording_is_evicted(ctx) -> None:
    rng = np.random.default_rng()
    graph = rows_graph(rng)
    compiled = CompiledGraph(graph, ctx, max_recordings=2)
    for n in (3, 7, 3, 13):  # buckets 4, 8, 4, 16: the 8 goes when 16 comes
        compiled(x=random(rng, n, 24), y=random(rng, n, 24))
    assert [s.bindings["seq"] for s in compiled.buckets()] == [4, 16]
    assert compiled.recorded == 3
    compiled(x=random(rng, 6, 24), y=random(rng, 6, 24))
    assert compiled.recorded == 4
    assert [s.bindings["seq"] for s in compiled.buckets()] == [16, 8]
    compiled.release()


def test_bucket_lists_and_their_limit(ctx) -> None:
    rng = np.random.default_rng()
    graph = rows_graph(rng)
    compiled = CompiledGraph(graph, ctx, buckets={"seq": [40, 80]})
    x, y = random(rng, 37, 24), random(rng, 37, 24)
    outs = compiled(x=x, y=y)
    assert compiled.buckets()[0].bindings == {"seq": 40}
    assert rel(outs[0].numpy(), evaluate(graph, {"x": x, "y": y})[0]) < TOL
    with pytest.raises(VkumdValueError, match="past its largest bucket 80"):
        compiled(x=random(rng, 81, 24), y=random(rng, 81, 24))
    compiled.release()


def test_shapes_that_break_a_symbol_are_refused_naming_the_inputs(ctx) -> None:
    rng = np.random.default_rng()
    compiled = CompiledGraph(rows_graph(rng), ctx)
    with pytest.raises(VkumdValueError, match=r"inputs 'x' and 'y' must agree on seq: 'x' "
                                              r"gives 37, 'y' gives 40"):
        compiled(x=random(rng, 37, 24), y=random(rng, 40, 24))
    with pytest.raises(VkumdValueError, match=r"missing 'y'"):
        compiled(x=random(rng, 37, 24))
    with pytest.raises(VkumdValueError, match=r"input 'x' has shape \(37, 25\)"):
        compiled(x=random(rng, 37, 25), y=random(rng, 37, 24))
    assert compiled.recorded == 0
    compiled.release()


def test_a_symbol_whose_padding_would_leak_gets_exact_sizes(ctx) -> None:
    b = GraphBuilder("leaky")
    x = b.input("x", (4, "seq"))
    b.output(b.softmax(x), b.relu(x))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    assert "seq" in compiled.leaky and "reduces over the seq axis" in compiled.leaky["seq"]
    data = random(np.random.default_rng(), 4, 37)
    outs = compiled(x=data)
    assert compiled.buckets()[0].bindings == {"seq": 37}
    for o, w in zip(outs, evaluate(graph, {"x": data}), strict=True):
        assert rel(o.numpy(), w) < TOL
    assert "seq: exact sizes" in compiled.summary()
    compiled.release()
