"""Batch normalisation folded into the convolution before it: when the pass folds and when it
must not, the float64 reference unchanged, and the folded graph on the device against the
unfolded graph's reference (odd channels, strides, groups, poisoned outputs)."""

from __future__ import annotations

import numpy as np
import pytest
from execute_checks import check_against_reference
from fusion_checks import ops_of

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.fusion_conv_bn import fold_batch_norm_into_conv
from vkumd.framework.graph.passes import CLEANUP


def conv_bn(rng: np.random.Generator, c_in: int = 5, c_out: int = 7, groups: int = 1,
            bias: bool = True, var: np.ndarray | None = None, dtype: str = "float32",
            stride: tuple[int, int] = (1, 1), shared: bool = False) -> GraphBuilder:
    b = GraphBuilder()
    x = b.input("x", (2, c_in, 9, 11), dtype)
    w = b.weight("w", rng.standard_normal((c_out, c_in // groups, 3, 3)).astype(dtype))
    bv = b.weight("b", rng.standard_normal(c_out).astype(dtype)) if bias else None
    y = b.op("conv2d", x, w, bv, stride=stride, pads=(1, 0, 2, 1), groups=groups)
    stats = [rng.uniform(0.5, 2.0, c_out), rng.standard_normal(c_out),
             rng.standard_normal(c_out), rng.uniform(0.1, 3.0, c_out) if var is None else var]
    gamma, beta, mean, variance = (b.weight(n, s.astype(dtype)) for n, s in
                                   zip(("gamma", "beta", "mean", "var"), stats, strict=True))
    z = b.op("batch_norm", y, gamma, beta, mean, variance, eps=1e-3)
    b.output(b.relu(z), *((y,) if shared else ()))
    return b


def feeds(rng: np.random.Generator, dtype: str = "float32") -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal((2, 5, 9, 11)).astype(dtype)}


@pytest.mark.parametrize("bias", [True, False])
def test_the_pair_becomes_one_convolution(bias: bool) -> None:
    rng = np.random.default_rng()
    g = conv_bn(rng, bias=bias).build()
    folded = fold_batch_norm_into_conv(g)
    assert ops_of(folded) == ["conv2d", "relu"]
    conv = folded.nodes[0]
    assert conv.inputs[0] is folded.inputs[0] and conv.inputs[2] is not None
    assert conv.attrs == g.nodes[0].attrs
    folded.check()
    f = feeds(rng)
    want, got = evaluate(g, f)[0], evaluate(folded, f)[0]
    # The folded weights are rounded once to float32 where the original chain was exact.
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
    assert "conv_bn_folding" in CLEANUP
    # The pipeline then fuses the relu into the folded convolution's epilogue.
    assert ops_of(run_passes(g, disable=["conv_epilogue_fusion"])) == ["conv2d", "relu"]
    assert ops_of(run_passes(g)) == ["conv2d"]
    assert "batch_norm" in ops_of(run_passes(g, disable=["conv_bn_folding"]))


def test_what_must_stay_unfolded() -> None:
    rng = np.random.default_rng()
    # The convolution's result is also a graph output: it must keep its own value.
    assert "batch_norm" in ops_of(fold_batch_norm_into_conv(conv_bn(rng, shared=True).build()))
    # A zero variance with eps 0 divides by zero: the kernels keep their own answer.
    b = conv_bn(rng, var=np.zeros(7))
    b.graph.nodes[1].attrs["eps"] = 0.0
    assert "batch_norm" in ops_of(fold_batch_norm_into_conv(b.graph))
    # Statistics that are inputs, not constants.
    b = GraphBuilder()
    x, mean = b.input("x", (1, 3, 5, 5)), b.input("mean", (3,))
    w = b.weight("w", rng.standard_normal((3, 3, 1, 1)).astype(np.float32))
    ones = b.weight("ones", np.ones(3, np.float32))
    b.output(b.op("batch_norm", b.op("conv2d", x, w), ones, ones, mean, ones))
    assert ops_of(fold_batch_norm_into_conv(b.build())) == ["conv2d", "batch_norm"]


@pytest.mark.parametrize(("groups", "stride", "dtype", "tol"), [
    (1, (1, 1), "float32", 1e-5), (5, (2, 1), "float32", 1e-5), (1, (2, 2), "float16", 3e-3)])
def test_the_folded_graph_matches_the_unfolded_reference(ctx, groups: int, stride, dtype: str,
                                                         tol: float) -> None:
    rng = np.random.default_rng()
    c_out = 10 if groups > 1 else 7
    g = conv_bn(rng, c_out=c_out, groups=groups, stride=stride, dtype=dtype).build()
    folded = run_passes(g)
    assert "batch_norm" not in ops_of(folded)
    compiled = CompiledGraph(folded, ctx)
    for _ in range(2):  # recorded, then replayed on fresh data
        check_against_reference(g, compiled, feeds(rng, dtype), tol=tol)
