"""``ops.lrn`` (local response normalisation across channels) against a float64 numpy
reference written here from ONNX's definition, on odd shapes and window sizes (even and odd,
wider than the channels), float16, poisoned outputs, in a compiled graph, and bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate


def normalised(x: np.ndarray, size: int, alpha: float, beta: float, bias: float
               ) -> np.ndarray:
    """ONNX's LRN, one element at a time (the window: floor((size-1)/2) channels below,
    ceil((size-1)/2) above, those that exist)."""
    x = np.asarray(x, np.float64)
    out = np.empty_like(x)
    channels = x.shape[1]
    for c in range(channels):
        lo = max(0, c - (size - 1) // 2)
        hi = min(channels - 1, c + int(np.ceil((size - 1) / 2)))
        squares = (x[:, lo:hi + 1] ** 2).sum(axis=1)
        out[:, c] = x[:, c] / (bias + alpha / size * squares) ** beta
    return out


# (shape, size, alpha, beta, bias): AlexNet's window, even windows, one wider than the
# channels, a single channel, 2-D and 5-D inputs, sizes no tile divides.
CASES = [
    ((2, 7, 11, 13), 5, 1e-4, 0.75, 1.0),
    ((1, 6, 5, 3), 4, 0.3, 0.5, 2.0),
    ((3, 5, 9), 11, 1.5, 1.25, 0.7),
    ((2, 1, 4, 5), 3, 2.0, 0.75, 1.0),
    ((5, 9), 2, 0.8, 0.9, 1.5),
    ((1, 4, 3, 2, 5), 3, 0.5, 0.75, 1.0),
]


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_float64(ctx, dtype: str, case) -> None:
    shape, size, alpha, beta, bias = case
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, 2.0)
    out = poisoned(ctx, shape, dtype)
    got = ops.lrn(tensor(ctx, x, dtype), size, alpha=alpha, beta=beta, bias=bias, out=out)
    assert got is out
    want = normalised(x, size, alpha, beta, bias)
    assert_close(got.numpy().astype(np.float64), want, dtype)
    assert not np.allclose(want, x)  # the normalisation changed something


def test_defaults_are_onnx_defaults(ctx) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 9, 6, 7), 30.0)  # large enough that alpha matters
    got = ops.lrn(ctx.tensor(x.astype(np.float32)), 5).numpy().astype(np.float64)
    assert_close(got, normalised(x, 5, 1e-4, 0.75, 1.0), "float32")


def test_compiled_graph_after_conv(ctx) -> None:
    rng = np.random.default_rng()
    w = rng.standard_normal((6, 3, 3, 3)).astype(np.float32)
    b = GraphBuilder("conv_lrn")
    x = b.input("x", (2, 3, 11, 13))
    h = b.op("conv2d", x, b.constant(w), None, pads=(1, 1, 1, 1))
    b.output(b.lrn(b.relu(h), size=5, alpha=0.5, beta=0.75, bias=2.0))
    graph = b.build()
    data = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    ref = evaluate(graph, {"x": data})[0]
    got = CompiledGraph(graph, ctx)(x=data)[0]
    assert_close(got.numpy().astype(np.float64), ref, "float32", "compiled")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 4, 4), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.lrn(ctx.tensor(np.ones(3, np.float32)), 3)),
        (VkumdValueError, lambda: ops.lrn(x, 0)),
        (VkumdTypeError, lambda: ops.lrn(x, 2.5)),
        (VkumdValueError, lambda: ops.lrn(x, 3, beta=float("inf"))),
        (VkumdTypeError, lambda: ops.lrn(x, 3, alpha="1")),
        (VkumdTypeError, lambda: ops.lrn(ctx.tensor(np.ones((2, 3), np.int32)), 3)),
        (VkumdValueError, lambda: ops.lrn(x, 3, out=ctx.empty((2, 3, 4, 5)))),
    ], "lrn")
