"""Convolution epilogue fusion: which ops after a conv2d join it, in which order, that the
fused graph's float64 reference is the original's, and that the compiled graph gives the
same results with the pass on and off (``VKUMD_DISABLE_PASSES``) in fewer launches."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_checks import close_reference, feeds_for, ops_of, same_reference

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, run_passes
from vkumd.framework.graph.fusion_conv_epilogue import fuse_conv_epilogue
from vkumd.framework.graph.passes import FUSION, PIPELINE
from vkumd.testing.numerics import rel_error

SHAPE = (2, 3, 9, 11)
C_OUT = 5


def layer(bias: bool = True, kernel: int = 3):
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv_layer")
    x = b.input("x", SHAPE)
    res = b.input("res", (SHAPE[0], C_OUT, SHAPE[2], SHAPE[3]))
    w = b.constant(rng.standard_normal((C_OUT, SHAPE[1], kernel, kernel)).astype(np.float32))
    cb = b.constant(rng.standard_normal(C_OUT).astype(np.float32)) if bias else None
    pad = kernel // 2
    y = b.op("conv2d", x, w, cb, pads=(pad, pad, pad, pad))
    return b, y, res, rng


def test_bias_activation_residual_fuse() -> None:
    """MobileNet's order: channel bias, activation, then the residual after it."""
    b, y, res, rng = layer()
    y = b.add(y, b.constant(rng.standard_normal((C_OUT, 1, 1)).astype(np.float32)))
    y = b.add(res, b.op("clip", y, min=0.0, max=6.0))
    b.output(y)
    g = b.build()
    fused = fuse_conv_epilogue(g)
    assert ops_of(fused) == ["conv2d"]
    node = fused.nodes[0]
    assert node.attrs["activation"] == "clip" and node.attrs["activation_params"] == (0.0, 6.0)
    assert node.inputs[3] is fused.inputs[1] and not node.attrs.get("residual_first", False)
    close_reference(g, fused)


def test_residual_before_the_activation() -> None:
    """ResNet's order: relu(conv + residual), and a bias add into an absent bias."""
    b, y, res, rng = layer(bias=False)
    y = b.add(y, b.constant(rng.standard_normal((1, C_OUT, 1, 1)).astype(np.float32)))
    b.output(b.relu(b.add(y, res)))
    g = b.build()
    fused = fuse_conv_epilogue(g)
    assert ops_of(fused) == ["conv2d"]
    node = fused.nodes[0]
    assert node.attrs["activation"] == "relu" and node.attrs["residual_first"] is True
    assert node.inputs[2] is not None
    close_reference(g, fused)


@pytest.mark.parametrize("act", ["hardswish", "leaky_relu", "sigmoid", "hard_sigmoid"])
def test_each_activation(act: str) -> None:
    b, y, res, rng = layer()
    b.output(b.op(act, y))
    g = b.build()
    fused = fuse_conv_epilogue(g)
    assert ops_of(fused) == ["conv2d"] and fused.nodes[0].attrs["activation"] == act
    same_reference(g, fused)


def test_affine_before_the_activation() -> None:
    """PP-OCRv4's ``act(conv * a + b)``: ``scale``, ``mul`` by a one-value or per-channel
    constant and ``add`` of a one-value constant go into the weights and bias."""
    b, y, res, rng = layer()
    y = b.add(b.scale(y, 1.7), np.float32(0.3))
    y = b.mul(y, b.constant(rng.standard_normal((1, C_OUT, 1, 1)).astype(np.float32)))
    y = b.add(b.mul(y, np.float32(-0.8)), b.constant(np.ones((1, 1, 1, 1), np.float32)))
    b.output(b.hardswish(y))
    g = b.build()
    fused = fuse_conv_epilogue(g)
    assert ops_of(fused) == ["conv2d"] and fused.nodes[0].attrs["activation"] == "hardswish"
    close_reference(g, fused)
    b, y, res, rng = layer()
    b.output(b.scale(b.relu(y), 2.0))  # a factor after the activation stays
    assert ops_of(fuse_conv_epilogue(b.build())) == ["conv2d", "scale"]


def test_what_does_not_fuse() -> None:
    """A value read twice, a graph output, a second activation, a bias after the activation,
    a per-row (not per-channel) constant and an op the epilogue lacks all stay."""
    b, y, res, rng = layer()
    r = b.relu(y)
    b.output(r, b.add(y, res))  # y is read twice
    assert ops_of(fuse_conv_epilogue(b.build())) == ["conv2d", "relu", "add"]
    b, y, res, rng = layer()
    b.output(y, b.relu(y))  # y is an output
    assert ops_of(fuse_conv_epilogue(b.build())) == ["conv2d", "relu"]
    b, y, res, rng = layer()
    late = b.add(b.relu(b.relu(y)), b.constant(np.ones((C_OUT, 1, 1), np.float32)))
    b.output(late)
    g = b.build()
    fused = fuse_conv_epilogue(g)
    assert ops_of(fused) == ["conv2d", "relu", "add"]
    same_reference(g, fused)
    b, y, res, rng = layer()
    b.output(b.tanh(b.add(y, b.constant(np.ones((SHAPE[3],), np.float32)))))
    assert ops_of(fuse_conv_epilogue(b.build())) == ["conv2d", "add", "tanh"]


def test_in_the_pipeline() -> None:
    assert FUSION.index("conv_epilogue_fusion") < FUSION.index("elementwise_fusion")
    assert PIPELINE.index("conv_bn_folding") < PIPELINE.index("conv_epilogue_fusion")


def test_batch_norm_does_not_fold_into_a_fused_conv() -> None:
    """conv_bn_folding run after the epilogue fusion leaves an activated conv's norm."""
    b, y, res, rng = layer()
    ones = b.constant(np.ones(C_OUT, np.float32))
    b.output(b.op("batch_norm", b.relu(y), ones, ones, ones, ones))
    g = run_passes(b.build(), ["conv_epilogue_fusion", "conv_bn_folding"])
    assert ops_of(g) == ["conv2d", "batch_norm"]


@pytest.mark.parametrize("kernel", [1, 3])
def test_compiled_with_and_without_the_pass(ctx, monkeypatch: pytest.MonkeyPatch,
                                            kernel: int) -> None:
    """The compiled graph's results with the pass equal those without it, in fewer launches:
    a 1x1 (the GEMM) and a 3x3 (im2col + GEMM) conv, bias, relu6, residual, then a
    depthwise conv with hardswish."""
    b, y, res, rng = layer(kernel=kernel)
    y = b.add(b.op("clip", y, min=0.0, max=6.0), res)
    dw = b.constant(rng.standard_normal((C_OUT, 1, 3, 3)).astype(np.float32))
    b.output(b.hardswish(b.op("conv2d", y, dw, None, pads=(1, 1, 1, 1), groups=C_OUT)))
    g = b.build()
    feeds = feeds_for(g, seed=1)
    fused = run_passes(g)
    assert ops_of(fused) == ["conv2d", "conv2d"]
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", "conv_epilogue_fusion")
    plain = run_passes(g)
    assert "conv2d" in ops_of(plain) and len(plain.nodes) > 2
    monkeypatch.delenv("VKUMD_DISABLE_PASSES")
    with_pass = CompiledGraph(fused, ctx)
    without = CompiledGraph(plain, ctx)
    got = with_pass(**feeds)[0].numpy().astype(np.float64)
    want = without(**feeds)[0].numpy().astype(np.float64)
    assert not np.isnan(got).any()
    assert rel_error(got, want) < 1e-6
    assert with_pass.buckets()[0].launches < without.buckets()[0].launches
