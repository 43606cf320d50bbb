"""graph.summary() and a transformer layer end to end: build, optimise, plan, check."""

from __future__ import annotations

import math

import numpy as np

from vkumd.framework.graph import GraphBuilder, evaluate, plan_memory, run_passes
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.passes import FUSION

HIDDEN, HEADS, FFN = 32, 4, 64
rng = np.random.default_rng(3)


def w(*shape: int) -> np.ndarray:
    return (rng.standard_normal(shape) / math.sqrt(shape[-1])).astype(np.float32)


def encoder_layer() -> tuple[Graph, dict[str, np.ndarray]]:
    b = GraphBuilder("encoder")
    x = b.input("x", ("batch", "seq", HIDDEN))
    lengths = b.input("lengths", ("batch",), "int32")
    weights = {name: w(*shape) for name, shape in {
        "wqkv": (3 * HIDDEN, HIDDEN), "wo": (HIDDEN, HIDDEN), "w1": (FFN, HIDDEN),
        "w2": (HIDDEN, FFN)}.items()}
    handles = {k: b.weight(k, v) for k, v in weights.items()}
    qkv = b.matmul(x, handles["wqkv"], trans_b=True)
    heads = []
    for part in b.split(qkv, (HIDDEN,) * 3, axis=-1):
        shaped = b.reshape(part, ("batch", "seq", HEADS, HIDDEN // HEADS))
        heads.append(b.permute(shaped, (0, 2, 1, 3)))
    ctx = b.attention(*heads, key_lengths=lengths)
    merged = b.reshape(b.permute(ctx, (0, 2, 1, 3)), ("batch", "seq", HIDDEN))
    attn = b.matmul(merged, handles["wo"], trans_b=True, residual=x)
    h = b.layer_norm(attn, eps=1e-12)
    ffn = b.matmul(h, handles["w1"], trans_b=True, activation="gelu")
    # The same scale twice (CSE) and a constant expression (folding).
    s1 = b.scale(ffn, 1.0)
    b.scale(ffn, 1.0)
    two = b.add(b.constant(np.float32(1.0)), b.constant(np.float32(1.0)))
    out = b.layer_norm(b.matmul(b.div(s1, two), handles["w2"], trans_b=True, residual=h))
    b.output(out)
    return b.build(), weights


def test_summary_before_and_after_passes() -> None:
    g, _ = encoder_layer()
    text = g.summary()
    assert "arena: not planned (pass bindings= for the symbolic dims)" in text
    assert "passes: none" in text
    lines = text.splitlines()
    assert lines[1].split() == ["op", "nodes", "kernels", "barriers"]
    assert any(line.split()[:2] == ["matmul", "4"] and line.split()[2:] == ["—", "—"]
               for line in lines)
    opt = run_passes(g, disable=FUSION)  # the cleanup passes; fusion is test_fusion_*.py's
    text = opt.summary({"batch": 2, "seq": 16})
    assert ("passes: dce, constant_folding, conv_bn_folding, pad_folding, hardswish_rewrite, "
            "conv_input_affine_folding, cse, transpose_folding, dce") in text
    assert "at batch=2, seq=16" in text and "arena " in text
    assert len(opt.nodes) == len(g.nodes) - 2  # the folded add and the repeated scale


def test_encoder_layer_matches_numpy_after_passes() -> None:
    g, weights = encoder_layer()
    opt = run_passes(g)
    x = rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)
    lengths = np.array([5, 3], np.int32)
    (got,) = evaluate(opt, {"x": x, "lengths": lengths})
    (before,) = evaluate(g, {"x": x, "lengths": lengths})
    np.testing.assert_allclose(got, before, rtol=1e-12, atol=1e-12)

    def ln(t: np.ndarray, eps: float = 1e-5) -> np.ndarray:
        return (t - t.mean(-1, keepdims=True)) / np.sqrt(t.var(-1, keepdims=True) + eps)

    xd = x.astype(np.float64)
    wd = {k: v.astype(np.float64) for k, v in weights.items()}
    q, k, v = np.split(xd @ wd["wqkv"].T, 3, axis=-1)
    q, k, v = (t.reshape(2, 5, HEADS, -1).transpose(0, 2, 1, 3) for t in (q, k, v))
    s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(HIDDEN // HEADS)
    s = np.where(np.arange(5)[None, None, None, :] >= lengths[:, None, None, None], -np.inf, s)
    p = np.exp(s - s.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    ctx = (p @ v).transpose(0, 2, 1, 3).reshape(2, 5, HIDDEN)
    h = ln(ctx @ wd["wo"].T + xd, 1e-12)
    pre = h @ wd["w1"].T
    erf = np.vectorize(math.erf)
    f = 0.5 * pre * (1 + erf(pre / math.sqrt(2)))
    want = ln((f / 2.0) @ wd["w2"].T + h)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)
    plan = plan_memory(opt, {"batch": 2, "seq": 5})
    assert plan.arena_bytes < plan.intermediate_bytes
