"""Shape inference of every op, and its errors, each naming the node."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.framework.graph import (
    GraphBuilder,
    GraphError,
    GraphTypeError,
    UnsupportedOpError,
    op_info,
    supported_ops,
    sym,
)
from vkumd.framework.graph.ir import Value

B, S, KV = sym("batch"), sym("seq"), sym("kv")


def builder() -> GraphBuilder:
    return GraphBuilder("shapes")


def shape_of(v: Value) -> tuple:
    return tuple(v.shape)


def test_every_listed_op_has_a_rule() -> None:
    expected = {"matmul", "attention", "layer_norm", "rms_norm", "softmax", "add", "sub", "mul",
                "div", "scale", "cast", "gelu", "gelu_tanh", "relu", "silu", "sum", "mean",
                "max", "transpose", "permute", "reshape", "embedding", "concat", "split",
                "slice", "where", "eq", "ne", "lt", "le", "gt", "ge",
                "fused_elementwise", "add_layer_norm",  # the fusion passes' ops
                "exp", "sqrt", "tanh", "erf", "sigmoid", "hardswish"}
    # The registry may hold more (each declared with its rule); these must stay.
    assert expected <= set(supported_ops())
    assert all(callable(op_info(name).rule) and callable(op_info(name).reference)
               for name in supported_ops())


def test_unsupported_op_names_node_and_lists_ops() -> None:
    b = builder()
    x = b.input("x", (3,))
    with pytest.raises(UnsupportedOpError, match=r"node %1 = deform_conv2d \(stem\): op "
                                                 r"'deform_conv2d' is not supported; "
                                                 r"supported ops: abs, acos, .*, add, "
                                                 r"add_layer_norm, .*argmax, .*, attention"):
        b.op("deform_conv2d", x, label="stem")


def test_matmul_shapes() -> None:
    b = builder()
    x = b.input("x", ("batch", "seq", 384))
    w = b.weight("w", np.ones((1536, 384), np.float32))
    assert shape_of(b.matmul(x, w, trans_b=True)) == (B, S, 1536)
    xt = b.input("xt", ("batch", 384, "seq"))
    w2 = b.weight("w2", np.ones((384, 8), np.float32))
    assert shape_of(b.matmul(xt, w2, trans_a=True)) == (B, S, 8)
    # Batched both sides: batch shapes must be equal.
    k = b.input("k", ("batch", 12, "seq", 32))
    q = b.input("q", ("batch", 12, "seq", 32))
    assert shape_of(b.matmul(q, k, trans_b=True)) == (B, 12, S, S)
    # A 2-D left side shared by a batched right side.
    m = b.input("m", (5, 32))
    assert shape_of(b.matmul(m, k, trans_b=True)) == (B, 12, 5, S)
    i8 = b.input("i8", (4, 8), "int8")
    w8 = b.weight("w8", np.ones((8, 2), np.int8))
    assert b.matmul(i8, w8).dtype.name == "int32"


def test_matmul_errors_name_the_node() -> None:
    b = builder()
    x = b.input("x", ("batch", "seq", 384))
    w = b.weight("w", np.ones((1536, 384), np.float32))
    with pytest.raises(GraphError, match=r"node %2 = matmul: inner dimensions differ: "
                                         r"op\(a\) is seq x 384 and op\(b\) is 1536 x 384"):
        b.matmul(x, w)
    bias = b.weight("bias", np.ones(384, np.float32))
    with pytest.raises(GraphError, match=r"bias has shape \[384\]; it must be \[1536\]"):
        b.matmul(x, w, bias=bias, trans_b=True)
    with pytest.raises(GraphError, match="activation='tanh' is unknown"):
        b.matmul(x, w, trans_b=True, activation="tanh")
    k = b.input("k", ("batch", 12, "seq", 32))
    q = b.input("q", (2, 12, "seq", 32))
    with pytest.raises(GraphError, match=r"batch dimensions \[2, 12\] and \[batch, 12\]"):
        b.matmul(q, k, trans_b=True)
    h = b.input("h", ("batch", "seq", 384), "float16")
    with pytest.raises(GraphTypeError, match="operands must share a dtype, got a float16, b "
                                             "float32"):
        b.matmul(h, w, trans_b=True)
    i8 = b.input("i8", (4, 8), "int8")
    w8 = b.weight("w8", np.ones((8, 2), np.int8))
    with pytest.raises(GraphError, match="int8 inputs give the exact int32 product only"):
        b.matmul(i8, w8, alpha=2.0)
    r = b.input("r", ("seq", 1536))
    assert shape_of(b.matmul(x, w, trans_b=True, residual=r)) == (B, S, 1536)
    bad = b.input("bad", ("batch", 1536))
    with pytest.raises(GraphError, match=r"residual has shape \[batch, 1536\]"):
        b.matmul(x, w, trans_b=True, residual=bad)


def test_broadcasting_elementwise() -> None:
    b = builder()
    x = b.input("x", ("batch", "seq", 384))
    bias = b.input("bias", (384,))
    col = b.input("col", ("batch", "seq", 1))
    assert shape_of(b.add(x, bias)) == (B, S, 384)
    assert shape_of(b.mul(x, col)) == (B, S, 384)
    assert shape_of(b.sub(col, bias)) == (B, S, 384)
    assert b.lt(x, bias).dtype.name == "bool"
    cond = b.gt(x, col)
    assert shape_of(b.where(cond, x, 0.0)) == (B, S, 384)
    with pytest.raises(GraphError, match=r"node %\d+ = add: shapes \[batch, seq, 384\], "
                                         r"\[kv, 384\] do not broadcast: axis -2 has seq and kv; "
                                         r".*assume_equal\('kv', 'seq'\)"):
        b.add(x, b.input("y", ("kv", 384)))
    with pytest.raises(GraphError, match="axis -1 has 384 and 5"):
        b.add(x, b.input("z", (5,)))
    with pytest.raises(GraphTypeError, match="where: cond is float32"):
        b.where(x, x, x)
    with pytest.raises(GraphTypeError, match="node %.* = add: operands must share"):
        b.add(x, b.input("i", (384,), "int32"))


def test_symbolic_conflict_needs_a_declaration() -> None:
    b = builder()
    s = b.input("s", ("batch", "seq"))
    k = b.input("k", ("batch", "kv"))
    with pytest.raises(GraphError, match="symbols are distinct sizes unless declared equal"):
        b.mul(s, k)
    b.assume_equal("kv", "seq")
    assert shape_of(b.mul(s, k)) == (B, S)


def test_unary_cast_scale_div() -> None:
    b = builder()
    x = b.input("x", ("n", 4))
    for op in ("gelu", "gelu_tanh", "relu", "silu"):
        assert getattr(b, op)(x).type == x.type
    assert b.cast(x, "float16").dtype.name == "float16"
    assert b.scale(x, 0.5).type == x.type
    ints = b.input("ints", (4,), "int32")
    with pytest.raises(GraphTypeError, match="relu: x is int32"):
        b.relu(ints)
    with pytest.raises(GraphTypeError, match="int32 true division"):
        b.div(ints, ints)
    assert b.div(ints, ints, rounding="floor").dtype.name == "int32"
    with pytest.raises(GraphError, match="rounding='up'"):
        b.div(x, x, rounding="up")
    assert b.cast(x, "int8").dtype.name == "int8"
    with pytest.raises(GraphTypeError, match="bool to float8_e4m3fn is not supported"):
        b.cast(b.input("flags", (4,), "bool"), "float8_e4m3fn")
    with pytest.raises(GraphTypeError, match="cast converts to"):
        b.cast(x, "complex64")
    with pytest.raises(GraphError, match="cast needs the attribute dtype"):
        b.op("cast", x)
    with pytest.raises(GraphError, match="scale has no attribute beta; its attributes: alpha"):
        b.op("scale", x, beta=1.0)
    with pytest.raises(GraphError, match=r"takes inputs \(a, b\), got 1"):
        b.op("add", x)


def test_row_ops() -> None:
    b = builder()
    x = b.input("x", ("batch", "seq", 384))
    g = b.weight("g", np.ones(384, np.float32))
    assert b.layer_norm(x, g, g, eps=1e-12).type == x.type
    assert b.rms_norm(x, g).type == x.type
    assert shape_of(b.sum(x)) == (B, S)
    assert shape_of(b.mean(x, keepdims=True)) == (B, S, 1)
    assert shape_of(b.max(x)) == (B, S)
    scores = b.input("scores", ("batch", 12, "seq", "seq"))
    mask = b.input("mask", ("batch", 1, 1, "seq"))
    assert b.softmax(scores, scale=0.125, mask=mask).type == scores.type
    with pytest.raises(GraphError, match=r"layer_norm: weight has shape \[5\]; it must be "
                                         r"\[384\]"):
        b.layer_norm(x, b.weight("g5", np.ones(5, np.float32)))
    with pytest.raises(GraphError, match="mask of shape .* does not broadcast to x's shape"):
        b.softmax(mask, mask=scores)
    assert b.op("softmax", x, axis=0).type == x.type
    with pytest.raises(GraphError, match="a mask is taken with the last axis only"):
        b.op("softmax", scores, mask, axis=0)
    with pytest.raises(GraphError, match="eps must be >= 0"):
        b.layer_norm(x, eps=-1.0)
    with pytest.raises(GraphTypeError, match="keepdims must be True or False"):
        b.op("sum", x, keepdims=1)


def test_attention() -> None:
    b = builder()
    q = b.input("q", ("batch", 12, "seq", 64))
    k = b.input("k", ("batch", 4, "kv", 64))
    lengths = b.input("lengths", ("batch",), "int32")
    mask = b.input("mask", ("batch", 1, 1, "kv"))
    out = b.attention(q, k, k, causal=True, key_lengths=lengths, attn_mask=mask)
    assert out.type == q.type
    with pytest.raises(GraphError, match="12 query heads are not a multiple of 5"):
        b.attention(q, b.input("k5", ("batch", 5, "kv", 64)), b.input("v5", ("batch", 5, "kv",
                                                                              64)))
    with pytest.raises(GraphError, match="q has head_dim 64 and k/v have 32"):
        k32 = b.input("k32", ("batch", 4, "kv", 32))
        b.attention(q, k32, k32)
    with pytest.raises(GraphError, match="must be 4-D"):
        b.attention(b.input("q3", ("batch", "seq", 64)), k, k)
    with pytest.raises(GraphError, match="key_lengths must be int32"):
        b.attention(q, k, k, key_lengths=b.input("badlen", ("batch",), "float32"))


def test_layout_ops() -> None:
    b = builder()
    x = b.input("x", ("batch", "seq", 384))
    assert shape_of(b.transpose(x, 0, -1)) == (384, S, B)
    assert shape_of(b.permute(x, (1, 0, 2))) == (S, B, 384)
    heads = b.reshape(x, ("batch", "seq", 12, -1))
    assert shape_of(heads) == (B, S, 12, 32)
    flat = b.reshape(x, (-1, 384))
    assert shape_of(flat) == (B * S, 384)
    assert shape_of(b.reshape(flat, ("batch", "seq", 384))) == (B, S, 384)
    assert shape_of(b.reshape(x, (-1,))) == (B * S * 384,)
    with pytest.raises(GraphError, match="cannot solve -1"):
        b.reshape(x, ("batch", 7, -1))
    with pytest.raises(GraphError, match=r"\[batch, seq, 384\] has 384\*batch\*seq elements"):
        b.reshape(x, ("batch", "seq", 12, 30))
    with pytest.raises(GraphError, match="more than one -1"):
        b.reshape(x, (-1, -1))
    with pytest.raises(GraphError, match="not a permutation"):
        b.permute(x, (0, 0, 1))
    ids = b.input("ids", ("batch", "seq"), "int32")
    table = b.weight("table", np.ones((100, 16), np.float32))
    assert shape_of(b.embedding(ids, table)) == (B, S, 16)
    with pytest.raises(GraphTypeError, match="ids are float32; they must be int32"):
        b.embedding(x, table)


def test_concat_split_slice() -> None:
    b = builder()
    past = b.input("past", ("batch", 4, "past", 64))
    new = b.input("new", ("batch", 4, 1, 64))
    cat = b.concat([past, new], axis=2)
    assert shape_of(cat) == (B, 4, sym("past") + 1, 64)
    with pytest.raises(GraphError, match=r"xs\[1\] has shape .* off axis 1"):
        b.concat([past, new], axis=1)
    x = b.input("x", ("batch", 1152))
    parts = b.split(x, (384, 768), axis=1)
    assert [shape_of(p) for p in parts] == [(B, 384), (B, 768)]
    with pytest.raises(GraphError, match="do not add up"):
        b.split(x, (384, 384), axis=1)
    assert shape_of(b.slice(x, 1, 0, 100)) == (B, 100)
    assert shape_of(b.slice(x, 1, -10)) == (B, 10)
    assert shape_of(b.slice(x, 1, 0, None, 3)) == (B, 384)
    seq = b.input("s", ("seq", 8))
    assert shape_of(b.slice(seq, 0, 1)) == (S - 1, 8)
    assert shape_of(b.slice(seq, 0, -1)) == (1, 8)
    with pytest.raises(GraphError, match="step 2 along symbolic axis seq"):
        b.slice(seq, 0, 0, None, 2)
    with pytest.raises(GraphError, match="axis 3 is out of range"):
        b.slice(seq, 3)
    with pytest.raises(GraphError, match="concat's inputs xs may not be absent"):
        b.op("concat", seq, None, axis=0)
    assert shape_of(b.op("slice", seq, axis=0, start=None, stop=2)) == (2, 8)
