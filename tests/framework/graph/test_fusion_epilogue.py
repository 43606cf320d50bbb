"""GEMM epilogue fusion: which ops after a matmul join it, in which order, and that the fused
matmul (run on the device by ``vkumd.ops.matmul``) matches the original graph's float64
reference."""

from __future__ import annotations

import numpy as np
from fusion_checks import feeds_for, ops_of, same_reference

from vkumd.framework import ops
from vkumd.framework.graph import PASSES, GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.fusion_epilogue import fuse_epilogue
from vkumd.framework.graph.passes import FUSION
from vkumd.testing.numerics import poisoned, rel_error

M, K, N = 5, 7, 6


def layer(batch: tuple = ()) -> tuple[GraphBuilder, object, object, object, object]:
    b = GraphBuilder()
    x = b.input("x", (*batch, M, K))
    w = b.input("w", (N, K))
    bias = b.input("bias", (N,))
    res = b.input("res", (*batch, M, N))
    return b, x, w, bias, res


def test_scale_bias_activation_residual_fuse_in_order() -> None:
    b, x, w, bias, res = layer()
    y = b.matmul(x, w, trans_b=True, alpha=2.0)
    y = b.add(res, b.gelu(b.add(b.scale(y, 0.25), bias)))
    b.output(y)
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul"]
    node = fused.nodes[0]
    assert node.inputs == [fused.inputs[0], fused.inputs[1], fused.inputs[2], fused.inputs[3]]
    assert node.attrs == {"trans_b": True, "alpha": 0.5, "activation": "gelu"}
    same_reference(g, fused)


def test_a_scale_after_the_activation_stays() -> None:
    b, x, w, bias, res = layer()
    b.output(b.scale(b.relu(b.matmul(x, w, trans_b=True)), 3.0))
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul", "scale"]
    assert fused.nodes[0].attrs["activation"] == "relu"
    same_reference(g, fused)


def test_a_scale_after_the_bias_and_a_bias_after_the_activation_stay() -> None:
    b, x, w, bias, res = layer()
    scaled = b.scale(b.add(b.matmul(x, w, trans_b=True), bias), 0.5)
    late_bias = b.add(b.silu(b.matmul(x, w, trans_b=True)), bias)
    b.output(scaled, late_bias)
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul", "scale", "matmul", "add"]
    assert fused.nodes[0].inputs[2] is fused.inputs[2] and "alpha" not in fused.nodes[0].attrs
    assert fused.nodes[2].attrs["activation"] == "silu" and fused.nodes[2].inputs[2] is None
    same_reference(g, fused)


def test_an_intermediate_with_another_reader_ends_the_epilogue() -> None:
    b, x, w, bias, res = layer()
    pre = b.add(b.matmul(x, w, trans_b=True), bias)
    b.output(b.gelu(pre), b.softmax(pre))
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul", "gelu", "softmax"]
    assert fused.nodes[0].inputs[2] is fused.inputs[2]
    same_reference(g, fused)


def test_a_graph_output_is_not_fused_away() -> None:
    b, x, w, bias, res = layer()
    y = b.matmul(x, w, trans_b=True)
    b.output(y, b.relu(y))
    g = b.build()
    assert ops_of(fuse_epilogue(g)) == ["matmul", "relu"]


def test_mul_by_a_constant_and_a_rows_residual_under_a_batch() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, M, K))
    w = b.input("w", (K, N))
    res = b.input("res", (M, N))
    y = b.add(b.mul(b.matmul(x, w), 0.125), res)
    b.output(y)
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul"]
    assert fused.nodes[0].attrs == {"alpha": 0.125}
    assert fused.nodes[0].inputs[3] is fused.inputs[2]
    same_reference(g, fused)


def test_shapes_that_would_grow_and_other_ops_stay() -> None:
    b = GraphBuilder()
    x = b.input("x", (M, K))
    w = b.input("w", (K, N))
    big = b.input("big", (3, M, N))
    bias2d = b.input("bias2d", (1, N))
    b.output(b.add(b.matmul(x, w), big), b.add(b.matmul(x, w), bias2d),
             b.sub(b.matmul(x, w), bias2d))
    g = b.build()
    fused = fuse_epilogue(g)
    assert ops_of(fused) == ["matmul", "add", "matmul", "add", "matmul", "sub"]


def test_the_fused_matmul_runs_on_the_device(ctx) -> None:
    b, x, w, bias, res = layer(batch=(3,))
    y = b.matmul(x, w, trans_b=True)
    b.output(b.add(b.gelu_tanh(b.add(b.scale(y, 0.5), bias)), res))
    g = b.build()
    feeds = feeds_for(g, seed=3)
    want = evaluate(g, feeds)[0]
    node = fuse_epilogue(g).nodes[0]
    t = {k: ctx.tensor(v) for k, v in feeds.items()}
    out = poisoned(ctx, want.shape)
    ops.matmul(t["x"], t["w"], bias=t["bias"], residual=t["res"], trans_b=True, out=out,
               alpha=node.attrs["alpha"], activation=node.attrs["activation"])
    got = out.numpy().astype(np.float64)
    assert rel_error(got, want) < 1e-5


def test_registered_before_elementwise_fusion() -> None:
    assert PASSES["epilogue_fusion"] is fuse_epilogue
    assert FUSION.index("epilogue_fusion") < FUSION.index("elementwise_fusion")
    b, x, w, bias, res = layer()
    b.output(b.scale(b.relu(b.add(b.matmul(x, w, trans_b=True), bias)), 2.0))
    g = b.build()
    assert ops_of(run_passes(g)) == ["matmul", "scale"]
    assert ops_of(run_passes(g, disable=["epilogue_fusion"])) == ["matmul", "fused_elementwise"]
