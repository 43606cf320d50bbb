"""Attention fusion: the pattern with its variants found, its look-alikes left alone, and the
fused node run on the device by ``vkumd.ops.attention`` against the original's reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from fusion_checks import feeds_for, ops_of, same_reference

from vkumd.framework import ops
from vkumd.framework.graph import PASSES, GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.fusion_attention import fuse_attention
from vkumd.framework.graph.passes import FUSION
from vkumd.testing.numerics import poisoned, rel_error

B, H, S, T, D = 2, 3, 5, 7, 8


def qkv(b: GraphBuilder, d: int = D, batch: object = B):
    q = b.input("q", (batch, H, S, d))
    k = b.input("k", (batch, H, T, d))
    v = b.input("v", (batch, H, T, d))
    return q, k, v


def test_matmul_scale_mask_softmax_matmul_becomes_attention() -> None:
    b = GraphBuilder()
    q, k, v = qkv(b, batch="batch")
    mask = b.input("mask", ("batch", 1, 1, T))
    scores = b.scale(b.matmul(q, k, trans_b=True, alpha=2.0), 0.25)
    b.output(b.matmul(b.softmax(b.add(scores, mask)), v))
    g = b.build()
    fused = fuse_attention(g)
    assert ops_of(fused) == ["attention"]
    node = fused.nodes[0]
    assert node.inputs == [*fused.inputs[:3], None, fused.inputs[3]]
    assert node.attrs == {"scale": 0.5}
    same_reference(g, fused)


def test_division_by_sqrt_d_and_the_softmax_mask() -> None:
    b = GraphBuilder()
    q, k, v = qkv(b)
    mask = b.input("mask", (S, T))
    scores = b.div(b.matmul(q, k, trans_b=True), math.sqrt(D))
    b.output(b.matmul(b.softmax(scores, mask=mask, scale=3.0), v))
    g = b.build()
    fused = fuse_attention(g)
    assert ops_of(fused) == ["attention"]
    node = fused.nodes[0]
    assert node.inputs[4] is fused.inputs[3]
    assert node.attrs["scale"] == pytest.approx(3.0 / math.sqrt(D))
    same_reference(g, fused)


def test_a_softmax_scale_after_the_mask_is_not_attention() -> None:
    b = GraphBuilder()
    q, k, v = qkv(b)
    mask = b.input("mask", (S, T))
    b.output(b.matmul(b.softmax(b.add(b.matmul(q, k, trans_b=True), mask), scale=0.5), v))
    g = b.build()
    assert "attention" not in ops_of(fuse_attention(g))


def test_probabilities_read_elsewhere_stay_unfused() -> None:
    b = GraphBuilder()
    q, k, v = qkv(b)
    probs = b.softmax(b.matmul(q, k, trans_b=True))
    b.output(b.matmul(probs, v), probs)
    g = b.build()
    assert ops_of(fuse_attention(g)) == ["matmul", "softmax", "matmul"]


@pytest.mark.parametrize("case", ["head_dim", "no_trans", "rank", "v_shape", "pv_alpha"])
def test_look_alikes_stay(case: str) -> None:
    b = GraphBuilder()
    d = 6 if case == "head_dim" else D
    if case == "rank":
        q, k, v = (b.input(n, (H, S if n == "q" else T, D)) for n in "qkv")
    else:
        q, k, v = qkv(b, d)
    if case == "v_shape":
        v = b.input("v2", (B, H, T, 2 * D))
    scores = (b.matmul(q, b.transpose(k, 2, 3)) if case == "no_trans"
              else b.matmul(q, k, trans_b=True))
    b.output(b.matmul(b.softmax(scores), v, alpha=2.0 if case == "pv_alpha" else 1.0))
    g = b.build()
    assert "attention" not in ops_of(fuse_attention(g))


def test_the_fused_node_runs_on_the_device(ctx) -> None:
    b = GraphBuilder()
    q, k, v = qkv(b)
    mask = b.input("mask", (B, 1, S, T))
    scores = b.mul(b.matmul(q, k, trans_b=True), 1.0 / math.sqrt(D))
    b.output(b.matmul(b.softmax(b.add(mask, scores)), v))
    g = b.build()
    feeds = feeds_for(g, seed=4)
    want = evaluate(g, feeds)[0]
    node = fuse_attention(g).nodes[0]
    t = {name: ctx.tensor(a) for name, a in feeds.items()}
    out = poisoned(ctx, want.shape)
    ops.attention(t["q"], t["k"], t["v"], attn_mask=t["mask"], scale=node.attrs["scale"],
                  out=out)
    got = out.numpy().astype(np.float64)
    assert rel_error(got, want) < 1e-5


def test_registered_first_in_the_fusion_passes() -> None:
    assert PASSES["attention_fusion"] is fuse_attention
    assert FUSION[0] == "attention_fusion"
    b = GraphBuilder()
    q, k, v = qkv(b)
    mask = b.input("mask", (S, T))
    b.output(b.matmul(b.softmax(b.add(b.matmul(q, k, trans_b=True), mask)), v))
    g = b.build()
    assert ops_of(run_passes(g)) == ["attention"]
    unfused = run_passes(g, disable=["attention_fusion"])
    assert ops_of(unfused) == ["matmul", "softmax", "matmul"]  # the mask became a residual
    assert unfused.nodes[0].inputs[3] is unfused.inputs[3]
