"""Slices with a step other than 1 (negative ones too) in the graph IR: recorded as one
strided-copy launch of a view, from traced code and from the builder, against numpy on odd
shapes (from a graph input and from an intermediate in the arena)."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.errors import VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

CASES = [(0, 1, None, 2), (1, None, None, -1), (2, 5, 1, -2), (1, -2, None, 3),
         (2, None, 3, -3), (0, 4, 1, -1)]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32"])
@pytest.mark.parametrize("axis, start, stop, step", CASES)
def test_builder_slice_steps_match_numpy(ctx, dtype, axis, start, stop, step) -> None:
    if dtype == "float16" and not ctx.caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")
    rng = np.random.default_rng()
    shape = (5, 7, 11)
    data = (rng.standard_normal(shape) * 100).astype(dtype)
    b = GraphBuilder("stepped")
    x = b.input("x", shape, dtype)
    doubled = b.op("add", x, x)  # an arena intermediate: the view starts past offset 0
    b.output(b.slice(x, axis, start, stop, step), b.slice(doubled, axis, start, stop, step))
    graph = b.build()
    index = [slice(None)] * 3
    index[axis] = slice(start, stop, step)
    want = [data[tuple(index)], (data + data)[tuple(index)]]
    for got, w in zip(evaluate(graph, {"x": data}), want, strict=True):
        np.testing.assert_array_equal(got, w.astype(np.float64))
    got = CompiledGraph(graph, ctx)(x=data)
    for g, w in zip(got, want, strict=True):
        assert g.shape == w.shape
        np.testing.assert_array_equal(g.numpy(), w)


def test_traced_steps_match_numpy(ctx) -> None:
    rng = np.random.default_rng()
    data = rng.standard_normal((9, 13)).astype(np.float32)

    def fn(x):
        return x[::2, 1::3] * 2.0, x[::-1, 11:2:-4]

    x = ctx.tensor(data)
    compiled = vkumd.compile(fn, {"x": x}, ctx=ctx)
    got = compiled(x=x)
    want = [data[::2, 1::3] * 2.0, data[::-1, 11:2:-4]]
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w)


def test_step_zero_is_refused() -> None:
    b = GraphBuilder("zero")
    x = b.input("x", (4,))
    with pytest.raises(VkumdValueError, match="nonzero"):
        b.slice(x, 0, 0, None, 0)
