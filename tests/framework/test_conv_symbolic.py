"""A strided convolution network compiled once with symbolic image sizes (``32*h``,
``16*w + 8``) and run at three sizes on the device, each against a float64 numpy reference
written here, with the compiled graph's memory poisoned before every call; sizes the
declaration does not take are refused before anything runs, and the graph stays usable."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from test_conv import pixelwise
from transformer_checks import assert_close

import vkumd
from vkumd import ops
from vkumd.errors import VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, sym

sys.path.insert(0, str(Path(__file__).parent / "graph"))
from execute_checks import poison  # noqa: E402

# (h, w) of the three calls: the input is [2, 3, 32*h, 16*w + 8].
SIZES = ((1, 1), (3, 2), (2, 5))


def max_pool(x: np.ndarray, kernel: int, stride: int, pad: int) -> np.ndarray:
    """Max pooling in float64, padding never winning, one output pixel at a time."""
    n, c, h, w = x.shape
    xp = np.full((n, c, h + 2 * pad, w + 2 * pad), -np.inf)
    xp[:, :, pad:pad + h, pad:pad + w] = x
    oh = (h + 2 * pad - kernel) // stride + 1
    ow = (w + 2 * pad - kernel) // stride + 1
    out = np.empty((n, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = xp[:, :, i * stride:i * stride + kernel,
                                 j * stride:j * stride + kernel].max(axis=(2, 3))
    return out


def network(rng: np.random.Generator) -> tuple[dict[str, np.ndarray], object]:
    """The weights and the float64 forward: stride-2 conv, relu, depthwise stride-2 conv,
    a stride-(2, 1) max pool, a 1x1 conv."""
    p = {"w1": rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.4,
         "b1": rng.standard_normal(6).astype(np.float32),
         "w2": rng.standard_normal((6, 1, 5, 3)).astype(np.float32) * 0.4,
         "w3": rng.standard_normal((5, 6, 1, 1)).astype(np.float32) * 0.4}

    def forward(x: np.ndarray) -> np.ndarray:
        y = np.maximum(pixelwise(x, p["w1"], p["b1"], (2, 2), (1, 1), (1, 1, 1, 1), 1), 0)
        y = pixelwise(y, p["w2"], None, (2, 2), (1, 1), (2, 1, 2, 1), 6)
        y = max_pool(y, 3, 2, 1)
        return pixelwise(y, p["w3"], None, (1, 1), (1, 1), (0, 0, 0, 0), 1)

    return p, forward


def test_compiled_graph_at_three_sizes_with_poisoned_memory(ctx) -> None:
    rng = np.random.default_rng()
    p, forward = network(rng)
    b = GraphBuilder("strided")
    x = b.input("x", (2, 3, "32*h", "16*w + 8"))
    y = b.relu(b.op("conv2d", x, b.constant(p["w1"]), b.constant(p["b1"]), stride=(2, 2),
                    pads=(1, 1, 1, 1)))
    y = b.op("conv2d", y, b.constant(p["w2"]), None, stride=(2, 2), pads=(2, 1, 2, 1),
             groups=6)
    y = b.op("max_pool2d", y, kernel=(3, 3), stride=(2, 2), pads=(1, 1, 1, 1))
    b.output(b.op("conv2d", y, b.constant(p["w3"]), None))
    graph = b.build()
    assert [str(d) for d in graph.outputs[0].shape[2:]] == ["4*h", "2*w + 1"]
    compiled = CompiledGraph(graph, ctx)
    try:
        for h, w in SIZES:
            data = rng.standard_normal((2, 3, 32 * h, 16 * w + 8)).astype(np.float32)
            poison(compiled)
            got = compiled(x=data)[0].numpy()
            assert got.shape == (2, 5, 4 * h, 2 * w + 1)
            assert_close(got.astype(np.float64), forward(data), "float32", f"h={h}, w={w}")
        # (1, 1) and (2, 5) share the h=2, w=8 bucket's memory, (3, 2) the h=4, w=2 one.
        assert compiled.recorded == 3
        with pytest.raises(VkumdValueError, match=r"is 40, which is not 32\*h for any whole "
                           r"h; pad it to a multiple of 32"):
            compiled(x=np.zeros((2, 3, 40, 24), np.float32))
        with pytest.raises(VkumdValueError, match=r"is 16, which is not 16\*w \+ 8"):
            compiled(x=np.zeros((2, 3, 32, 16), np.float32))
        data = rng.standard_normal((2, 3, 32, 24)).astype(np.float32)
        poison(compiled)
        assert_close(compiled(x=data)[0].numpy().astype(np.float64), forward(data),
                     "float32", "after the refusals")
    finally:
        compiled.release()


def test_vkumd_compile_takes_multiples_in_dynamic(ctx) -> None:
    rng = np.random.default_rng()
    p, _ = network(rng)
    w1, b1, w2 = ctx.tensor(p["w1"]), ctx.tensor(p["b1"]), ctx.tensor(p["w2"])

    def block(x):
        y = ops.relu(ops.conv2d(x, w1, b1, stride=(2, 2), pads=(1, 1, 1, 1)))
        return ops.conv2d(y, w2, stride=(2, 4), pads=(2, 1, 2, 1), groups=6)

    example = rng.standard_normal((1, 3, 64, 32)).astype(np.float32)
    f = vkumd.compile(block, {"x": example}, ctx=ctx,
                      dynamic={"x": {2: "32*h", 3: 32 * sym("w")}})
    assert [str(d) for d in f.graph.outputs[0].shape[2:]] == ["8*h", "4*w"]
    for shape in ((1, 3, 64, 32), (1, 3, 32, 96), (1, 3, 96, 64)):
        data = rng.standard_normal(shape).astype(np.float32)
        y = np.maximum(pixelwise(data, p["w1"], p["b1"], (2, 2), (1, 1), (1, 1, 1, 1), 1), 0)
        want = pixelwise(y, p["w2"], None, (2, 4), (1, 1), (2, 1, 2, 1), 6)
        assert_close(f(x=data).numpy().astype(np.float64), want, "float32", str(shape))
    with pytest.raises(VkumdValueError, match="not 32\\*w for any whole w"):
        f(x=np.zeros((1, 3, 64, 48), np.float32))
