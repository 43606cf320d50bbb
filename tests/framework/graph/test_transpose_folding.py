"""Transpose folding: swaps of the last two axes feeding a matmul become its flags, so
``q @ k.transpose(-2, -1)`` and ``q @ k.permute(0, 1, 3, 2)`` fuse into attention; other
swaps stay; the rewritten graph computes what the original did (reference and device)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from execute_checks import poison, rel
from fusion_checks import feeds_for, ops_of, same_reference

import vkumd
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.passes import CLEANUP, FUSION
from vkumd.framework.graph.transpose_folding import fold_transposes

B, H, S, T, D = 2, 3, 5, 7, 8
SWAPS = {
    "transpose(-2, -1)": lambda b, k: b.transpose(k, -2, -1),
    "transpose(3, 2)": lambda b, k: b.transpose(k, 3, 2),
    "permute(0, 1, 3, 2)": lambda b, k: b.permute(k, (0, 1, 3, 2)),
    "permute(0, 1, -1, -2)": lambda b, k: b.permute(k, (0, 1, -1, -2)),
}


def _attention_graph(swap, prescale: str | None = None):
    b = GraphBuilder("attn")
    q, k, v = b.input("q", (B, H, S, D)), b.input("k", (B, H, T, D)), b.input("v", (B, H, T, D))
    if prescale == "q":
        q = b.mul(q, 1.0 / math.sqrt(D))
    elif prescale == "k":
        k = b.scale(k, 0.5)
    scores = b.matmul(q, swap(b, k))
    if prescale is None:
        scores = b.div(scores, math.sqrt(D))
    b.output(b.matmul(b.softmax(scores), v))
    return b.build()


@pytest.mark.parametrize("form", list(SWAPS))
def test_a_swapped_key_becomes_trans_b_and_attention(form: str) -> None:
    g = _attention_graph(SWAPS[form])
    folded = fold_transposes(g)
    (mm,) = [n for n in folded.nodes if n.op == "matmul" and n.attrs.get("trans_b")]
    assert mm.inputs[1] is folded.inputs[1]  # k itself, not its transpose
    same_reference(g, folded)
    fused = run_passes(g)
    assert ops_of(fused) == ["attention"]
    assert fused.nodes[0].attrs["scale"] == pytest.approx(1 / math.sqrt(D))
    same_reference(g, fused)


@pytest.mark.parametrize("side", ["q", "k"])
def test_a_scale_before_the_scores_matmul_joins_the_attention(side: str) -> None:
    g = _attention_graph(SWAPS["transpose(-2, -1)"], prescale=side)
    fused = run_passes(g)
    assert ops_of(fused) == ["attention"]
    assert fused.nodes[0].attrs["scale"] == pytest.approx(1 / math.sqrt(D) if side == "q"
                                                          else 0.5)
    same_reference(g, fused)


def test_a_prescaled_query_read_elsewhere_stays_outside() -> None:
    b = GraphBuilder()
    q, k, v = b.input("q", (B, H, S, D)), b.input("k", (B, H, T, D)), b.input("v", (B, H, T, D))
    scaled = b.scale(q, 0.5)
    b.output(b.matmul(b.softmax(b.matmul(scaled, k, trans_b=True)), v), scaled)
    fused = run_passes(g := b.build())
    assert ops_of(fused) == ["scale", "attention"]
    assert fused.nodes[1].attrs["scale"] == 1.0
    same_reference(g, fused)


def test_trans_a_and_chains_of_swaps() -> None:
    b = GraphBuilder()
    a, c = b.input("a", (4, 9, 3)), b.input("c", (4, 9, 5))
    once = b.matmul(b.transpose(a, 1, 2), c)  # a^T c
    # Two swaps cancel (c itself); one swap of the right operand is trans_b: c @ c^T.
    twice = b.matmul(b.transpose(b.permute(c, (0, 2, 1)), -1, -2), b.transpose(c, -1, 1))
    b.output(once, twice)
    g = b.build()
    folded = run_passes(g)
    assert ops_of(folded) == ["matmul", "matmul"]
    first, second = folded.nodes
    assert first.attrs.get("trans_a") and not first.attrs.get("trans_b")
    assert not second.attrs.get("trans_a") and second.attrs.get("trans_b")
    assert second.inputs[:2] == [folded.inputs[1], folded.inputs[1]]
    same_reference(g, folded)


def test_other_swaps_and_shared_transposes_stay() -> None:
    b = GraphBuilder()
    x, w = b.input("x", (4, 6, 6)), b.input("w", (6, 6))
    not_last = b.transpose(x, 0, 1)  # swaps batch and rows: not a flag
    shared = b.transpose(x, -1, -2)
    b.output(b.matmul(not_last, w), b.matmul(shared, w), shared)
    g = b.build()
    folded = run_passes(g)
    assert ops_of(folded).count("transpose") == 2  # the shared one is still returned
    (mm_shared,) = [n for n in folded.nodes if n.op == "matmul" and n.attrs.get("trans_a")]
    assert mm_shared.inputs[0] is folded.inputs[0]
    same_reference(g, folded)


def test_registered_before_the_fusion_passes() -> None:
    assert CLEANUP[-1] == "transpose_folding" and "transpose_folding" not in FUSION


def test_compiled_folded_attention_matches_numpy(ctx) -> None:
    g = _attention_graph(SWAPS["permute(0, 1, 3, 2)"], prescale="q")
    fused = run_passes(g)
    assert ops_of(fused) == ["attention"]
    feeds = feeds_for(g, seed=int(np.random.default_rng().integers(1 << 30)))
    q, k, v = (feeds[n].astype(np.float64) for n in "qkv")
    s = (q / math.sqrt(D)) @ np.swapaxes(k, -1, -2)
    p = np.exp(s - s.max(-1, keepdims=True))
    want = (p / p.sum(-1, keepdims=True)) @ v
    compiled = CompiledGraph(fused, ctx)
    try:
        compiled(**feeds)
        poison(compiled)
        (got,) = compiled(**feeds)
        assert rel(got.numpy(), want) < 1e-5
    finally:
        compiled.release()
    assert rel(evaluate(g, feeds)[0], want) < 1e-6  # the reference rounds each op to float32


def test_traced_torch_style_attention_fuses_and_matches_eager(ctx) -> None:
    def attend(q, k, v):
        return ((q * (1.0 / math.sqrt(D))) @ k.transpose(-2, -1)).softmax() @ v

    rng = np.random.default_rng()
    feeds = {n: rng.standard_normal(s).astype(np.float32)
             for n, s in (("q", (B, H, S, D)), ("k", (B, H, T, D)), ("v", (B, H, T, D)))}
    cf = vkumd.compile(attend, feeds, ctx=ctx)
    assert ops_of(cf.graph) == ["attention"]
    got = cf(**feeds).numpy()
    eager = attend(*(ctx.tensor(feeds[n]) for n in "qkv")).numpy()
    assert rel(got, eager.astype(np.float64)) < 1e-5
    q, k, v = (feeds[n].astype(np.float64) for n in "qkv")
    s = q @ np.swapaxes(k, -1, -2) / math.sqrt(D)
    p = np.exp(s - s.max(-1, keepdims=True))
    assert rel(got, (p / p.sum(-1, keepdims=True)) @ v) < 1e-5
