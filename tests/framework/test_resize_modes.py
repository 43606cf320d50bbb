"""``ops.resize2d``'s cubic mode, antialiasing, tf_crop_and_resize crops and size-with-scale
calls (ONNX's keep_aspect_ratio_policy) against a float64 reference written here from ONNX's
definitions (one output pixel's taps at a time), on odd shapes, with poisoned outputs, in
float16, inside a compiled graph, and bad inputs refused."""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

COORDINATES = ("half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel",
               "tf_half_pixel_for_nn", "half_pixel_symmetric")


def source(coordinate: str, o: int, n: int, out: int, s: float, crop=(0.0, 1.0)) -> float:
    """ONNX's coordinate_transformation_mode formulas, one output index."""
    if coordinate == "tf_crop_and_resize":
        if out == 1:
            return (crop[1] - crop[0]) * (n - 1) / 2 + crop[0] * (n - 1)
        return o * (crop[1] - crop[0]) * (n - 1) / (out - 1) + crop[0] * (n - 1)
    if coordinate == "asymmetric":
        return o / s
    if coordinate == "tf_half_pixel_for_nn":
        return (o + 0.5) / s
    if coordinate == "align_corners":
        return 0.0 if n * s == 1 else o * (n - 1) / (n * s - 1)
    if coordinate == "pytorch_half_pixel" and n * s == 1:
        return -0.5
    c = (o + 0.5) / s - 0.5
    return c + n / 2 * (1 - out / (n * s)) if coordinate == "half_pixel_symmetric" else c


def keys(d: float, a: float) -> float:
    """The cubic convolution kernel (Keys) at distance ``d`` from a tap."""
    d = abs(d)
    if d <= 1:
        return ((a + 2) * d - (a + 3)) * d * d + 1
    if d < 2:
        return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return 0.0


def taps(mode: str, coordinate: str, n: int, out: int, s: float, a: float, exclude: bool,
         crop=(0.0, 1.0)) -> list[list[tuple[int, float]] | None]:
    """Per output index: (source index, weight) pairs, clamped to the input; None where a
    crop's coordinate falls outside it."""
    rows: list[list[tuple[int, float]] | None] = []
    for o in range(out):
        c = source(coordinate, o, n, out, s, crop)
        if coordinate == "tf_crop_and_resize" and not 0 <= c <= n - 1:
            rows.append(None)
            continue
        low = math.floor(c)
        if mode == "nearest":
            pairs = [(low + int(c - low > 0.5), 1.0)]
        elif mode == "linear":
            pairs = [(low, 1 - (c - low)), (low + 1, c - low)]
        else:
            pairs = [(low + k, keys(c - (low + k), a)) for k in (-1, 0, 1, 2)]
            if exclude:
                pairs = [(i, w) for i, w in pairs if 0 <= i < n]
                total = sum(w for _, w in pairs)
                pairs = [(i, w / total) for i, w in pairs]
        rows.append([(min(max(i, 0), n - 1), w) for i, w in pairs])
    return rows


def resized(x: np.ndarray, out_hw, scales, mode: str, coordinate: str, a: float = -0.75,
            exclude: bool = False, roi=(0.0, 0.0, 1.0, 1.0), fill: float = 0.0) -> np.ndarray:
    h, w = x.shape[2:]
    ys = taps(mode, coordinate, h, out_hw[0], scales[0], a, exclude, (roi[0], roi[2]))
    xs = taps(mode, coordinate, w, out_hw[1], scales[1], a, exclude, (roi[1], roi[3]))
    out = np.zeros((*x.shape[:2], *out_hw))
    for i, row in enumerate(ys):
        for j, col in enumerate(xs):
            if row is None or col is None:
                out[:, :, i, j] = fill
                continue
            for iy, wy in row:
                for ix, wx in col:
                    out[:, :, i, j] += wy * wx * x[:, :, iy, ix].astype(np.float64)
    return out


# (x shape, size or None, scale or None)
GEOMETRIES = [
    ((2, 3, 7, 9), None, (2.0, 3.0)),
    ((1, 5, 11, 6), (5, 13), None),          # down along H, up by 13/6 along W
    ((2, 3, 9, 10), None, (0.6, 1.7)),       # float scales whose fractions are large
    ((1, 2, 1, 5), (3, 1), None),            # single rows and columns
]


@pytest.mark.parametrize("geometry", GEOMETRIES, ids=str)
@pytest.mark.parametrize("coordinate", COORDINATES)
def test_cubic_matches_float64(ctx, coordinate: str, geometry) -> None:
    shape, size, scale = geometry
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape)
    if size is not None:
        out_hw, scales = size, (size[0] / shape[2], size[1] / shape[3])
    else:
        scales = tuple(float(np.float32(s)) for s in scale)
        out_hw = (math.floor(shape[2] * scales[0]), math.floor(shape[3] * scales[1]))
    for a, exclude in ((-0.75, False), (-0.5, True), (-0.6, False)):
        want = resized(x, out_hw, scales, "cubic", coordinate, a, exclude)
        out = poisoned(ctx, want.shape, "float32")
        got = ops.resize2d(tensor(ctx, x, "float32"), size=size,
                           scale=None if scale is None else scales, mode="cubic",
                           coordinate=coordinate, cubic_a=a, exclude_outside=exclude, out=out)
        assert got is out
        assert_close(got.numpy().astype(np.float64), want, "float32",
                     f"cubic {coordinate} a={a} exclude={exclude}")


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("roi", [(0.2, 0.35, 0.9, 0.7),        # inside
                                 (-0.3, 0.4, 1.2, 1.7),        # past both ends
                                 (0.7, 0.9, 0.1, 0.25)],       # reversed: a flipped crop
                         ids=str)
def test_crop_and_resize(ctx, mode: str, roi) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 3, 9, 7))
    roi = tuple(float(np.float32(v)) for v in roi)
    for size in ((5, 11), (1, 4)):
        want = resized(x, size, (size[0] / 9, size[1] / 7), mode, "tf_crop_and_resize",
                       roi=roi, fill=-3.5)
        out = poisoned(ctx, want.shape, "float32")
        ops.resize2d(tensor(ctx, x, "float32"), size=size, mode=mode,
                     coordinate="tf_crop_and_resize", rounding="round_prefer_floor", roi=roi,
                     extrapolation=-3.5, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", f"{mode} {size}")


def antialiased(x: np.ndarray, out_hw, mode: str, coordinate: str, a: float,
                exclude: bool) -> np.ndarray:
    """ONNX's antialias from its definition: along an axis downsampled by ``s`` every tap
    ``t`` weighs the filter at ``s * (t - c)``, the weights of an output normalised."""
    y = x.astype(np.float64)
    for axis, out in ((2, out_hw[0]), (3, out_hw[1])):
        n = y.shape[axis]
        s = out / n
        f = min(s, 1.0)
        reach = (1.0 if mode == "linear" else 2.0) / f
        rows = []
        for o in range(out):
            c = source(coordinate, o, n, out, s)
            pairs = []
            for t in range(math.ceil(c - reach), math.floor(c + reach) + 1):
                if exclude and not 0 <= t < n:
                    continue
                d = f * (t - c)
                pairs.append((min(max(t, 0), n - 1),
                              max(1 - abs(d), 0.0) if mode == "linear" else keys(d, a)))
            total = sum(w for _, w in pairs)
            rows.append(sum(w / total * np.take(y, i, axis=axis) for i, w in pairs))
        y = np.stack(rows, axis=axis)
    return y


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("coordinate", ["half_pixel", "align_corners", "asymmetric"])
def test_antialias_matches_float64(ctx, mode: str, coordinate: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 3, 13, 11))
    for size, exclude in (((5, 4), False), ((3, 17), True), ((13, 2), False)):
        want = antialiased(x, size, mode, coordinate, -0.5, exclude)
        out = poisoned(ctx, want.shape, "float32")
        ops.resize2d(tensor(ctx, x, "float32"), size=size, mode=mode, coordinate=coordinate,
                     cubic_a=-0.5, exclude_outside=exclude, antialias=True, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", f"{mode} {size}")


def test_size_with_the_scale_the_coordinates_read(ctx) -> None:
    # ONNX's keep_aspect_ratio_policy: sizes round(in * s) and the coordinates read s.
    rng = np.random.default_rng()
    x = sample(rng, "float32", (1, 2, 5, 7))
    s = 13 / 7
    size = (int(5 * s + 0.5), 13)
    for mode in ("nearest", "linear", "cubic"):
        want = resized(x, size, (s, s), mode, "half_pixel")
        out = poisoned(ctx, want.shape, "float32")
        ops.resize2d(tensor(ctx, x, "float32"), size=size, scale=(s, s), mode=mode, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", mode)


def test_cubic_float16(ctx) -> None:
    if not ctx.caps.storage_16bit:
        pytest.skip("the device has no 16-bit storage")
    rng = np.random.default_rng()
    x = sample(rng, "float16", (2, 3, 7, 5))
    want = resized(x, (10, 11), (10 / 7, 11 / 5), "cubic", "half_pixel")
    out = poisoned(ctx, (2, 3, 10, 11), "float16")
    ops.resize2d(tensor(ctx, x, "float16"), size=(10, 11), mode="cubic", out=out)
    assert_close(out.numpy().astype(np.float64), want, "float16", "cubic float16")


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("resize_modes")
    x = b.input("x", (1, 3, 6, 5))
    up = b.resize2d(x, size=(9, 8), mode="cubic", cubic_a=-0.5, exclude_outside=True)
    b.output(b.resize2d(up, size=(4, 4), mode="linear", coordinate="tf_crop_and_resize",
                        roi=(0.1, -0.2, 0.8, 1.1), extrapolation=2.0))
    graph = b.build()
    data = rng.standard_normal((1, 3, 6, 5)).astype(np.float32)
    mid = resized(data, (9, 8), (9 / 6, 8 / 5), "cubic", "half_pixel", -0.5, True)
    roi = (0.1, -0.2, 0.8, 1.1)
    want = resized(mid, (4, 4), (4 / 9, 4 / 8), "linear", "tf_crop_and_resize", roi=roi,
                   fill=2.0)
    assert_close(evaluate(graph, {"x": data})[0], want, "float32", "reference")
    got = CompiledGraph(graph, ctx)(x=data)
    assert_close(got[0].numpy().astype(np.float64), want, "float32", "compiled")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((1, 2, 4, 4), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), mode="bicubic")),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), roi=(0.0, 0.0, 1.0, 1.0))),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), coordinate="tf_crop_and_resize",
                                               roi=(0.0, 1.0))),
        (VkumdTypeError, lambda: ops.resize2d(x, size=(2, 2), coordinate="tf_crop_and_resize",
                                              roi=(0.0, "a", 1.0, 1.0))),
        (VkumdTypeError, lambda: ops.resize2d(x, size=(2, 2), mode="cubic", cubic_a="x")),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), scale=(0.0, 1.0))),
        (VkumdTypeError, lambda: ops.resize2d(x, size=(2, 2), scale=(None, 1.0))),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), antialias=True)),  # nearest
        (VkumdTypeError, lambda: ops.resize2d(x, size=(2, 2), mode="linear", antialias=1)),
    ], "resize2d")
