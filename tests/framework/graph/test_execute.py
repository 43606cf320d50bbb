"""CompiledGraph against the float64 reference: hand-built graphs lowered to vkumd.ops,
recorded once and replayed, under synchronization validation (see tests/conftest.py).

Each graph runs twice: the first call records, the second runs fresh data over an arena and
outputs poisoned with NaN, so a value read before it is written (or never written) fails.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from execute_checks import check_against_reference, random, rel

import vkumd
from vkumd.framework.execute import LOWERINGS, CompiledGraph
from vkumd.framework.graph import OPS, GraphBuilder, UnsupportedOpError, evaluate


def run_twice(graph, ctx, make_feeds, **kwargs):
    compiled = CompiledGraph(graph, ctx, **kwargs)
    rng = np.random.default_rng()
    check_against_reference(graph, compiled, make_feeds(rng))
    check_against_reference(graph, compiled, make_feeds(rng))
    return compiled


def test_an_elementwise_chain_matches_the_reference(ctx) -> None:
    b = GraphBuilder("chain")
    x = b.input("x", (5, 7))
    y = b.input("y", (1, 7))
    c = b.weight("c", np.linspace(-1, 1, 7, dtype=np.float32))
    t = b.mul(b.add(x, y), c)
    t = b.silu(b.sub(t, 0.5))
    t = b.div(b.scale(t, 3.0), b.add(b.mul(y, y), 1.0))
    b.output(b.relu(t), b.gelu_tanh(t))
    graph = b.build()
    compiled = run_twice(graph, ctx, lambda r: {"x": random(r, 5, 7), "y": random(r, 1, 7)})
    (stats,) = compiled.buckets()
    assert stats.launches == len(graph.nodes)
    compiled.release()


def test_matmul_bias_gelu_as_one_node_and_as_three(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("mlp")
    x = b.input("x", (3, 13, 24))
    w = b.weight("w", random(rng, 20, 24))
    bias = b.weight("bias", random(rng, 20))
    fused = b.matmul(x, w, bias=bias, activation="gelu", trans_b=True)
    split = b.gelu(b.add(b.matmul(x, w, trans_b=True), bias))
    b.output(fused, split)
    graph = b.build()
    run_twice(graph, ctx, lambda r: {"x": random(r, 3, 13, 24)}).release()


def test_norms_softmax_and_reductions(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("rows")
    x = b.input("x", (6, 33))
    gamma = b.weight("gamma", random(rng, 33))
    beta = b.weight("beta", random(rng, 33))
    ln = b.layer_norm(x, gamma, beta, eps=1e-5)
    b.output(ln, b.rms_norm(x, gamma), b.softmax(x, scale=0.7), b.mean(ln, keepdims=True),
             b.max(x), b.sum(b.relu(x)))
    graph = b.build()
    run_twice(graph, ctx, lambda r: {"x": random(r, 6, 33)}).release()


@pytest.mark.parametrize("causal", [False, True])
def test_attention_with_and_without_key_lengths(ctx, causal) -> None:
    b = GraphBuilder("attn")
    q = b.input("q", (2, 4, 9, 16))
    k = b.input("k", (2, 2, 11, 16))
    v = b.input("v", (2, 2, 11, 16))
    lengths = b.input("lengths", (2,), "int32")
    b.output(b.attention(q, k, v, causal=causal),
             b.attention(q, k, v, key_lengths=lengths, scale=0.3))
    graph = b.build()

    def feeds(r):
        return {"q": random(r, 2, 4, 9, 16), "k": random(r, 2, 2, 11, 16),
                "v": random(r, 2, 2, 11, 16), "lengths": np.array([11, 6], np.int32)}

    run_twice(graph, ctx, feeds).release()


def transformer_block(rng, d=32, heads=4, ffn=48):
    """A pre-norm transformer block over ``[batch, seq, d]``, symbols batch and seq."""
    dh = d // heads
    b = GraphBuilder("block")
    x = b.input("x", ("batch", "seq", d))

    def w(name, *shape):
        return b.weight(name, (random(rng, *shape) / np.sqrt(shape[-1])).astype(np.float32))

    h = b.layer_norm(x, w("ln1_w", d), w("ln1_b", d))
    heads_of = []
    for name in ("q", "k", "v"):
        t = b.matmul(h, w(f"w{name}", d, d), bias=w(f"b{name}", d), trans_b=True)
        t = b.reshape(t, ("batch", "seq", heads, dh))
        heads_of.append(b.permute(t, (0, 2, 1, 3)))
    a = b.attention(*heads_of)
    a = b.reshape(b.permute(a, (0, 2, 1, 3)), ("batch", "seq", d))
    x = b.matmul(a, w("wo", d, d), bias=w("bo", d), residual=x, trans_b=True)
    h = b.layer_norm(x, w("ln2_w", d), w("ln2_b", d))
    h = b.matmul(h, w("w1", ffn, d), bias=w("b1", ffn), activation="gelu", trans_b=True)
    b.output(b.matmul(h, w("w2", d, ffn), bias=w("b2", d), residual=x, trans_b=True))
    return b.build()


def test_a_transformer_block(ctx) -> None:
    rng = np.random.default_rng()
    graph = transformer_block(rng)
    compiled = run_twice(graph, ctx, lambda r: {"x": random(r, 2, 16, 32)})
    (stats,) = compiled.buckets()
    reshapes = sum(1 for n in graph.nodes if n.op == "reshape")
    assert reshapes == 4
    assert stats.launches == len(graph.nodes) - reshapes  # a reshape is a view: no launch
    assert stats.arena_bytes < stats.intermediate_bytes
    compiled.release()


def test_reshapes_are_views_and_an_input_returned_is_copied(ctx) -> None:
    b = GraphBuilder("views")
    x = b.input("x", (4, 6))
    r = b.reshape(b.relu(x), (3, 8))
    b.output(b.reshape(b.add(r, 1.0), (24,)), b.reshape(x, (6, 4)), x)
    graph = b.build()
    compiled = run_twice(graph, ctx, lambda r: {"x": random(r, 4, 6)})
    (stats,) = compiled.buckets()
    assert stats.launches == 2 + 2  # relu, add; two copies for the returned input bytes
    compiled.release()


def test_independent_branches_record_no_barrier_between_them(ctx) -> None:
    b = GraphBuilder("branches")
    x = b.input("x", (64,))
    branches = [b.relu(x), b.gelu(x), b.silu(x), b.scale(x, 2.0)]
    b.output(b.add(b.add(branches[0], branches[1]), b.mul(branches[2], branches[3])))
    graph = b.build()
    compiled = run_twice(graph, ctx, lambda r: {"x": random(r, 64)})
    (stats,) = compiled.buckets()
    # Four independent kernels, then the two that read them, then the last: two barriers.
    assert stats.barriers == 2
    assert "barriers" in compiled.summary()
    compiled.release()


def test_tensor_inputs_are_copied_and_outputs_have_exact_shapes(ctx) -> None:
    b = GraphBuilder("io")
    x = b.input("x", (3, 5))
    b.output(b.scale(x, -2.0))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    data = random(np.random.default_rng(), 3, 5)
    (out,) = compiled(x=ctx.tensor(data))
    assert out.shape == (3, 5)
    assert rel(out.numpy(), evaluate(graph, {"x": data})[0]) < 1e-6
    compiled.release()


def test_an_op_without_a_lowering_is_named(ctx, monkeypatch) -> None:
    monkeypatch.setitem(OPS, "gt", dataclasses.replace(OPS["gt"], lower=None))
    b = GraphBuilder("where")
    x = b.input("x", (4,))
    b.output(b.where(b.gt(x, 0.0), x, 0.0))
    with pytest.raises(UnsupportedOpError, match=r"node %\d+ = gt.*no lowering"):
        CompiledGraph(b.build(), ctx)
    assert "matmul" in LOWERINGS and "reshape" not in LOWERINGS and "gt" not in LOWERINGS


def test_comparisons_record_their_bool_results(ctx) -> None:
    b = GraphBuilder("compare")
    x = b.input("x", ("n", 7))
    y = b.input("y", ("n", 7))
    b.output(b.where(b.gt(x, y), x, 0.0), b.le(x, y))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    rng = np.random.default_rng()
    data = {"x": random(rng, 5, 7), "y": random(rng, 5, 7)}
    data["y"][0, :3] = data["x"][0, :3]  # ties
    picked, mask = compiled(**{k: ctx.tensor(v) for k, v in data.items()})
    want_picked, want_mask = evaluate(graph, data)
    assert mask.dtype.name == "bool"
    np.testing.assert_array_equal(mask.numpy(), want_mask.astype(np.bool_))
    assert rel(picked.numpy(), want_picked) < 1e-6
    compiled.release()


def test_the_recordings_own_input_tensors_are_bound_without_a_copy(ctx) -> None:
    b = GraphBuilder("bound")
    x = b.input("x", ("seq", 8))
    b.output(b.relu(x))
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    inputs = compiled.input_tensors(x=(5, 8))
    assert inputs["x"].shape == (5, 8)  # the true shape, a view of the seq=8 bucket's tensor
    (bucket,) = compiled.bucket_memory()
    assert inputs["x"].base is bucket.inputs["x"] and bucket.inputs["x"].shape == (8, 8)
    data = random(np.random.default_rng(), 5, 8)
    vkumd.ops.scale(ctx.tensor(data), 1.0, out=inputs["x"])  # produced on the device
    (out,) = compiled(**inputs)
    (stats,) = compiled.buckets()
    assert stats.launches == 1 and compiled.recorded == 1
    assert rel(out.numpy(), evaluate(graph, {"x": data})[0]) < 1e-6
    compiled.release()
