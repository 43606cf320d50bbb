"""The convolution kernels and their planners: ``shaders/conv2d.comp`` (direct, every case),
``shaders/im2col.comp`` (the columns of a one-group convolution, then the GEMM) and the
inference batch-norm kernel ``shaders/batch_norm.comp``.

What each path takes (:func:`conv2d_is_gemm`, :func:`im2col_blocks`, :func:`depthwise_fits`,
:func:`grouped_as_gemm`); which one a convolution runs is
:func:`vkumd.compiler.kernels.conv_route.conv_route`'s choice, between these, the GEMM and
the implicit GEMM (:mod:`vkumd.compiler.kernels.conv_gemm`). 1-D convolution is a height-1
2-D one.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import (
    CPU_WORKGROUPS,
    ELEMENTWISE_WORKGROUP,
    FixedLaunch,
    looped_grid,
)
from vkumd.compiler.kernels.limits import CONV_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

CONV_CODES = type_codes(CONV_DTYPES)
CONV_PUSH = PushLayout("rows_total:u32", "pixels:u32", "c_in:u32", "h:u32", "w:u32",
                       "c_out:u32", "ow:u32", "kh:u32", "kw:u32", "sy:u32", "sx:u32", "dy:u32",
                       "dx:u32", "pt:i32", "pl:i32", "groups:u32", "has_bias:u32", "act:u32",
                       "act_p0:f32", "act_p1:f32", "residual_mode:u32", "rows_per:u32")
# A convolution's epilogue as its kernels take it: (activation code, its two parameters, how
# the residual joins), codes of limits.EPILOGUE_ACTIVATIONS and limits.RESIDUAL_*.
Epilogue = tuple[int, float, float, int]
NO_EPILOGUE: Epilogue = (0, 0.0, 0.0, 0)
# The kernel indexes with 32-bit unsigned integers.
_MAX_ELEMENTS = (1 << 32) - 1


def check_indexing(op: str, **sizes: int) -> None:
    """Refuse a tensor past the kernels' 32-bit indexing.

    Raises:
        VkumdValueError: naming the tensor, its size and the limit.
    """
    for what, size in sizes.items():
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"{op}: {what} has {size} elements; the kernel indexes at "
                                  f"most {_MAX_ELEMENTS} (split the batch)")


def _conv_variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in CONV_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: ELEMENTWISE_WORKGROUP} for c in codes]


def _conv2d_variants(caps: DeviceCaps) -> list[dict]:
    return [{**v, "OC_BLOCK": b} for v in _conv_variants(caps) for b in OC_BLOCKS]


# Output channels per invocation; the planner takes the largest that divides a group's.
OC_BLOCKS = (1, 4)


CONV2D = register(Kernel(
    name="conv2d",
    source="conv2d.comp",
    buffers=5,
    push=CONV_PUSH,
    defines={"DTYPE": tuple(CONV_CODES.values()), "OC_BLOCK": OC_BLOCKS},
    spec_constants={WORKGROUP: 0},
    variants=_conv2d_variants,
))


def conv2d_block(c_out: int, groups: int) -> int:
    """Output channels per row: 4 when a group's output channels are a multiple of 4, else 1.
    Measured on lavapipe (2 shared cores, load 3-4, noisy): a 3x3 64->64 conv on 56x56 took
    177-384 ms at 4 against 411-876 ms at 1."""
    return 4 if (c_out // groups) % 4 == 0 else 1


# A grouped convolution runs as one GEMM per group (batched over the groups) when each
# group's GEMM has at least this many output channels; below it (depthwise: one) the GEMM's
# tiles would be mostly idle and the direct kernel runs.
GROUP_GEMM_MIN_CHANNELS = 8


def grouped_as_gemm(c_out: int, groups: int) -> bool:
    """Whether a convolution's groups are GEMMs worth running (always for one group).
    Measured on lavapipe (2 shared cores, load 1.5-2.5): on 28x28, a 3x3 conv 240->240 in
    3 groups took 27-29 ms as im2col + batched GEMM against 187-191 ms in the direct kernel,
    a 1x1 one 3.4-3.6 against 30-35 ms; at 8 channels per group (64->64 in 8 groups, 3x3,
    56x56) 25-26 against 31-39 ms."""
    return groups == 1 or c_out // groups >= GROUP_GEMM_MIN_CHANNELS


def conv2d_is_gemm(kernel: tuple[int, int], stride: tuple[int, int],
                   pads: tuple[int, ...], groups: int, c_out: int) -> bool:
    """Whether the convolution is a plain GEMM ``w[C_out, C] @ x[n, C, H * W]`` per group
    (1x1 kernel, stride 1, no padding, groups the GEMM takes): the pointwise convolutions of
    MobileNet and ResNet's bottlenecks, ShuffleNet's grouped ones. Measured on lavapipe,
    64->64 on 56x56: 9.8 ms through the GEMM against 90 ms in the direct kernel."""
    return (kernel == (1, 1) and stride == (1, 1) and not any(pads)
            and grouped_as_gemm(c_out, groups))


@functools.lru_cache(maxsize=4096)
def conv2d_plan(caps: DeviceCaps, code: str, x_shape: tuple[int, int, int, int],
                w_shape: tuple[int, int, int, int], out_hw: tuple[int, int],
                stride: tuple[int, int], dilation: tuple[int, int], pads: tuple[int, int],
                groups: int, has_bias: bool, oc_block: int = 0, rows_per: int = 0,
                epilogue: Epilogue = NO_EPILOGUE) -> FixedLaunch:
    """Convolve ``x[n, c_in, h, w]`` with ``w[c_out, c_in / groups, kh, kw]``; ``pads`` is
    (top, left) (the bottom and right pads only shape ``out_hw``), then apply ``epilogue``.
    Operands: x, w, bias (x when there is none), out ``[n, c_out, *out_hw]``, residual
    (of out's shape; x when there is none).
    ``oc_block`` forces the output channels per row and ``rows_per`` the rows per invocation
    (0: the planner's choice, :func:`row_runs`).

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    n, c_in, h, w = x_shape
    c_out, _, kh, kw = w_shape
    check_indexing("conv2d", x=n * c_in * h * w, out=n * c_out * out_hw[0] * out_hw[1])
    block = oc_block or conv2d_block(c_out, groups)
    if (c_out // groups) % block:
        raise VkumdValueError(f"conv2d: oc_block={block} does not divide the "
                              f"{c_out // groups} output channels of a group")
    program = CONV2D.specialize({"DTYPE": code, "OC_BLOCK": block,
                                 WORKGROUP: ELEMENTWISE_WORKGROUP})
    rows_total, pixels = n * c_out // block, out_hw[0] * out_hw[1]
    rows_per, grid = row_runs(caps, rows_total, pixels, rows_per)
    push = CONV_PUSH.pack(rows_total, pixels, c_in, h, w, c_out, out_hw[1], kh, kw, *stride,
                          *dilation, *pads, groups, int(has_bias), *epilogue, rows_per)
    return FixedLaunch(program, push, grid, (3,))


def row_runs(caps: DeviceCaps, rows_total: int, pixels: int, rows_per: int = 0
             ) -> tuple[int, tuple[int, int, int]]:
    """Rows per invocation and the grid of a kernel whose invocations own an output pixel
    (x) and walk a run of rows (y): im2col's and the direct convolution's. ``rows_per`` 0 is
    the planner's choice: on CPU drivers (which pay per workgroup) about
    :data:`CPU_WORKGROUPS` groups in all, on GPUs runs of 4, so that each invocation's
    divisions serve several elements; never more groups along y than the device allows."""
    pixel_groups = -(-pixels // ELEMENTWISE_WORKGROUP)
    if not rows_per:
        rows_per = -(-rows_total * pixel_groups // CPU_WORKGROUPS) if caps.device_type == "cpu" \
            else 4
    rows_per = max(rows_per, -(-rows_total // caps.max_workgroup_count[1]), 1)
    return rows_per, (min(pixel_groups, caps.max_workgroup_count[0]), -(-rows_total // rows_per),
                      1)


DEPTHWISE_PUSH = PushLayout("items:u32", "strips_per_row:u32", "bands:u32", "band_rows:u32",
                            "channels:u32", "h:u32", "w:u32", "oh:u32", "ow:u32", "pt:i32",
                            "pl:i32", "has_bias:u32", "act:u32", "act_p0:f32", "act_p1:f32",
                            "residual_mode:u32")
# Square filter sizes and strides (vertical, horizontal) the depthwise kernel is compiled
# for.
DEPTHWISE_KERNELS = (3, 5)
DEPTHWISE_STRIDES = (1, 2)
# Outputs per invocation along a row (the shader's STRIP).
DEPTHWISE_STRIP = 8
# Output rows per band: on GPUs short bands (many invocations); on CPU drivers bands as long
# as leave about CPU_WORKGROUPS workgroups, at least this many rows (each band reloads the
# KERNEL - SY input rows it shares with the band above).
DEPTHWISE_GPU_BAND = 4
DEPTHWISE_MIN_BAND = 4
CONV2D_DEPTHWISE = register(Kernel(
    name="conv2d_depthwise",
    source="conv2d_depthwise.comp",
    buffers=5,
    push=DEPTHWISE_PUSH,
    defines={"DTYPE": tuple(CONV_CODES.values()), "KERNEL": DEPTHWISE_KERNELS,
             "SX": DEPTHWISE_STRIDES, "SY": DEPTHWISE_STRIDES, "QUADS": (0, 1)},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{**v, "KERNEL": k, "SX": sx, "SY": sy, "QUADS": q}
                           for v in _conv_variants(caps) for k in DEPTHWISE_KERNELS
                           for sx in DEPTHWISE_STRIDES for sy in DEPTHWISE_STRIDES
                           for q in (0, 1)],
))
# The quads variant (QUADS=1) loads input rows and stores output rows as 4-element vectors,
# fewer load and store instructions: it needs rows of a multiple of 4 elements in and out
# and a left pad of at most this many columns.
DEPTHWISE_QUAD_PAD = 4


def depthwise_fits(c_in: int, w_shape: tuple[int, int, int, int], stride: tuple[int, int],
                   dilation: tuple[int, int], groups: int) -> bool:
    """Whether ``shaders/conv2d_depthwise.comp`` takes the convolution: one input and one
    output channel per group, a square filter of :data:`DEPTHWISE_KERNELS`, dilation 1 and
    strides of :data:`DEPTHWISE_STRIDES` (measured against the direct kernel in
    ``bench/depthwise.py``; numbers in docs/vision.md, "Layouts and kernels")."""
    c_out, per_group, kh, kw = w_shape
    return (groups == c_in == c_out and per_group == 1 and kh == kw
            and kh in DEPTHWISE_KERNELS and dilation == (1, 1)
            and stride[0] in DEPTHWISE_STRIDES and stride[1] in DEPTHWISE_STRIDES)


def depthwise_bands(caps: DeviceCaps, planes: int, strips: int, oh: int,
                    band_rows: int = 0) -> tuple[int, int]:
    """(bands per plane, output rows per band) of the depthwise kernel; ``band_rows`` 0 is
    the planner's choice (:data:`DEPTHWISE_GPU_BAND`, :data:`DEPTHWISE_MIN_BAND`)."""
    if not band_rows:
        if caps.device_type == "cpu":
            wanted = -(-CPU_WORKGROUPS * ELEMENTWISE_WORKGROUP // (planes * strips))
            band_rows = max(-(-oh // wanted), DEPTHWISE_MIN_BAND)
        else:
            band_rows = DEPTHWISE_GPU_BAND
    band_rows = min(band_rows, oh)
    return -(-oh // band_rows), band_rows


@functools.lru_cache(maxsize=4096)
def depthwise_plan(caps: DeviceCaps, code: str, x_shape: tuple[int, int, int, int],
                   kernel: int, out_hw: tuple[int, int], stride: tuple[int, int],
                   pads: tuple[int, int], has_bias: bool, band_rows: int = 0,
                   epilogue: Epilogue = NO_EPILOGUE) -> FixedLaunch:
    """A depthwise convolution :func:`depthwise_fits` takes; ``stride`` is (y, x), ``pads``
    (top, left); then ``epilogue``. Operands: x, w, bias (x when there is none), out
    ``[n, c, *out_hw]``, residual (of out's shape; x when there is none). ``band_rows``
    forces the output rows per invocation (:func:`depthwise_bands`).

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    n, c, h, w = x_shape
    oh, ow = out_hw
    check_indexing("conv2d", x=n * c * h * w, out=n * c * oh * ow)
    per_row = -(-ow // DEPTHWISE_STRIP)
    bands, band_rows = depthwise_bands(caps, n * c, per_row, oh, band_rows)
    items = n * c * bands * per_row
    check_indexing("conv2d", items=items)
    quads = int(w % 4 == 0 and ow % 4 == 0 and pads[1] <= DEPTHWISE_QUAD_PAD)
    program = CONV2D_DEPTHWISE.specialize({"DTYPE": code, "KERNEL": kernel, "SY": stride[0],
                                           "SX": stride[1], "QUADS": quads,
                                           WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = DEPTHWISE_PUSH.pack(items, per_row, bands, band_rows, c, h, w, oh, ow, *pads,
                               int(has_bias), *epilogue)
    groups = min(-(-items // ELEMENTWISE_WORKGROUP), caps.max_workgroup_count[0])
    return FixedLaunch(program, push, (groups, 1, 1), (3,))


IM2COL_PUSH = PushLayout("rows_total:u32", "pixels:u32", "h:u32", "w:u32", "ow:u32", "kh:u32",
                         "kw:u32", "sy:u32", "sx:u32", "dy:u32", "dx:u32", "pt:i32", "pl:i32",
                         "rows_per:u32", "row0:u32")
IM2COL = register(Kernel(
    name="im2col",
    source="im2col.comp",
    buffers=2,
    push=IM2COL_PUSH,
    defines={"DTYPE": tuple(CONV_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_conv_variants,
))
# The largest column buffer (bytes) the im2col path takes in one block (conv_route then
# prefers the implicit GEMM, which needs none, to several blocks).
IM2COL_MAX_BYTES = 64 << 20


def im2col_blocks(x_shape: tuple[int, int, int, int], w_shape: tuple[int, int, int, int],
                  out_hw: tuple[int, int], groups: int, itemsize: int
                  ) -> list[tuple[int, int]] | None:
    """The column rows ``[start, stop)`` to write and multiply in turn when a convolution
    should run as im2col + GEMM, else None (the direct kernel).

    One block, every row of ``[n, C*kh*kw, oh*ow]``, when the columns fit
    :data:`IM2COL_MAX_BYTES` (groups the GEMM takes, :func:`grouped_as_gemm`; each group's
    rows are a contiguous block, so one buffer serves every group). Past it, a one-image,
    one-group convolution takes blocks of whole input channels, each within the limit, whose
    GEMMs accumulate into the output (PP-OCR's detector at 640 x 640: 88 MB of columns for a
    3x3 96->24 conv on 160 x 160, 670 ms in the direct kernel against about 200 ms in two
    blocks). Measured on lavapipe (2 shared cores, load 3-4, noisy): a 3x3 64->64
    conv on 56x56 took 36-63 ms this way against 177-384 ms in the direct kernel."""
    n, c, _, _ = x_shape
    taps = w_shape[2] * w_shape[3]
    pixels = out_hw[0] * out_hw[1]
    if not grouped_as_gemm(w_shape[0], groups):
        return None
    if n * c * taps * pixels * itemsize <= IM2COL_MAX_BYTES:
        return [(0, n * c * taps)]
    channels = IM2COL_MAX_BYTES // (taps * pixels * itemsize)
    if n != 1 or groups != 1 or channels == 0:
        return None
    return [(start * taps, min(start + channels, c) * taps) for start in range(0, c, channels)]


@functools.lru_cache(maxsize=4096)
def im2col_plan(caps: DeviceCaps, code: str, x_shape: tuple[int, int, int, int],
                w_shape: tuple[int, int, int, int], out_hw: tuple[int, int],
                stride: tuple[int, int], dilation: tuple[int, int], pads: tuple[int, int],
                rows_per: int = 0, rows: tuple[int, int] | None = None) -> FixedLaunch:
    """Write the columns of a convolution (see :func:`im2col_blocks`), rows ``rows`` (start,
    stop; default all). Operands: x, cols ``[stop - start, oh*ow]`` (a batch dim in front when
    whole). ``rows_per`` forces the column rows per invocation (0: the planner's choice)."""
    n, c_in, h, w = x_shape
    _, _, kh, kw = w_shape
    row0, row_end = rows if rows is not None else (0, n * c_in * kh * kw)
    rows_total, pixels = row_end - row0, out_hw[0] * out_hw[1]
    rows_per, grid = row_runs(caps, rows_total, pixels, rows_per)
    program = IM2COL.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = IM2COL_PUSH.pack(rows_total, pixels, h, w, out_hw[1], kh, kw, *stride, *dilation,
                            *pads, rows_per, row0)
    return FixedLaunch(program, push, grid, (1,))


BATCH_NORM_PUSH = PushLayout("total:u32", "channels:u32", "inner:u32", "eps:f32")
BATCH_NORM = register(Kernel(
    name="batch_norm",
    source="batch_norm.comp",
    buffers=6,
    push=BATCH_NORM_PUSH,
    defines={"DTYPE": tuple(CONV_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_conv_variants,
))


@functools.lru_cache(maxsize=4096)
def batch_norm_plan(caps: DeviceCaps, code: str, total: int, channels: int, inner: int,
                    eps: float) -> FixedLaunch:
    """Inference batch normalisation of ``x[N, channels, inner]`` (``total`` elements).
    Operands: x, scale, bias, mean, var, out (may be x).

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    check_indexing("batch_norm", x=total)
    program = BATCH_NORM.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = BATCH_NORM_PUSH.pack(total, channels, inner, eps)
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (5,))
