"""Input-affine folding alone: ``conv2d(x * a + b)`` without padding reads ``x`` with
adjusted weights and bias and the same float64 result; padded convolutions, non-constant
factors and values read twice keep their affine; and the PP-OCRv4 block (conv, affine,
hard swish, affine, 1x1 conv) compiles to two launches with the same results as without
the passes."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_checks import close_reference, feeds_for, ops_of

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, run_passes
from vkumd.framework.graph.conv_input_affine import fold_input_affine_into_conv
from vkumd.testing.numerics import rel_error

SHAPE = (2, 6, 9, 11)


def _conv(b: GraphBuilder, x, c_out: int, kernel: int, rng, *, groups: int = 1,
          pad: int = 0, bias: bool = True, stride: int = 1):
    w = b.constant(rng.standard_normal((c_out, SHAPE[1] // groups, kernel, kernel))
                   .astype(np.float32))
    cb = b.constant(rng.standard_normal(c_out).astype(np.float32)) if bias else None
    return b.op("conv2d", x, w, cb, pads=(pad,) * 4, groups=groups, stride=(stride, stride))


@pytest.mark.parametrize(("kernel", "groups", "bias", "stride"),
                         [(1, 1, True, 1), (3, 1, False, 2), (3, 3, True, 1), (2, 6, True, 2)])
def test_affine_folds_into_an_unpadded_conv(kernel: int, groups: int, bias: bool,
                                            stride: int) -> None:
    rng = np.random.default_rng(1)
    b = GraphBuilder("affine_conv")
    x = b.input("x", SHAPE)
    z = b.add(b.mul(b.scale(x, 0.7), np.float32(-1.3)), np.float32(0.25))
    b.output(_conv(b, z, 5 if groups == 1 else 6, kernel, rng, groups=groups, bias=bias,
                   stride=stride))
    g = b.build()
    done = fold_input_affine_into_conv(g)
    assert ops_of(done) == ["conv2d"] and done.nodes[0].inputs[0] is done.inputs[0]
    close_reference(g, done)


def test_what_keeps_its_affine() -> None:
    """A padded conv (its border reads zeros, not b), a per-channel factor, a non-constant
    factor and an affine value read twice stay."""
    rng = np.random.default_rng(2)
    b = GraphBuilder("padded")
    x = b.input("x", SHAPE)
    b.output(_conv(b, b.add(x, np.float32(0.5)), 4, 3, rng, pad=1))
    assert ops_of(fold_input_affine_into_conv(b.build())) == ["add", "conv2d"]
    b = GraphBuilder("per_channel")
    x = b.input("x", SHAPE)
    scale = b.constant(rng.standard_normal((1, SHAPE[1], 1, 1)).astype(np.float32))
    b.output(_conv(b, b.mul(x, scale), 4, 1, rng))
    assert ops_of(fold_input_affine_into_conv(b.build())) == ["mul", "conv2d"]
    b = GraphBuilder("runtime")
    x = b.input("x", SHAPE)
    s = b.input("s", (1,))
    b.output(_conv(b, b.mul(x, s), 4, 1, rng))
    assert ops_of(fold_input_affine_into_conv(b.build())) == ["mul", "conv2d"]
    b = GraphBuilder("twice")
    x = b.input("x", SHAPE)
    z = b.scale(x, 2.0)
    b.output(_conv(b, z, 4, 1, rng), z)
    assert ops_of(fold_input_affine_into_conv(b.build())) == ["scale", "conv2d"]


def _ppocr_block(rng):
    """PP-OCRv4's LCNet block: depthwise conv, affine, hard swish written out, affine,
    pointwise conv."""
    b = GraphBuilder("lcnet_block")
    x = b.input("x", SHAPE)
    y = _conv(b, x, 6, 3, rng, groups=6, pad=1)
    y = b.add(b.scale(y, 1.3), np.float32(0.4))
    y = b.div(b.mul(y, b.op("clip", b.add(y, 3.0), min=0.0, max=6.0)), 6.0)
    y = b.add(b.scale(y, 0.6), np.float32(-0.2))
    b.output(_conv(b, y, 7, 1, rng))
    return b.build()


def test_ppocr_block_compiles_to_two_launches(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    g = _ppocr_block(np.random.default_rng(3))
    fused = run_passes(g)
    assert ops_of(fused) == ["conv2d", "conv2d"]
    assert fused.nodes[0].attrs["activation"] == "hardswish"
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", "hardswish_rewrite,conv_input_affine_folding")
    plain = run_passes(g)
    assert len(plain.nodes) > 2
    monkeypatch.delenv("VKUMD_DISABLE_PASSES")
    feeds = feeds_for(g, seed=4)
    with_passes = CompiledGraph(fused, ctx)
    without = CompiledGraph(plain, ctx)
    got = with_passes(**feeds)[0].numpy().astype(np.float64)
    want = without(**feeds)[0].numpy().astype(np.float64)
    assert not np.isnan(got).any()
    assert rel_error(got, want) < 1e-5
    assert with_passes.buckets()[0].launches == 2 < without.buckets()[0].launches
