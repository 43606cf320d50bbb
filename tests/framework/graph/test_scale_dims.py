"""A graph's scale of more dimensions than the elementwise kernels index runs on the device
(both sides viewed as one dimension), against numpy on odd shapes."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

SHAPE = (2, 3, 1, 5, 3, 2, 7)


@pytest.mark.parametrize("dtype, alpha", [("float32", -1.75), ("int32", -3)])
def test_seven_dimension_scale_matches_numpy(ctx, dtype: str, alpha: float) -> None:
    rng = np.random.default_rng()
    data = (rng.standard_normal(SHAPE) * 1000).astype(dtype)
    b = GraphBuilder("scale7")
    x = b.input("x", SHAPE, dtype)
    b.output(b.op("scale", x, alpha=alpha))
    graph = b.build()
    want = data.astype(np.float64) * alpha
    np.testing.assert_allclose(evaluate(graph, {"x": data})[0], want, rtol=1e-7)
    got = CompiledGraph(graph, ctx)(x=data)[0].numpy()
    assert got.shape == SHAPE and got.dtype == np.dtype(dtype)
    if dtype == "int32":
        np.testing.assert_array_equal(got, data * alpha)
    else:
        assert np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-30)) < 1e-6

