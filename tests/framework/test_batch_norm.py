"""``ops.batch_norm`` (inference) against a float64 numpy reference written here, on odd
shapes of every rank it takes, poisoned outputs, float16, in place, in a compiled graph after a
convolution, and bad inputs refused."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate


def normalised(x: np.ndarray, params: list[np.ndarray], eps: float) -> np.ndarray:
    scale, bias, mean, var = (np.asarray(p, np.float64) for p in params)
    out = np.empty(x.shape)
    for c in range(x.shape[1]):
        out[:, c] = (x[:, c] - mean[c]) * (scale[c] / np.sqrt(var[c] + eps)) + bias[c]
    return out


def _params(rng: np.random.Generator, dtype: str, c: int) -> list[np.ndarray]:
    scale, bias, mean = (sample(rng, dtype, (c,)) for _ in range(3))
    return [scale, bias, mean, sample(rng, dtype, (c,), 0.3, 1.0) ** 2]


@pytest.mark.parametrize("shape", [(2, 3, 11, 13), (3, 5), (2, 7, 9), (1, 4, 3, 5, 2)], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_float64(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    params = _params(rng, dtype, shape[1])
    out = poisoned(ctx, shape, dtype)
    got = ops.batch_norm(tensor(ctx, x, dtype), *(tensor(ctx, p, dtype) for p in params),
                         eps=1e-3, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), normalised(x, params, 1e-3), dtype)


def test_in_place_and_default_eps(ctx) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 3, 5, 7))
    params = _params(rng, "float32", 3)
    t = ctx.tensor(x.astype(np.float32))
    assert ops.batch_norm(t, *(ctx.tensor(p.astype(np.float32)) for p in params), out=t) is t
    assert_close(t.numpy().astype(np.float64), normalised(x, params, 1e-5), "float32")


def test_compiled_graph_after_conv(ctx) -> None:
    rng = np.random.default_rng()
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    params = [p.astype(np.float32) for p in _params(rng, "float32", 4)]
    b = GraphBuilder("conv_bn")
    x = b.input("x", (2, 3, 11, 13))
    h = b.op("conv2d", x, b.constant(w), None, pads=(1, 1, 1, 1))
    b.output(b.batch_norm(h, *(b.constant(p) for p in params), eps=1e-4))
    graph = b.build()
    data = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    ref = evaluate(graph, {"x": data})[0]
    got = CompiledGraph(graph, ctx)(x=data)[0]
    assert_close(got.numpy().astype(np.float64), ref, "float32", "compiled")
    assert not np.allclose(ref, 0)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 4, 4), np.float32))
    p = ctx.tensor(np.ones(3, np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.batch_norm(ctx.tensor(np.ones(3, np.float32)), p, p, p,
                                                 p)),
        (VkumdValueError, lambda: ops.batch_norm(x, ctx.tensor(np.ones(4, np.float32)), p, p,
                                                 p)),
        (VkumdValueError, lambda: ops.batch_norm(x, p, p, p, p, eps=-1.0)),
        (VkumdValueError, lambda: ops.batch_norm(x, p, p, p, p, eps=float("inf"))),
        (VkumdTypeError, lambda: ops.batch_norm(x, p, p, p, p, eps="1e-5")),
        (VkumdTypeError, lambda: ops.batch_norm(x, p, p, p, ctx.tensor(np.ones(3, np.float16)))),
        (VkumdValueError, lambda: ops.batch_norm(x, p, p, p, p, out=ctx.empty((2, 3, 4, 5)))),
    ], "batch_norm")
