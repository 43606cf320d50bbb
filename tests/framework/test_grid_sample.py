"""``ops.grid_sample`` (ONNX GridSample) against a float64 reference written here from
ONNX's definition (one output point's taps at a time), in every mode, padding and corner
alignment, 2-D and 3-D, on odd shapes with grids reaching past the borders, poisoned outputs,
float16, and inside a compiled graph; the record's own reference against onnx's."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from transformer_checks import assert_close, poisoned, sample, tensor

from vkumd import ops
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.opset.grid_sample import grid_sample_reference

MODES = ("nearest", "linear", "cubic")
PADDINGS = ("zeros", "border", "reflection")


def reflect(v: float, lo: float, hi: float) -> float:
    span = hi - lo
    if span <= 0:
        return lo
    if v < lo:
        k, r = divmod(lo - v, span)
        return lo + r if k % 2 == 0 else hi - r
    if v > hi:
        k, r = divmod(v - hi, span)
        return hi - r if k % 2 == 0 else lo + r
    return v


def keys(d: float) -> float:
    a, d = -0.75, abs(d)
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a if d < 2 else 0.0


def axis_taps(g: float, n: int, mode: str, padding: str, align: bool
              ) -> list[tuple[int | None, float]]:
    """(index or None for a zero, weight) per tap of one axis, ONNX's order of steps."""
    v = (g + 1) / 2 * (n - 1) if align else ((g + 1) * n - 1) / 2
    if mode == "nearest":
        v = float(np.rint(v))
    lo, hi = (0.0, n - 1.0) if align else (-0.5, n - 0.5)
    if not lo <= v <= hi:
        v = min(max(v, 0.0), n - 1.0) if padding == "border" else \
            reflect(v, lo, hi) if padding == "reflection" else v
    if mode == "nearest":
        pairs = [(int(v), 1.0)]
    else:
        f = math.floor(v)
        t = v - f
        pairs = ([(f, 1 - t), (f + 1, t)] if mode == "linear" else
                 [(f + k, keys(t - k)) for k in (-1, 0, 1, 2)])
    out: list[tuple[int | None, float]] = []
    for i, w in pairs:
        if not 0 <= i < n:
            i = (None if padding == "zeros" else min(max(i, 0), n - 1) if padding == "border"
                 else int(reflect(i, lo, hi)))
        out.append((i, w))
    return out


def sampled(x: np.ndarray, grid: np.ndarray, mode: str, padding: str, align: bool
            ) -> np.ndarray:
    n, c, *spatial = x.shape
    rank = len(spatial)
    out = np.zeros((n, c, *grid.shape[1:-1]))
    for b in range(n):
        for point in itertools.product(*(range(s) for s in grid.shape[1:-1])):
            coords = grid[(b, *point)].astype(np.float64)[::-1]
            taps = [axis_taps(coords[k], spatial[k], mode, padding, align)
                    for k in range(rank)]
            for combo in itertools.product(*taps):
                if any(i is None for i, _ in combo):
                    continue
                weight = math.prod(w for _, w in combo)
                out[(b, slice(None), *point)] += weight * x[(b, slice(None),
                                                             *(i for i, _ in combo))]
    return out


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS)
@pytest.mark.parametrize("align", [False, True])
def test_2d_matches_float64(ctx, mode: str, padding: str, align: bool) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 3, 5, 7))
    grid = rng.uniform(-1.7, 1.7, (2, 4, 9, 2)).astype(np.float32)
    want = sampled(x, grid, mode, padding, align)
    out = poisoned(ctx, want.shape, "float32")
    got = ops.grid_sample(tensor(ctx, x, "float32"), tensor(ctx, grid, "float32"), mode=mode,
                          padding=padding, align_corners=align, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), want, "float32", f"{mode} {padding} {align}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("padding", PADDINGS)
def test_3d_matches_float64(ctx, mode: str, padding: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 2, 3, 5, 4))
    grid = rng.uniform(-1.5, 1.5, (2, 3, 2, 5, 3)).astype(np.float32)
    for align in (False, True):
        want = sampled(x, grid, mode, padding, align)
        out = poisoned(ctx, want.shape, "float32")
        ops.grid_sample(tensor(ctx, x, "float32"), tensor(ctx, grid, "float32"), mode=mode,
                        padding=padding, align_corners=align, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", f"{mode} {padding}")


def test_single_pixel_axes(ctx) -> None:
    # A length-1 axis with aligned corners has no span to reflect over: it reads pixel 0.
    rng = np.random.default_rng()
    x = sample(rng, "float32", (1, 2, 1, 5))
    grid = rng.uniform(-2.5, 2.5, (1, 3, 4, 2)).astype(np.float32)
    for mode, padding, align in itertools.product(MODES, PADDINGS, (False, True)):
        want = sampled(x, grid, mode, padding, align)
        out = poisoned(ctx, want.shape, "float32")
        ops.grid_sample(tensor(ctx, x, "float32"), tensor(ctx, grid, "float32"), mode=mode,
                        padding=padding, align_corners=align, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", f"{mode} {padding}")


def test_float16(ctx) -> None:
    if not ctx.caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")
    rng = np.random.default_rng()
    x = sample(rng, "float16", (1, 3, 6, 5))
    grid = rng.uniform(-1.2, 1.2, (1, 5, 3, 2)).astype(np.float16)
    want = sampled(x.astype(np.float64), grid, "cubic", "reflection", False)
    out = poisoned(ctx, want.shape, "float16")
    ops.grid_sample(tensor(ctx, x, "float16"), tensor(ctx, grid, "float16"), mode="cubic",
                    padding="reflection", out=out)
    assert_close(out.numpy().astype(np.float64), want, "float16", "cubic float16")


def test_record_reference_matches_the_loop_reference() -> None:
    rng = np.random.default_rng()
    for rank in (2, 3):
        x = rng.standard_normal((2, 3, 4, 5, 3)[:rank + 2])
        grid = rng.uniform(-1.6, 1.6, (2, 3, 4, 2, rank)[:rank + 1] + (rank,))
        for mode, padding, align in itertools.product(MODES, PADDINGS, (False, True)):
            np.testing.assert_allclose(grid_sample_reference(x, grid, mode, padding, align),
                                       sampled(x, grid, mode, padding, align), atol=1e-12)


def test_compiled_graph_matches_evaluate(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("grid_sample")
    x = b.input("x", (1, 2, 6, 7))
    g = b.input("g", (1, 3, 5, 2))
    b.output(b.relu(b.grid_sample(x, g, mode="cubic", padding="border")))
    graph = b.build()
    data = sample(rng, "float32", (1, 2, 6, 7)).astype(np.float32)
    grid = rng.uniform(-1.3, 1.3, (1, 3, 5, 2)).astype(np.float32)
    want = np.maximum(sampled(data, grid, "cubic", "border", False), 0.0)
    assert_close(evaluate(graph, {"x": data, "g": grid})[0], want, "float32", "reference")
    got = CompiledGraph(graph, ctx)(x=data, g=grid)
    assert_close(got[0].numpy().astype(np.float64), want, "float32", "compiled")
