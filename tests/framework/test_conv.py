"""``ops.conv2d`` against a float64 numpy reference written here (one output pixel at a time,
independent of the record's), on odd shapes, strides, dilations, asymmetric pads and groups
(depthwise included), with poisoned outputs, in float16, inside a compiled graph, and the
bad inputs each refused with a clear error."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.compiler.kernels import conv as conv_kernels
from vkumd.compiler.kernels import conv_route as conv_route_module
from vkumd.compiler.kernels.conv_gemm import available_conv_gemm_variants
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.opset import conv as conv_op


def pixelwise(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride, dilation, pads,
              groups: int) -> np.ndarray:
    """The convolution's definition, one output pixel at a time, in float64."""
    n, c, h, wd = x.shape
    c_out, cg, kh, kw = w.shape
    xp = np.zeros((n, c, h + pads[0] + pads[2], wd + pads[1] + pads[3]))
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    oh = (xp.shape[2] - dilation[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (xp.shape[3] - dilation[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((n, c_out, oh, ow))
    og = c_out // groups
    for o in range(c_out):
        g = o // og
        for i in range(oh):
            for j in range(ow):
                ys = i * stride[0] + dilation[0] * np.arange(kh)
                xs = j * stride[1] + dilation[1] * np.arange(kw)
                window = xp[:, g * cg:(g + 1) * cg][:, :, ys][:, :, :, xs]
                out[:, o, i, j] = np.einsum("nchw,chw->n", window, w[o].astype(np.float64))
    if bias is not None:
        out += bias[None, :, None, None]
    return out


# (x shape, c_out, kernel, stride, dilation, pads, groups, bias)
CASES = [
    ((2, 3, 11, 13), 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1, True),
    ((2, 3, 11, 13), 4, (1, 1), (2, 2), (1, 1), (0, 0, 0, 0), 1, False),
    ((2, 3, 11, 13), 7, (5, 5), (2, 1), (1, 1), (2, 0, 1, 3), 1, True),
    ((1, 4, 9, 10), 6, (3, 2), (1, 2), (2, 3), (3, 0, 0, 2), 2, True),
    ((2, 6, 11, 13), 6, (3, 3), (2, 2), (1, 1), (0, 1, 1, 0), 6, True),   # depthwise
    ((2, 6, 11, 13), 12, (5, 5), (2, 1), (1, 1), (2, 2, 2, 2), 6, False),  # multiplier 2
    ((1, 8, 7, 5), 4, (3, 3), (1, 1), (1, 1), (4, 4, 4, 4), 4, True),     # pads > half kernel
    ((3, 2, 1, 17), 3, (1, 5), (1, 3), (1, 2), (0, 2, 0, 1), 1, True),    # 1-D as height 1
    ((2, 5, 11, 13), 7, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 1, True),   # pointwise: GEMM
    ((3, 6, 1, 9), 4, (1, 1), (1, 1), (2, 2), (0, 0, 0, 0), 1, False),    # GEMM, no bias
    ((2, 6, 9, 11), 16, (3, 3), (1, 2), (1, 1), (1, 0, 1, 2), 2, True),   # groups: GEMMs
    ((1, 9, 5, 7), 24, (1, 1), (1, 1), (1, 1), (0, 0, 0, 0), 3, True),    # grouped pointwise
    ((2, 6, 11, 13), 6, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 6, True),   # depthwise kernel
    ((1, 5, 9, 7), 5, (5, 5), (2, 1), (1, 1), (2, 3, 1, 0), 5, False),    # 5x5, strips cut
    ((1, 3, 4, 18), 3, (3, 3), (1, 1), (1, 1), (0, 0, 0, 2), 3, True),    # segments inside
    ((2, 7, 13, 17), 7, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), 7, True),   # depthwise, x stride 2
    ((1, 5, 9, 23), 5, (5, 5), (1, 2), (1, 1), (2, 1, 2, 3), 5, False),   # 5x5, strips cut
    ((1, 3, 4, 31), 3, (3, 3), (1, 2), (1, 1), (0, 0, 0, 0), 3, True),    # segments inside
    # The depthwise kernel's quads (rows in and out of a multiple of 4, left pad <= 4).
    ((1, 7, 9, 20), 7, (3, 3), (1, 1), (1, 1), (1, 1, 0, 1), 7, True),   # quads, cut strip
    ((2, 5, 11, 24), 5, (5, 5), (2, 2), (1, 1), (2, 1, 1, 2), 5, False),  # quads, stride 2
    ((1, 3, 6, 16), 3, (5, 5), (2, 1), (1, 1), (0, 4, 3, 0), 3, True),    # quads, left pad 4
    ((1, 3, 5, 13), 3, (3, 3), (1, 1), (1, 1), (1, 5, 1, 0), 3, True),    # left pad 5: no quads
]


def force_path(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Route every convolution to ``path`` (of ``conv_route.CONV_PATHS``) through the
    planner's own ``force``, which refuses a path that cannot take the convolution."""
    monkeypatch.setattr(conv_op, "conv_route",
                        functools.partial(conv_route_module.conv_route, force=path))


def force_direct(monkeypatch: pytest.MonkeyPatch) -> None:
    """Route every convolution to the direct kernel (not im2col + GEMM, not the 1x1 GEMM, not
    the depthwise kernel)."""
    force_path(monkeypatch, "direct")


@pytest.mark.parametrize("path", ["chosen", "direct", "implicit", "im2col"])
@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_matches_float64(ctx, monkeypatch: pytest.MonkeyPatch, dtype: str, case,
                         path: str) -> None:
    """Every case on the planner's path and forced onto the direct kernel, the implicit GEMM
    and im2col + GEMM (where it takes the groups)."""
    shape, c_out, kernel, stride, dilation, pads, groups, has_bias = case
    if path == "implicit" and not available_conv_gemm_variants(ctx.caps, dtype):
        pytest.skip(f"{ctx.caps.name}'s push constants are too small for the implicit GEMM")
    if path == "im2col" and not conv_kernels.grouped_as_gemm(c_out, groups):
        pytest.skip("im2col + GEMM takes only groups of at least "
                    f"{conv_kernels.GROUP_GEMM_MIN_CHANNELS} output channels")
    if path != "chosen":
        force_path(monkeypatch, path)
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    w = sample(rng, dtype, (c_out, shape[1] // groups, *kernel), scale=0.3)
    bias = sample(rng, dtype, (c_out,)) if has_bias else None
    want = pixelwise(x, w, bias, stride, dilation, pads, groups)
    out = poisoned(ctx, want.shape, dtype)
    got = ops.conv2d(tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                     None if bias is None else tensor(ctx, bias, dtype), stride=stride,
                     dilation=dilation, pads=pads, groups=groups, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), want, dtype, f"conv2d {case}")


@pytest.mark.parametrize("block", [1, 4])
def test_output_channel_blocks(ctx, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Both kernel variants (one and four output channels per invocation), forced, on the
    cases whose groups have a multiple of 4 output channels."""
    monkeypatch.setattr(conv_kernels, "conv2d_block", lambda c_out, groups: block)
    force_direct(monkeypatch)
    conv_kernels.conv2d_plan.cache_clear()
    rng = np.random.default_rng()
    for shape, c_out, kernel, stride, pads, groups in [
            ((2, 3, 11, 13), 8, (3, 3), (2, 1), (1, 0, 2, 1), 1),
            ((1, 4, 9, 10), 8, (3, 2), (1, 2), (0, 1, 1, 0), 2),
            ((2, 2, 7, 5), 4, (1, 1), (1, 1), (0, 0, 0, 0), 1)]:
        x = sample(rng, "float32", shape)
        w = sample(rng, "float32", (c_out, shape[1] // groups, *kernel))
        bias = sample(rng, "float32", (c_out,))
        want = pixelwise(x, w, bias, stride, (1, 1), pads, groups)
        out = poisoned(ctx, want.shape, "float32")
        ops.conv2d(ctx.tensor(x.astype(np.float32)), ctx.tensor(w.astype(np.float32)),
                   ctx.tensor(bias.astype(np.float32)), stride=stride, pads=pads,
                   groups=groups, out=out)
        assert_close(out.numpy().astype(np.float64), want, "float32", f"block {block}")
    conv_kernels.conv2d_plan.cache_clear()


def test_default_output_and_record_reference(ctx) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 3, 8, 9)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    got = ops.conv2d(ctx.tensor(x), ctx.tensor(w), stride=(2, 2), pads=(1, 1, 1, 1))
    want = pixelwise(x, w, None, (2, 2), (1, 1), (1, 1, 1, 1), 1)
    assert got.shape == want.shape == (2, 4, 4, 5)
    assert_close(got.numpy().astype(np.float64), want, "float32")


def test_compiled_graph(ctx) -> None:
    """conv -> relu -> depthwise conv in a graph: compiled, against the records' references
    and against the pixelwise reference."""
    rng = np.random.default_rng()
    w1 = rng.standard_normal((6, 3, 3, 3)).astype(np.float32) * 0.3
    b1 = rng.standard_normal(6).astype(np.float32)
    w2 = rng.standard_normal((6, 1, 3, 3)).astype(np.float32) * 0.3
    b = GraphBuilder("convs")
    x = b.input("x", (2, 3, 11, 13))
    h = b.op("conv2d", x, b.constant(w1), b.constant(b1), pads=(1, 1, 1, 1))
    h = b.relu(h)
    y = b.op("conv2d", h, b.constant(w2), None, stride=(2, 1), pads=(0, 1, 2, 1), groups=6)
    b.output(y)
    graph = b.build()
    data = rng.standard_normal((2, 3, 11, 13)).astype(np.float32)
    want = pixelwise(np.maximum(pixelwise(data, w1, b1, (1, 1), (1, 1), (1, 1, 1, 1), 1), 0),
                     w2, None, (2, 1), (1, 1), (0, 1, 2, 1), 6)
    assert_close(evaluate(graph, {"x": data})[0], want, "float32", "reference")
    got = CompiledGraph(graph, ctx)(x=data)[0]
    assert_close(got.numpy().astype(np.float64), want, "float32", "compiled")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 4, 6, 6), np.float32))
    w = ctx.tensor(np.ones((4, 4, 3, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.conv2d(ctx.tensor(np.ones((4, 6, 6), np.float32)), w)),
        (VkumdValueError, lambda: ops.conv2d(x, ctx.tensor(np.ones((4, 4, 3), np.float32)))),
        (VkumdValueError, lambda: ops.conv2d(x, ctx.tensor(np.ones((4, 3, 3, 3), np.float32)))),
        (VkumdValueError, lambda: ops.conv2d(x, ctx.tensor(np.ones((4, 1, 3, 3), np.float32)),
                                             groups=3)),
        (VkumdValueError, lambda: ops.conv2d(x, w, pads=(-1, 0, 0, 0))),
        (VkumdValueError, lambda: ops.conv2d(x, w, pads=(1, 1))),
        (VkumdValueError, lambda: ops.conv2d(x, w, stride=(0, 1))),
        (VkumdValueError, lambda: ops.conv2d(x, w, dilation=(4, 1))),  # span 9 > 6
        (VkumdValueError, lambda: ops.conv2d(x, w, groups=0)),
        (VkumdValueError, lambda: ops.conv2d(x, w, ctx.tensor(np.ones(3, np.float32)))),
        (VkumdTypeError, lambda: ops.conv2d(x, w, stride=(1.5, 1))),
        (VkumdTypeError, lambda: ops.conv2d(x, ctx.tensor(np.ones((4, 4, 3, 3), np.float16)))),
        (VkumdTypeError, lambda: ops.conv2d(ctx.tensor(np.ones((2, 4, 6, 6), np.int32)),
                                            ctx.tensor(np.ones((4, 4, 3, 3), np.int32)))),
        (VkumdValueError, lambda: ops.conv2d(x, w, out=ctx.empty((2, 4, 5, 5)))),
    ], "conv2d")


def test_one_group_convolutions_run_as_gemms(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 1x1, stride-1, unpadded convolution is one GEMM, another one-group convolution is
    im2col + GEMM: neither reaches the direct kernel; a grouped one does."""
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the direct kernel was planned for a pointwise convolution")

    monkeypatch.setattr(conv_op, "conv2d_plan", refuse)
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 6, 5, 7)).astype(np.float32)
    w = rng.standard_normal((3, 6, 1, 1)).astype(np.float32)
    bias = rng.standard_normal(3).astype(np.float32)
    got = ops.conv2d(ctx.tensor(x), ctx.tensor(w), ctx.tensor(bias))
    assert_close(got.numpy().astype(np.float64),
                 pixelwise(x, w, bias, (1, 1), (1, 1), (0, 0, 0, 0), 1), "float32")
    got = ops.conv2d(ctx.tensor(x), ctx.tensor(w), stride=(2, 1), pads=(1, 0, 0, 0))
    assert_close(got.numpy().astype(np.float64),
                 pixelwise(x, w, None, (2, 1), (1, 1), (1, 0, 0, 0), 1), "float32")
    with pytest.raises(AssertionError, match="direct kernel"):
        ops.conv2d(ctx.tensor(x), ctx.tensor(w[:, :2]), groups=3)


def columns(x: np.ndarray, kernel: tuple[int, int], out_hw: tuple[int, int], stride, dilation,
            pads) -> np.ndarray:
    """im2col's definition in numpy: ``[n, c*kh*kw, oh*ow]``, zeros outside the input."""
    n, c, h, wd = x.shape
    kh, kw = kernel
    xp = np.zeros((n, c, h + 2 * kh * dilation[0] + pads[0], wd + 2 * kw * dilation[1] + pads[1]))
    xp[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + wd] = x
    cols = np.zeros((n, c, kh, kw, *out_hw))
    for ky in range(kh):
        for kx in range(kw):
            y0, x0 = ky * dilation[0], kx * dilation[1]
            cols[:, :, ky, kx] = xp[:, :, y0:y0 + stride[0] * out_hw[0]:stride[0],
                                    x0:x0 + stride[1] * out_hw[1]:stride[1]]
    return cols.reshape(n, c * kh * kw, out_hw[0] * out_hw[1])


@pytest.mark.parametrize("rows_per", [1, 4, 7, 1000])
def test_im2col_runs_of_rows_cross_taps_planes_and_images(ctx, rows_per: int) -> None:
    """Each invocation walks rows_per column rows by increments: runs that stop inside a tap
    row, cross input planes and cross images must write what the definition says."""
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 5, 9, 11)).astype(np.float32)
    kernel, stride, dilation, pads = (3, 2), (2, 1), (1, 2), (1, 2)
    out_hw = ((9 + 1 + 2 - 3) // 2 + 1, (11 + 2 + 0 - 3) // 1 + 1)  # bottom 2, right 0
    want = columns(x, kernel, out_hw, stride, dilation, pads)
    cols = poisoned(ctx, want.shape, "float32")
    plan = conv_kernels.im2col_plan(ctx.caps, "F32", x.shape, (1, 5, *kernel), out_hw, stride,
                                    dilation, pads, rows_per=rows_per)
    ctx.run(plan, (ctx.tensor(x), cols))
    np.testing.assert_array_equal(cols.numpy(), want)


@pytest.mark.parametrize("rows_per", [1, 3, 1000])
@pytest.mark.parametrize("block", [1, 4])
def test_direct_runs_of_rows_cross_groups_and_images(ctx, rows_per: int, block: int) -> None:
    """The direct kernel's invocations walk rows_per (image, channel block) rows by
    increments: runs that cross groups and images must read each row's own input channels."""
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 6, 7, 9)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 2)).astype(np.float32)  # 2 groups of 4 outputs
    bias = rng.standard_normal(8).astype(np.float32)
    stride, dilation, pads = (2, 1), (1, 2), (1, 0, 2, 1)
    want = pixelwise(x, w, bias, stride, dilation, pads, 2)
    out = poisoned(ctx, want.shape, "float32")
    plan = conv_kernels.conv2d_plan(ctx.caps, "F32", x.shape, w.shape, want.shape[2:], stride,
                                    dilation, pads[:2], 2, True, oc_block=block,
                                    rows_per=rows_per)
    ctx.run(plan, (ctx.tensor(x), ctx.tensor(w), ctx.tensor(bias), out, None))
    assert_close(out.numpy().astype(np.float64), want, "float32", f"rows_per {rows_per}")


@pytest.mark.parametrize("limit", [3000, 9000])
def test_columns_past_the_limit_run_in_blocks_of_channels(ctx, monkeypatch: pytest.MonkeyPatch,
                                                         limit: int) -> None:
    """Columns larger than the limit are written a block of input channels at a time, each
    block's GEMM accumulating into the output (the first one overwriting the poison)."""
    monkeypatch.setattr(conv_kernels, "IM2COL_MAX_BYTES", limit)
    force_path(monkeypatch, "im2col")
    rng = np.random.default_rng()
    x = rng.standard_normal((1, 7, 10, 9)).astype(np.float32)
    w = rng.standard_normal((5, 7, 3, 2)).astype(np.float32)
    bias = rng.standard_normal(5).astype(np.float32)
    stride, pads = (1, 2), (1, 0, 2, 1)
    want = pixelwise(x, w, bias, stride, (1, 1), pads, 1)
    blocks = conv_kernels.im2col_blocks(x.shape, w.shape, want.shape[2:], 1, 4)
    assert blocks is not None and len(blocks) > 1 and blocks[-1][1] == 7 * 6
    out = poisoned(ctx, want.shape, "float32")
    ops.conv2d(ctx.tensor(x), ctx.tensor(w), ctx.tensor(bias), stride=stride, pads=pads,
               out=out)
    assert_close(out.numpy().astype(np.float64), want, "float32", f"limit {limit}")
    # Two images (or groups) past the limit take the direct kernel instead.
    assert conv_kernels.im2col_blocks((2, 7, 10, 9), w.shape, want.shape[2:], 1, 4) is None


def test_depthwise_kernel_takes_strides_1_and_2() -> None:
    """3x3 and 5x5 at strides 1 and 2 either way run on the depthwise kernel; another stride,
    a dilation or a non-square filter keeps the direct kernel."""
    assert conv_kernels.depthwise_fits(7, (7, 1, 3, 3), (2, 2), (1, 1), 7)
    assert conv_kernels.depthwise_fits(3, (3, 1, 3, 3), (1, 2), (1, 1), 3)
    assert conv_kernels.depthwise_fits(5, (5, 1, 5, 5), (1, 2), (1, 1), 5)
    assert conv_kernels.depthwise_fits(5, (5, 1, 5, 5), (2, 1), (1, 1), 5)
    assert not conv_kernels.depthwise_fits(5, (5, 1, 3, 3), (1, 3), (1, 1), 5)
    assert not conv_kernels.depthwise_fits(5, (5, 1, 3, 3), (3, 1), (1, 1), 5)
    assert not conv_kernels.depthwise_fits(5, (5, 1, 3, 3), (1, 2), (2, 2), 5)
    assert not conv_kernels.depthwise_fits(5, (5, 1, 3, 5), (1, 1), (1, 1), 5)


# (x shape, kernel, stride, pads (top, left, bottom, right)): odd channels and sizes, widths
# that leave a strip cut, with quads (rows of a multiple of 4) and without.
DEPTHWISE_BANDS = [
    ((3, 5, 8, 11), 3, (2, 1), (1, 1, 0, 1)),
    ((2, 5, 9, 23), 5, (1, 2), (2, 1, 2, 3)),
    ((1, 7, 13, 16), 5, (1, 1), (2, 2, 1, 2)),
    ((2, 3, 10, 16), 3, (2, 2), (0, 1, 1, 0)),
]


@pytest.mark.parametrize("band_rows", [1, 2, 3, 1000])
@pytest.mark.parametrize("case", DEPTHWISE_BANDS, ids=str)
def test_depthwise_bands(ctx, case, band_rows: int) -> None:
    """The depthwise kernel walks a band of band_rows output rows per invocation, keeping
    the input rows it shares between output rows: bands that start inside the image, in
    the padding and past images (each plane's own channel's bias and filter)."""
    shape, k, stride, pads = case
    rng = np.random.default_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    w = rng.standard_normal((shape[1], 1, k, k)).astype(np.float32)
    bias = rng.standard_normal(shape[1]).astype(np.float32)
    want = pixelwise(x, w, bias, stride, (1, 1), pads, shape[1])
    assert conv_kernels.depthwise_fits(shape[1], w.shape, stride, (1, 1), shape[1])
    out = poisoned(ctx, want.shape, "float32")
    plan = conv_kernels.depthwise_plan(ctx.caps, "F32", x.shape, k, want.shape[2:], stride,
                                       pads[:2], True, band_rows=band_rows)
    ctx.run(plan, (ctx.tensor(x), ctx.tensor(w), ctx.tensor(bias), out, None))
    assert_close(out.numpy().astype(np.float64), want, "float32",
                 f"{case} band_rows {band_rows}")
