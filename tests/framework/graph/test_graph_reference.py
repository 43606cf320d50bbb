"""The float64 reference evaluator against numpy written out directly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vkumd.errors import VkumdValueError
from vkumd.framework.graph import GraphBuilder, evaluate

rng = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def test_transformer_block_pieces() -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", "seq", 16))
    wd = f32(32, 16)
    bd = f32(32)
    g = f32(16)
    w = b.weight("w", wd)
    bias = b.weight("bias", bd)
    gamma = b.weight("gamma", g)
    h = b.matmul(x, w, bias=bias, activation="gelu", trans_b=True, alpha=0.5)
    y = b.layer_norm(b.reshape(b.sum(b.reshape(h, ("batch", "seq", 2, 16))), ("batch", "seq",
                                                                               2)), eps=1e-5)
    z = b.rms_norm(x, gamma, eps=1e-6)
    b.output(y, z)
    xd = f32(2, 3, 16).astype(np.float64)
    got_y, got_z = evaluate(b.build(), {"x": xd})
    pre = 0.5 * xd @ wd.T.astype(np.float64) + bd
    erf = np.vectorize(math.erf)
    act = 0.5 * pre * (1 + erf(pre / math.sqrt(2)))
    s = act.reshape(2, 3, 2, 16).sum(-1)
    want_y = (s - s.mean(-1, keepdims=True)) / np.sqrt(s.var(-1, keepdims=True) + 1e-5)
    want_z = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + 1e-6) * g
    np.testing.assert_allclose(got_y, want_y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got_z, want_z, rtol=1e-12)


def test_attention_matches_a_naive_loop() -> None:
    b = GraphBuilder()
    q = b.input("q", ("batch", 4, "seq", 8))
    k = b.input("k", ("batch", 2, "kv", 8))
    v = b.input("v", ("batch", 2, "kv", 8))
    lengths = b.input("lengths", ("batch",), "int32")
    b.output(b.attention(q, k, v, causal=True, key_lengths=lengths))
    qd, kd, vd = f32(2, 4, 3, 8), f32(2, 2, 5, 8), f32(2, 2, 5, 8)
    ld = np.array([4, 1], np.int32)
    (got,) = evaluate(b.build(), {"q": qd, "k": kd, "v": vd, "lengths": ld})
    want = np.zeros((2, 4, 3, 8))
    for bi in range(2):
        for h in range(4):
            for i in range(3):
                keys = [j for j in range(5) if j <= i + 2 and j < ld[bi]]
                if not keys:
                    continue
                s = np.array([qd[bi, h, i].astype(np.float64) @ kd[bi, h // 2, j] for j in keys])
                p = np.exp(s / math.sqrt(8) - (s / math.sqrt(8)).max())
                want[bi, h, i] = (p / p.sum()) @ vd[bi, h // 2, keys].astype(np.float64)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_softmax_masked_rows_are_zero() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    m = b.input("m", (2, 1))
    b.output(b.softmax(x, scale=2.0, mask=m))
    xd = f32(2, 3)
    md = np.array([[0.0], [-np.inf]], np.float32)
    (got,) = evaluate(b.build(), {"x": xd, "m": md})
    row = 2.0 * xd[0].astype(np.float64)
    e = np.exp(row - row.max())
    np.testing.assert_allclose(got[0], e / e.sum(), rtol=1e-12)
    assert np.array_equal(got[1], np.zeros(3))


def test_integer_ops_layout_and_casts() -> None:
    b = GraphBuilder()
    a = b.input("a", (4,), "int32")
    c = b.input("c", (4,), "int32")
    x = b.input("x", (2, 3))
    ids = b.input("ids", (3,), "int32")
    table = b.weight("table", np.arange(8, dtype=np.float32).reshape(4, 2))
    b.output(b.div(a, c, rounding="floor"), b.div(a, c, rounding="trunc"),
             b.cast(b.scale(x, 1000.0), "int32"), b.cast(x, "float16"),
             b.embedding(ids, table), b.concat([x, x], axis=0), b.slice(x, 1, 1, None),
             b.where(b.ge(x, 0.0), x, b.scale(x, 0.1)), b.permute(x, (1, 0)))
    ad, cd = np.array([7, -7, 5, 3], np.int32), np.array([2, 2, 0, -2], np.int32)
    xd = f32(2, 3)
    out = evaluate(b.build(), {"a": ad, "c": cd, "x": xd, "ids": np.array([3, -1, 9], np.int32)})
    assert out[0].tolist() == [3, -4, 0, -2]
    assert out[1].tolist() == [3, -3, 0, -1]
    assert np.array_equal(out[2], np.trunc(xd.astype(np.float64) * 1000))
    assert np.array_equal(out[3], xd.astype(np.float16).astype(np.float64))
    assert out[4].tolist() == [[6, 7], [0, 0], [0, 0]]
    assert np.array_equal(out[5], np.concatenate([xd, xd]))
    assert np.array_equal(out[6], xd[:, 1:])
    np.testing.assert_allclose(out[7], np.where(xd >= 0, xd, xd * np.float64(0.1)),
                               rtol=1e-15)
    assert np.array_equal(out[8], xd.T)


def test_inputs_are_rounded_to_their_dtype_and_shapes_checked() -> None:
    b = GraphBuilder()
    x = b.input("x", ("n", 2), "float16")
    b.output(b.relu(x))
    g = b.build()
    xd = np.array([[0.1, -1.0]])
    (got,) = evaluate(g, {"x": xd})
    assert got[0, 0] == np.float64(np.float16(0.1))
    with pytest.raises(VkumdValueError, match="input 'x' has shape \\(3,\\)"):
        evaluate(g, {"x": np.zeros(3)})
    with pytest.raises(VkumdValueError, match="input 'x' is missing"):
        evaluate(g, {})


def test_keep_returns_every_value() -> None:
    b = GraphBuilder()
    x = b.input("x", (2,))
    y = b.relu(x)
    b.output(b.scale(y, 2.0))
    values = evaluate(b.build(), {"x": np.array([-1.0, 2.0], np.float32)}, keep=True)
    assert isinstance(values, dict) and values[y.id].tolist() == [0.0, 2.0]


def test_generic_op_pads_absent_optional_inputs() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    y = b.op("softmax", x, scale=2.0)
    b.output(y)
    g = b.build()
    assert len(g.nodes[0].inputs) == 2 and "softmax(%0) {scale=2.0}" in str(g)
    (got,) = evaluate(g, {"x": np.zeros((2, 3), np.float32)})
    np.testing.assert_allclose(got, np.full((2, 3), 1 / 3), rtol=1e-15)
