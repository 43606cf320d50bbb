"""Residual + layer-norm fusion: the pass on hand-written graphs, and the ``add_layer_norm``
kernel it lowers to against the float64 reference (every float type, both load widths,
with and without affine parameters, poisoned outputs, a large common offset)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from fusion_checks import feeds_for, ops_of

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.graph import PASSES, GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.fusion_norm import fuse_add_layer_norm
from vkumd.framework.graph.passes import FUSION
from vkumd.framework.graph.reference import round_to
from vkumd.testing.numerics import rel_error

TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


def block(shape: tuple = (4, 6)) -> tuple[GraphBuilder, object, object, object, object]:
    b = GraphBuilder()
    x, r = b.input("x", shape), b.input("r", shape)
    w, bias = b.input("w", shape[-1:]), b.input("b", shape[-1:])
    return b, x, r, w, bias


def test_add_then_layer_norm_fuses() -> None:
    b, x, r, w, bias = block(("batch", 5, 8))
    b.output(b.layer_norm(b.add(x, r), w, bias, eps=1e-12))
    g = b.build()
    fused = fuse_add_layer_norm(g)
    assert ops_of(fused) == ["add_layer_norm"]
    node = fused.nodes[0]
    assert node.inputs == fused.inputs and node.attrs == {"eps": 1e-12}
    fused.check()
    feeds = feeds_for(g)
    np.testing.assert_array_equal(evaluate(fused, feeds)[0], evaluate(g, feeds)[0])


def test_a_sum_read_elsewhere_or_broadcast_stays() -> None:
    b, x, r, w, bias = block()
    kept = b.add(x, r)
    b.output(b.layer_norm(kept), kept, b.layer_norm(b.add(x, bias)))
    g = b.build()
    assert ops_of(fuse_add_layer_norm(g)) == ["add", "layer_norm", "add", "layer_norm"]


def test_a_matmul_residual_goes_to_the_epilogue_first() -> None:
    b, x, r, w, bias = block()
    wm = b.input("wm", (6, 6))
    b.output(b.layer_norm(b.add(b.matmul(x, wm), r), w, bias),
             b.layer_norm(b.add(b.gelu(x), r)))
    g = b.build()
    assert PASSES["add_norm_fusion"] is fuse_add_layer_norm
    assert FUSION.index("epilogue_fusion") < FUSION.index("add_norm_fusion")
    assert FUSION.index("add_norm_fusion") < FUSION.index("elementwise_fusion")
    assert ops_of(run_passes(g)) == ["matmul", "layer_norm", "gelu", "add_layer_norm"]
    assert "add_layer_norm" not in ops_of(run_passes(g, disable=["add_norm_fusion"]))


@pytest.mark.parametrize("cols", [1, 7, 64, 384])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("affine", [(False, False), (True, False), (True, True)])
def test_add_layer_norm_matches_the_reference(ctx, dtype: str, cols: int, affine) -> None:
    rng = np.random.default_rng(zlib.crc32(repr((dtype, cols, affine)).encode()))
    shape = (3, 5, cols)
    kind = dtypes.dtype(dtype)
    x = round_to(rng.standard_normal(shape) + 20.0, kind)  # an offset the shift must handle
    r = round_to(rng.standard_normal(shape), kind)
    w = round_to(rng.standard_normal(cols), kind) if affine[0] else None
    bias = round_to(rng.standard_normal(cols), kind) if affine[1] else None
    tensor = lambda a: None if a is None else ctx.tensor(a.astype(np.float32), dtype=dtype)  # noqa: E731
    out = ctx.tensor(np.full(shape, np.nan, np.float32), dtype=dtype)
    got = ops.add_layer_norm(tensor(x), tensor(r), tensor(w), tensor(bias), eps=1e-5,
                             out=out).numpy().astype(np.float64)
    s = x + r
    mean = s.mean(-1, keepdims=True)
    want = (s - mean) / np.sqrt(((s - mean) ** 2).mean(-1, keepdims=True) + 1e-5)
    want = want * (1.0 if w is None else w) + (0.0 if bias is None else bias)
    assert not np.isnan(got).any()
    error = rel_error(got, want, floor=1e-30)
    if cols == 1 and bias is None:  # every row is its mean: the result is exactly 0
        np.testing.assert_array_equal(got, 0.0)
    else:
        assert error < TOLERANCE[dtype]


def test_add_layer_norm_refuses_bad_calls(ctx) -> None:
    x = ctx.tensor(np.ones((2, 4), np.float32))
    with pytest.raises(VkumdValueError, match="residual has shape"):
        ops.add_layer_norm(x, ctx.tensor(np.ones((4,), np.float32)))
    with pytest.raises(VkumdTypeError, match="residual is float16"):
        ops.add_layer_norm(x, ctx.tensor(np.ones((2, 4), np.float16)))
    with pytest.raises(VkumdValueError, match="weight has shape"):
        ops.add_layer_norm(x, x, ctx.tensor(np.ones((3,), np.float32)))
    with pytest.raises(VkumdValueError, match="same tensor as an input"):
        ops.add_layer_norm(x, x, out=x)
