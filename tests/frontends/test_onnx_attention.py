"""ONNX's Attention (opsets 23 to 25) on single-node models against a float64 numpy
reference written here: 3-D and 4-D inputs, grouped-query heads, a past key/value and the
present outputs, is_causal aligned at the past's length, boolean and float masks (short ones
padded), softcap, every qk_matmul_output_mode, nonpad_kv_seqlen with the causal frontier and
a sliding window; both routes (the fused attention op and the matmul/softmax composition);
and the forms the importer refuses, refused with a reason."""

from __future__ import annotations

import math

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.testing.numerics import rel_error  # noqa: E402

_TYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16,
          np.dtype(bool): T.BOOL, np.dtype(np.int64): T.INT64}


def attention_float64(q, k, v, mask=None, past_k=None, past_v=None, nonpad=None, *,
                      heads=None, kv_heads=None, scale=None, causal=False, softcap=0.0,
                      left=-1, right=-1, mode=0):
    """ONNX's Attention in float64: (Y, present_key, present_value, qk_matmul_output)."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    three_d = q.ndim == 3
    if three_d:
        def split(x, h):
            return x.reshape(x.shape[0], x.shape[1], h, -1).transpose(0, 2, 1, 3)
        q, k, v = split(q, heads), split(k, kv_heads), split(v, kv_heads)
    past = 0 if past_k is None else past_k.shape[2]
    if past_k is not None:
        k = np.concatenate([np.asarray(past_k, np.float64), k], axis=2)
        v = np.concatenate([np.asarray(past_v, np.float64), v], axis=2)
    present_k, present_v = k, v
    batch, h, q_len, size = q.shape
    k_len = k.shape[2]
    group = h // k.shape[1]
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scale = 1 / math.sqrt(size) if scale is None else scale
    scores = q @ kr.transpose(0, 1, 3, 2) * scale
    if softcap > 0:
        scores = softcap * np.tanh(scores / softcap)
    bias = np.zeros((1, 1, q_len, k_len))
    if mask is not None:
        m = np.where(mask, 0.0, -np.inf) if mask.dtype == bool else mask.astype(np.float64)
        m = np.concatenate([m, np.full(m.shape[:-1] + (k_len - m.shape[-1],), -np.inf)], -1)
        bias = bias + m
    offset = np.full((batch, 1, 1, 1), past) if nonpad is None else \
        (nonpad - q_len).reshape(batch, 1, 1, 1)
    gap = np.arange(q_len)[:, None] + offset - np.arange(k_len)[None, :]
    allowed = np.ones(gap.shape, bool)
    if causal:
        allowed &= gap >= 0
    if left >= 0:
        allowed &= gap <= left
    if right >= 0:
        allowed &= -gap <= right
    if nonpad is not None:
        allowed &= np.arange(k_len) < nonpad.reshape(batch, 1, 1, 1)
    bias = bias + np.where(allowed, 0.0, -np.inf)
    z = scores + bias
    top = z.max(-1, keepdims=True)
    e = np.exp(z - np.where(np.isneginf(top), 0, top))
    total = e.sum(-1, keepdims=True)
    probs = np.where(total == 0, 0.0, e / np.where(total == 0, 1, total))
    y = probs @ vr
    if three_d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, q_len, -1)
    qk = {0: q @ kr.transpose(0, 1, 3, 2) * scale, 1: scores, 2: z, 3: probs}[mode]
    return y, present_k, present_v, np.broadcast_to(qk, probs.shape)


def node_model(inputs: dict[str, np.ndarray], outputs: int, opset: int = 23,
               **attrs: object) -> onnx.ModelProto:
    """A one-Attention model; ``inputs`` in ONNX's order by name (absent ones skipped)."""
    order = ["Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen"]
    names = [n if n in inputs else "" for n in order]
    while names[-1] == "":
        names.pop()
    outs = ["Y", "present_key", "present_value", "qk_matmul_output"][:outputs]
    node = helper.make_node("Attention", names, outs, **attrs)
    graph = helper.make_graph(
        [node], "g",
        [helper.make_tensor_value_info(n, _TYPES[a.dtype], list(a.shape))
         for n, a in inputs.items()],
        [helper.make_tensor_value_info(n, _TYPES[inputs["Q"].dtype], None) for n in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def run(ctx, inputs: dict[str, np.ndarray], outputs: int = 1, opset: int = 23, **attrs):
    """The node's outputs on vkumd, in ONNX's order, and the model (to look at its graph)."""
    model = vkumd.onnx.load(node_model(inputs, outputs, opset, **attrs), ctx=ctx)
    got = model(**inputs)
    return [got[n] for n in ("Y", "present_key", "present_value", "qk_matmul_output")
            if n in got], model


def _ops(model) -> set[str]:
    return {n.op for n in model.graph.nodes}


def _random(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_4d_gqa_with_float_mask_runs_fused(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = _random(rng, 2, 6, 5, 12), _random(rng, 2, 2, 7, 12), _random(rng, 2, 2, 7, 12)
    mask = _random(rng, 2, 1, 5, 7)
    (y,), model = run(ctx, {"Q": q, "K": k, "V": v, "attn_mask": mask}, scale=0.3)
    assert "attention" in _ops(model) and "softmax" not in _ops(model)
    want = attention_float64(q, k, v, mask, scale=0.3)[0]
    assert y.shape == want.shape and rel_error(y, want) < 1e-5


def test_3d_causal_with_past_bool_short_mask_and_presents(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = _random(rng, 3, 4, 6 * 8), _random(rng, 3, 4, 3 * 8), _random(rng, 3, 4, 3 * 8)
    past_k, past_v = _random(rng, 3, 3, 5, 8), _random(rng, 3, 3, 5, 8)
    mask = rng.random((4, 7)) > 0.3  # covers 7 of the 9 keys: ONNX pads with False
    mask[:, 0] = True
    inputs = {"Q": q, "K": k, "V": v, "attn_mask": mask, "past_key": past_k,
              "past_value": past_v}
    got, model = run(ctx, inputs, 3, q_num_heads=6, kv_num_heads=3, is_causal=1)
    want = attention_float64(q, k, v, mask, past_k, past_v, heads=6, kv_heads=3, causal=True)
    assert "attention" in _ops(model)
    for g, w in zip(got, want[:3], strict=True):
        assert g.shape == w.shape and rel_error(g, w) < 1e-5


@pytest.mark.parametrize("mode,softcap", [(0, 0.0), (1, 1.5), (2, 1.5), (3, 1.5), (2, 0.0)])
def test_composed_softcap_and_every_qk_mode(ctx, mode: int, softcap: float) -> None:
    rng = np.random.default_rng()
    # Value heads of 10 (not the keys' 7): only the composition computes it.
    q, k, v = _random(rng, 2, 4, 5, 7), _random(rng, 2, 2, 6, 7), _random(rng, 2, 2, 6, 10)
    mask = _random(rng, 5, 6)
    mask[2, :] = -np.inf  # a fully masked query row: zeros
    got, model = run(ctx, {"Q": q, "K": k, "V": v, "attn_mask": mask}, 4, softcap=softcap,
                     qk_matmul_output_mode=mode)
    want = attention_float64(q, k, v, mask, softcap=softcap, mode=mode)
    assert "attention" not in _ops(model)
    assert np.all(got[0][:, :, 2] == 0)
    assert rel_error(got[0], want[0]) < 1e-5
    finite = np.isfinite(want[3])
    assert np.array_equal(np.isfinite(got[3]), finite)
    assert rel_error(got[3][finite], want[3][finite]) < 1e-5


def test_nonpad_lengths_with_causal_and_window(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = _random(rng, 3, 2, 3, 8), _random(rng, 3, 2, 9, 8), _random(rng, 3, 2, 9, 8)
    nonpad = np.array([9, 5, 2], np.int64)  # the last: query 0 sees no key (zeros)
    (y,), _ = run(ctx, {"Q": q, "K": k, "V": v, "nonpad_kv_seqlen": nonpad}, opset=25,
                  is_causal=1, left_window_size=3)
    want = attention_float64(q, k, v, nonpad=nonpad, causal=True, left=3)[0]
    assert rel_error(y, want) < 1e-5


def test_float16_matches_float64(ctx) -> None:
    rng = np.random.default_rng()
    q, k, v = (_random(rng, 1, 4, 9, 16, dtype=np.float16) for _ in range(3))
    (y,), _ = run(ctx, {"Q": q, "K": k, "V": v}, is_causal=1)
    want = attention_float64(q, k, v, causal=True)[0]
    assert y.dtype == np.float16 and rel_error(y, want) < 3e-3


@pytest.mark.parametrize("inputs,attrs,reason", [
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {"qk_matmul_output_mode": 4},
     "qk_matmul_output_mode=4"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {"softcap": 2.0},
     "mode=0 with a softcap"),
    ({"Q": (1, 3, 16), "K": (1, 3, 16), "V": (1, 3, 16)}, {}, "without q_num_heads"),
    ({"Q": (1, 3, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {}, "3 query heads over 2"),
    ({"Q": (1, 3, 16), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8)}, {}, "ranks 3, 4, 4"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "past_key": (1, 2, 1, 8)}, {},
     "only one of past_key"),
    ({"Q": (1, 2, 3, 8), "K": (1, 2, 3, 8), "V": (1, 2, 3, 8), "attn_mask": (3, 4)}, {},
     "attn_mask covers 4 keys"),
], ids=["mode", "mode0-softcap", "heads", "gqa", "ranks", "past", "mask"])
def test_refused_with_a_reason(ctx, inputs, attrs, reason: str) -> None:
    arrays = {n: np.zeros(s, np.float32) for n, s in inputs.items()}
    with pytest.raises(VkumdError, match=reason):
        vkumd.onnx.load(node_model(arrays, 4, **attrs), ctx=ctx)(**arrays)
    # the context still runs the plain node afterwards
    rng = np.random.default_rng()
    q = _random(rng, 1, 2, 3, 8)
    (y,), _ = run(ctx, {"Q": q, "K": q, "V": q})
    assert rel_error(y, attention_float64(q, q, q)[0]) < 1e-5


def test_symbolic_sequence_lengths(ctx) -> None:
    # An exporter's dynamic axes: the sequence lengths are symbols, known per call; a mask
    # over all the keys and no causal frontier need no size at import.
    q_info = helper.make_tensor_value_info("Q", T.FLOAT, [2, "seq", 4 * 8])
    k_info = helper.make_tensor_value_info("K", T.FLOAT, [2, "keys", 2 * 8])
    v_info = helper.make_tensor_value_info("V", T.FLOAT, [2, "keys", 2 * 8])
    m_info = helper.make_tensor_value_info("attn_mask", T.FLOAT, ["seq", "keys"])
    node = helper.make_node("Attention", ["Q", "K", "V", "attn_mask"], ["Y"], q_num_heads=4,
                            kv_num_heads=2, softcap=3.0)
    graph = helper.make_graph([node], "g", [q_info, k_info, v_info, m_info],
                              [helper.make_tensor_value_info("Y", T.FLOAT, None)])
    model = vkumd.onnx.load(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 23)]), ctx=ctx)
    rng = np.random.default_rng()
    for seq, keys in ((3, 5), (6, 2)):
        q, k, v = _random(rng, 2, seq, 32), _random(rng, 2, keys, 16), _random(rng, 2, keys, 16)
        mask = _random(rng, seq, keys)
        y = model(Q=q, K=k, V=v, attn_mask=mask)["Y"]
        want = attention_float64(q, k, v, mask, heads=4, kv_heads=2, softcap=3.0)[0]
        assert y.shape == want.shape and rel_error(y, want) < 1e-5
