"""Attention layout folding: heads/sequence swaps around an ``attention`` node become its
``layout`` / ``out_layout``; look-alikes stay; the folded graph equals the original's float64
reference and, compiled, runs on the device without the permutes."""

from __future__ import annotations

import numpy as np
import pytest
from execute_checks import check_against_reference, random, rel
from fusion_checks import ops_of, same_reference
from test_compile_e2e import WEIGHTS, block, block_numpy, compiled_twice, f32

import vkumd
from vkumd.framework import ops
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import PASSES, GraphBuilder, run_passes
from vkumd.framework.graph.attention_layout import attention_layouts, fold_attention_layouts
from vkumd.framework.graph.passes import FUSION, PIPELINE

B, S, T, H, HKV, D = 2, 5, 7, 4, 2, 8
SWAP = (0, 2, 1, 3)


def bshd_graph(*, swap=("permute",) * 3, out_swap="permute", mask=True, extra_user=None,
               causal=False):
    """q, k, v arrive as [b, s, h, d] inputs, are swapped to [b, h, s, d] (``swap[i]``:
    "permute", "transpose", another permutation "other", or None for a [b, h, s, d] input),
    attended (grouped-query heads, optional mask) and the result swapped back."""
    b = GraphBuilder()
    values = []
    for name, heads, seq, how in (("q", H, S, swap[0]), ("k", HKV, T, swap[1]),
                                  ("v", HKV, T, swap[2])):
        if how is None:
            values.append(b.input(name, (B, heads, seq, D)))
            continue
        x = b.input(name, (B, seq, heads, D))
        if how == "permute":
            values.append(b.permute(x, SWAP))
        elif how == "transpose":
            values.append(b.transpose(x, 2, 1))
        else:  # a permutation that is no heads/seq swap: [b, d, s, h] -> [b, h, s, d]
            x2 = b.input(name + "2", (B, D, seq, heads))
            values.append(b.permute(x2, (0, 3, 2, 1)))
    m = b.input("mask", (B, 1, 1, T)) if mask else None
    a = b.attention(*values, attn_mask=m, causal=causal, scale=0.3)
    outs = [b.permute(a, SWAP) if out_swap == "permute" else a]
    if out_swap == "other":
        outs = [b.permute(a, (0, 1, 3, 2))]
    if extra_user is not None:
        outs.append(values[extra_user])
    b.output(*outs)
    return b.build()


def the_attention(g):
    (node,) = [n for n in g.nodes if n.op == "attention"]
    return node


@pytest.mark.parametrize("how", ["permute", "transpose"])
def test_swaps_in_and_out_fold(how) -> None:
    g = bshd_graph(swap=(how,) * 3)
    folded = fold_attention_layouts(g)
    assert ops_of(folded) == ["attention"]
    node = the_attention(folded)
    assert attention_layouts(node.attrs) == ("bshd", "bshd")
    assert node.inputs[:3] == folded.inputs[:3] and node.inputs[4] is folded.inputs[3]
    assert folded.outputs[0].shape == (B, S, H, D)
    same_reference(g, folded)


def test_inputs_fold_alone_when_the_output_is_not_swapped() -> None:
    g = bshd_graph(out_swap=None)
    folded = fold_attention_layouts(g)
    assert ops_of(folded) == ["attention"]
    node = the_attention(folded)
    assert attention_layouts(node.attrs) == ("bshd", "bhsd")
    assert folded.outputs[0].shape == (B, H, S, D)
    same_reference(g, folded)


@pytest.mark.parametrize("swap", [("permute", "permute", None), (None, "permute", "permute"),
                                  ("permute", "other", "permute")],
                         ids=["v-unswapped", "q-unswapped", "k-other-perm"])
def test_inputs_stay_unless_all_three_are_swaps(swap) -> None:
    g = bshd_graph(swap=swap)
    folded = fold_attention_layouts(g)
    node = the_attention(folded)
    # The output still folds; the inputs keep their permutes and the bhsd layout.
    assert attention_layouts(node.attrs) == ("bhsd", "bshd")
    assert ops_of(folded).count("permute") == sum(s is not None for s in swap)
    same_reference(g, folded)


@pytest.mark.parametrize("user", [0, 1, 2], ids=["q", "k", "v"])
def test_a_swap_read_elsewhere_keeps_the_inputs(user) -> None:
    g = bshd_graph(extra_user=user)
    folded = fold_attention_layouts(g)
    node = the_attention(folded)
    assert attention_layouts(node.attrs)[0] == "bhsd"
    assert ops_of(folded).count("permute") == 3
    same_reference(g, folded)


def test_an_output_read_elsewhere_or_permuted_otherwise_stays() -> None:
    b = GraphBuilder()
    q, k, v = (b.input(n, (B, H, S, D)) for n in "qkv")
    a = b.attention(q, k, v)
    b.output(b.permute(a, SWAP), a)  # a is a graph output too
    g = b.build()
    assert attention_layouts(fold_attention_layouts(g).nodes[0].attrs) == ("bhsd", "bhsd")
    g2 = bshd_graph(swap=(None,) * 3, out_swap="other")
    assert ops_of(fold_attention_layouts(g2)) == ["attention", "permute"]
    assert attention_layouts(the_attention(fold_attention_layouts(g2)).attrs) == ("bhsd",) * 2


def test_self_attention_on_one_swap_folds() -> None:
    """q, k and v the same permute: read three times by the node and by nothing else."""
    b = GraphBuilder()
    x = b.input("x", (B, S, H, D))
    t = b.permute(x, SWAP)
    b.output(b.permute(b.attention(t, t, t, causal=True), SWAP))
    g = b.build()
    folded = fold_attention_layouts(g)
    assert ops_of(folded) == ["attention"]
    assert folded.nodes[0].inputs[:3] == [folded.inputs[0]] * 3
    same_reference(g, folded)


def test_registered_after_attention_fusion_and_switchable_off() -> None:
    assert PASSES["attention_layout"] is fold_attention_layouts
    assert FUSION[:2] == ("attention_fusion", "attention_layout")
    assert PIPELINE.index("attention_layout") == PIPELINE.index("attention_fusion") + 1
    g = bshd_graph()
    assert ops_of(run_passes(g)) == ["attention"]
    assert ops_of(run_passes(g, disable=["attention_layout"])).count("permute") == 4


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
def test_the_folded_graph_runs_on_the_device(ctx, causal) -> None:
    g = bshd_graph(causal=causal)
    folded = run_passes(g)
    assert ops_of(folded) == ["attention"]
    compiled = CompiledGraph(folded, ctx)
    rng = np.random.default_rng()

    def feeds(r):
        mask = random(r, B, 1, 1, T)
        mask[1, ..., 2] = -np.inf
        return {"q": random(r, B, S, H, D), "k": random(r, B, T, HKV, D),
                "v": random(r, B, T, HKV, D), "mask": mask}

    for _ in range(2):  # records, then replays over poisoned memory
        check_against_reference(g, compiled, feeds(rng))
    (stats,) = compiled.buckets()
    assert stats.launches == 1
    compiled.release()


def test_the_bert_block_loses_its_permutes(ctx) -> None:
    """The encoder layer's pattern (reshape -> permute x3 -> attention -> permute -> reshape):
    compiled without a permute, equal to eager and to float64 numpy."""
    x = f32(2, 9, 32)
    tensors = {"x": ctx.tensor(x), **{k: ctx.tensor(v) for k, v in WEIGHTS.items()}}
    cf = vkumd.compile(block, tensors, ctx=ctx)
    got = compiled_twice(cf, tensors)[0]
    fused = [n.op for n in cf.graph.nodes]
    assert "permute" not in fused and "transpose" not in fused, fused
    node = the_attention(cf.graph)
    assert attention_layouts(node.attrs) == ("bshd", "bshd")
    eager = block(**tensors).numpy()
    want = block_numpy(x, **WEIGHTS)
    assert rel(got, want) < 1e-5
    assert rel(eager, want) < 1e-5
    assert rel(got, eager) < 1e-5


def test_a_traced_bshd_attention_compiles_as_it_runs_eagerly(ctx) -> None:
    """ops.attention(..., layout=, out_layout=) traces to a node with those attributes."""
    def fn(q, k, v):
        return ops.attention(q, k, v, causal=True, layout="bshd", out_layout="bhsd") * 2.0

    rng = np.random.default_rng()
    feeds = {"q": random(rng, 2, 11, 4, 16), "k": random(rng, 2, 13, 2, 16),
             "v": random(rng, 2, 13, 2, 16)}
    tensors = {name: ctx.tensor(a) for name, a in feeds.items()}
    cf = vkumd.compile(fn, tensors, ctx=ctx)
    got = compiled_twice(cf, tensors)[0]
    node = the_attention(cf.graph)
    assert attention_layouts(node.attrs) == ("bshd", "bhsd")
    eager = fn(**tensors).numpy()
    bhsd = {n: a.transpose(0, 2, 1, 3).astype(np.float64) for n, a in feeds.items()}
    k, v = (np.repeat(bhsd[n], 2, axis=1) for n in "kv")  # 4 query heads on 2 kv heads
    scores = bhsd["q"] @ k.transpose(0, 1, 3, 2) / 4.0  # 1 / sqrt(16)
    scores[..., np.arange(13)[None, :] > np.arange(11)[:, None] + 2] = -np.inf
    p = np.exp(scores - scores.max(-1, keepdims=True))
    want = 2.0 * (p / p.sum(-1, keepdims=True)) @ v
    assert got.shape == (2, 4, 11, 16)
    assert rel(got, want) < 1e-5
    assert rel(eager, want) < 1e-5
