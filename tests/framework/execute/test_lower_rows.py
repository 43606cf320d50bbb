"""A batched matmul by a shared 2-D matrix is lowered as one GEMM over all rows."""

from __future__ import annotations

import numpy as np

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder


def test_batched_matmul_with_bias_and_residual_joins_rows(ctx) -> None:
    rng = np.random.default_rng(0)
    w = rng.standard_normal((6, 8)).astype(np.float32)
    bias = rng.standard_normal(6).astype(np.float32)
    b = GraphBuilder("rows")
    x = b.input("x", ("batch", "seq", 8))
    r = b.input("r", ("batch", "seq", 6))
    b.output(b.matmul(x, b.weight("w", w), bias=b.weight("b", bias), residual=r,
                      activation="gelu", trans_b=True))
    compiled = CompiledGraph(b.build(), ctx)
    try:
        xs = rng.standard_normal((3, 5, 8)).astype(np.float32)
        rs = rng.standard_normal((3, 5, 6)).astype(np.float32)
        got = compiled(x=xs, r=rs)[0].numpy()
        assert compiled.buckets()[0].bindings == {"batch": 4, "seq": 8}
    finally:
        compiled.release()
    from math import erf
    h = xs.astype(np.float64) @ w.T + bias
    want = 0.5 * h * (1 + np.vectorize(erf)(h / np.sqrt(2))) + rs
    np.testing.assert_allclose(got, want, atol=1e-5)
