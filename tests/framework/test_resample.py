"""``ops.resize2d``, ``ops.pad`` and ``ops.conv_transpose2d`` against float64 references
written here (resize: one output pixel's source coordinate at a time; pad: ``np.pad``;
transposed convolution: one input pixel scattered at a time), on odd shapes, every mode, with
poisoned outputs, in float16, inside a compiled graph, and bad inputs refused."""

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


def source(coordinate: str, o: int, n: int, out: int, s: float) -> float:
    """ONNX's coordinate_transformation_mode formulas, one output index."""
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


def taps(coordinate: str, rounding: str, linear: bool, n: int, out: int, s: float
         ) -> list[list[tuple[int, float]]]:
    """Per output index: (source index, weight) pairs, indices clamped to the input."""
    rows = []
    for o in range(out):
        c = source(coordinate, o, n, out, s)
        low = math.floor(c)
        frac = c - low
        if linear:
            pairs = [(low, 1 - frac), (low + 1, frac)]
        else:
            up = {"floor": False, "ceil": frac > 0, "round_prefer_floor": frac > 0.5,
                  "round_prefer_ceil": frac >= 0.5}[rounding]
            pairs = [(low + int(up), 1.0)]
        rows.append([(min(max(i, 0), n - 1), w) for i, w in pairs])
    return rows


def resized(x: np.ndarray, out_hw, scales, linear: bool, coordinate: str, rounding: str
            ) -> np.ndarray:
    h, w = x.shape[2:]
    ys = taps(coordinate, rounding, linear, h, out_hw[0], scales[0])
    xs = taps(coordinate, rounding, linear, w, out_hw[1], scales[1])
    out = np.zeros((*x.shape[:2], *out_hw))
    for i, row in enumerate(ys):
        for j, col in enumerate(xs):
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
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_matches_float64(ctx, mode: str, coordinate: str, geometry) -> None:
    shape, size, scale = geometry
    rng = np.random.default_rng()
    x = sample(rng, "float32", shape)
    if size is not None:
        out_hw, scales = size, (size[0] / shape[2], size[1] / shape[3])
    else:
        # ONNX's scales are float32; the op reads the value it is given.
        scales = tuple(float(np.float32(s)) for s in scale)
        out_hw = (math.floor(shape[2] * scales[0]), math.floor(shape[3] * scales[1]))
    for rounding in (("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")
                     if mode == "nearest" else ("round_prefer_floor",)):
        want = resized(x, out_hw, scales, mode == "linear", coordinate, rounding)
        out = poisoned(ctx, want.shape, "float32")
        got = ops.resize2d(tensor(ctx, x, "float32"), size=size,
                           scale=None if scale is None else scales, mode=mode,
                           coordinate=coordinate, rounding=rounding, out=out)
        assert got is out
        assert_close(got.numpy().astype(np.float64), want, "float32",
                     f"{mode} {coordinate} {rounding}")


def test_nearest_ties_round_as_asked(ctx) -> None:
    # half_pixel at scale 2: sources -0.25, 0.25, 0.75, ... no ties; asymmetric at scale 2
    # puts every odd output exactly on .5, where the four roundings disagree.
    x = np.arange(5, dtype=np.float32).reshape(1, 1, 1, 5)
    t = ctx.tensor(x)
    results = {r: ops.resize2d(t, scale=(1.0, 2.0), coordinate="asymmetric", rounding=r)
               .numpy()[0, 0, 0].tolist() for r in ("floor", "ceil", "round_prefer_floor",
                                                    "round_prefer_ceil")}
    assert results["floor"] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    assert results["round_prefer_floor"] == results["floor"]
    assert results["ceil"] == [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    assert results["round_prefer_ceil"] == results["ceil"]


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_float16(ctx, mode: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float16", (2, 3, 7, 5))
    want = resized(x, (10, 11), (10 / 7, 11 / 5), mode == "linear", "half_pixel",
                   "round_prefer_floor")
    out = poisoned(ctx, want.shape, "float16")
    ops.resize2d(tensor(ctx, x, "float16"), size=(10, 11), mode=mode, out=out)
    assert_close(out.numpy().astype(np.float64), want, "float16", mode)


# (shape, pads as begins then ends)
PADS = [
    ((2, 3, 7, 9), (0, 0, 1, 2, 0, 0, 3, 4)),
    ((2, 3, 7, 9), (0, 1, -2, 3, 1, 0, 2, -4)),        # negative pads crop
    ((5, 11), (2, 0, 3, 10)),
    ((3, 4, 5, 6, 7), (1, 0, 2, 0, 1, 0, 1, 0, 3, 2)),  # rank 5, channels padded
]


@pytest.mark.parametrize("case", PADS, ids=str)
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_pad_matches_numpy(ctx, dtype: str, mode: str, case) -> None:
    shape, pads = case
    rank = len(shape)
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    crop = tuple(slice(max(-pads[i], 0), shape[i] - max(-pads[rank + i], 0))
                 for i in range(rank))
    width = [(max(pads[i], 0), max(pads[rank + i], 0)) for i in range(rank)]
    extra = {"constant_values": -2.5} if mode == "constant" else {}
    want = np.pad(x[crop].astype(np.float64), width, mode=mode, **extra)
    out = poisoned(ctx, want.shape, dtype)
    got = ops.pad(tensor(ctx, x, dtype), pads, mode=mode, value=-2.5, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), want, dtype, f"{mode} {case}")
    # Padding moves stored values (and -2.5, exact in each type): bit for bit.
    np.testing.assert_array_equal(got.numpy().astype(np.float64), want)


def scattered(x: np.ndarray, w: np.ndarray, bias, stride, dilation, pads, extra, groups
              ) -> np.ndarray:
    """Transposed convolution by its definition: every input pixel adds its kernel."""
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    full = np.zeros((n, og * groups, (h - 1) * stride[0] + dilation[0] * (kh - 1) + 1
                     + extra[0], (wd - 1) * stride[1] + dilation[1] * (kw - 1) + 1 + extra[1]))
    cg = c // groups
    for ci in range(c):
        g = ci // cg
        for i in range(h):
            for j in range(wd):
                for ky in range(kh):
                    for kx in range(kw):
                        full[:, g * og:(g + 1) * og, i * stride[0] + ky * dilation[0],
                             j * stride[1] + kx * dilation[1]] += (
                            x[:, ci, i, j, None].astype(np.float64) * w[ci, :, ky, kx])
    out = full[:, :, pads[0]:full.shape[2] - pads[2], pads[1]:full.shape[3] - pads[3]]
    return out if bias is None else out + bias.astype(np.float64)[None, :, None, None]


# (x shape, w shape, groups, stride, dilation, pads, output padding, bias)
CONV_TRANSPOSES = [
    ((1, 6, 5, 7), (6, 4, 2, 2), 1, (2, 2), (1, 1), (0, 0, 0, 0), (0, 0), True),  # PP-OCR
    ((2, 3, 5, 4), (3, 5, 3, 3), 1, (1, 1), (1, 1), (1, 1, 1, 1), (0, 0), False),
    ((2, 6, 5, 7), (6, 1, 3, 2), 3, (2, 3), (2, 1), (1, 0, 2, 1), (1, 2), True),
    ((1, 4, 3, 9), (4, 3, 1, 5), 2, (1, 2), (1, 2), (0, 3, 0, 2), (0, 1), True),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_conv_transpose_matches_float64(ctx, dtype: str, case) -> None:
    x_shape, w_shape, groups, stride, dilation, pads, extra, has_bias = case
    rng = np.random.default_rng()
    x = sample(rng, dtype, x_shape)
    w = sample(rng, dtype, w_shape, 0.5)
    bias = sample(rng, dtype, (w_shape[1] * groups,)) if has_bias else None
    want = scattered(x, w, bias, stride, dilation, pads, extra, groups)
    out = poisoned(ctx, want.shape, dtype)
    got = ops.conv_transpose2d(tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                               None if bias is None else tensor(ctx, bias, dtype),
                               stride=stride, dilation=dilation, pads=pads,
                               output_padding=extra, groups=groups, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), want, dtype, str(case))


@pytest.mark.parametrize("gemm", [True, False], ids=["gemm", "gather"])
def test_conv_transpose_both_paths(ctx, monkeypatch: pytest.MonkeyPatch, gemm: bool) -> None:
    # Stride equal to the kernel runs as GEMM + permute; force each path on the same case.
    from vkumd.compiler.kernels.resample_plan import conv_transpose_is_gemm
    from vkumd.framework.opset import conv_transpose as module

    assert conv_transpose_is_gemm((2, 3), (2, 3), (1, 1), (0, 0, 0, 0), (0, 0), 1)
    assert not conv_transpose_is_gemm((2, 2), (2, 2), (1, 1), (0, 0, 0, 0), (0, 0), 2)
    seen = []
    monkeypatch.setattr(module, "conv_transpose_is_gemm",
                        lambda *a: seen.append(a) or gemm)
    rng = np.random.default_rng()
    x = sample(rng, "float32", (2, 5, 7, 9))
    w = sample(rng, "float32", (5, 3, 2, 3), 0.5)
    bias = sample(rng, "float32", (3,))
    want = scattered(x, w, bias, (2, 3), (1, 1), (0, 0, 0, 0), (0, 0), 1)
    out = poisoned(ctx, want.shape, "float32")
    ops.conv_transpose2d(tensor(ctx, x, "float32"), tensor(ctx, w, "float32"),
                         tensor(ctx, bias, "float32"), stride=(2, 3), out=out)
    assert seen
    assert_close(out.numpy().astype(np.float64), want, "float32", "gemm" if gemm else "gather")


def test_compiled_graph(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("resample")
    x = b.input("x", (1, 4, 5, 7))
    w = b.input("w", (4, 3, 2, 2))
    up = b.conv_transpose2d(x, w, stride=(2, 2))
    r = b.resize2d(up, scale=(2.0, 2.0), coordinate="asymmetric", rounding="floor")
    b.output(b.pad(r, pads=(0, 0, 1, 2, 0, 0, 2, 1), mode="reflect"))
    graph = b.build()
    data = rng.standard_normal((1, 4, 5, 7)).astype(np.float32)
    weight = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    mid = scattered(data, weight, None, (2, 2), (1, 1), (0, 0, 0, 0), (0, 0), 1)
    mid = mid.repeat(2, axis=2).repeat(2, axis=3)
    want = np.pad(mid, ((0, 0), (0, 0), (1, 2), (2, 1)), mode="reflect")
    assert_close(evaluate(graph, {"x": data, "w": weight})[0], want, "float32", "reference")
    got = CompiledGraph(graph, ctx)(x=data, w=weight)
    assert_close(got[0].numpy().astype(np.float64), want, "float32", "compiled")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 6, 6), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.resize2d(x)),                       # neither
        (VkumdValueError, lambda: ops.resize2d(x, scale=(0.1, 1.0))),    # 0 rows
        (VkumdValueError, lambda: ops.resize2d(x, scale=(-1.0, 1.0))),
        (VkumdValueError, lambda: ops.resize2d(x, size=(0, 3))),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), mode="bicubic")),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), coordinate="tf_crop")),
        (VkumdValueError, lambda: ops.resize2d(x, size=(2, 2), rounding="even")),
        (VkumdValueError, lambda: ops.resize2d(ctx.tensor(np.ones((3, 6), np.float32)),
                                               size=(2, 2))),
        (VkumdTypeError, lambda: ops.resize2d(x, scale=("2", 1.0))),
        (VkumdTypeError, lambda: ops.resize2d(ctx.tensor(np.ones((1, 1, 2, 2), np.int32)),
                                              size=(4, 4))),
        (VkumdValueError, lambda: ops.resize2d(x, size=(3, 3), out=ctx.empty((2, 3, 4, 4)))),
    ], "resize2d")
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.pad(x, (1, 1))),                    # wrong length
        (VkumdValueError, lambda: ops.pad(x, (0, 0, 6, 0, 0, 0, 0, 0), mode="reflect")),
        (VkumdValueError, lambda: ops.pad(x, (0, 0, -4, 0, 0, 0, -3, 0))),  # crops 7 of 6
        (VkumdValueError, lambda: ops.pad(x, (0,) * 8, mode="wrap")),
        (VkumdTypeError, lambda: ops.pad(x, (0, 0, 1.5, 0, 0, 0, 0, 0))),
        (VkumdTypeError, lambda: ops.pad(x, (0,) * 8, value="0")),
        (VkumdValueError, lambda: ops.pad(ctx.tensor(np.ones((2,) * 7, np.float32)),
                                          (1, 0) * 7)),             # 7 padded dimensions
    ], "pad")
    w = ctx.tensor(np.ones((3, 2, 3, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.conv_transpose2d(x, ctx.tensor(np.ones((4, 2, 3, 3),
                                                                             np.float32)))),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, groups=2)),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, stride=(0, 1))),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, output_padding=(1, 0))),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, pads=(-1, 0, 0, 0))),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, pads=(5, 0, 5, 0))),
        (VkumdValueError, lambda: ops.conv_transpose2d(x, w, ctx.tensor(np.ones(3,
                                                                                np.float32)))),
        (VkumdTypeError, lambda: ops.conv_transpose2d(x, ctx.tensor(np.ones((3, 2, 3, 3),
                                                                            np.float16)))),
    ], "conv_transpose2d")
