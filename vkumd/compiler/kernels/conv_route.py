"""Which kernel a convolution runs on: the planner's choice from its shape and the device.

Paths (:data:`CONV_PATHS`):
  ``gemm``       a 1x1, stride-1, unpadded convolution is the GEMM over the input itself;
  ``implicit``   the implicit GEMM (:mod:`vkumd.compiler.kernels.conv_gemm`): the GEMM's
                 tiles with the im2col addresses computed by the B loads, no column buffer;
  ``im2col``     the columns written by ``shaders/im2col.comp``, then the GEMM (in blocks of
                 input channels when the columns are large);
  ``depthwise``  ``shaders/conv2d_depthwise.comp`` (3x3 and 5x5 depthwise);
  ``direct``     ``shaders/conv2d.comp``, which takes every case.

The choice (:func:`conv_route`) and the measurements behind it are in docs/vision.md
("Layouts and kernels"); ``bench/conv_paths.py`` times the candidates.
"""

from __future__ import annotations

from typing import NamedTuple

from vkumd.compiler.kernels.conv import (
    conv2d_is_gemm,
    depthwise_fits,
    grouped_as_gemm,
    im2col_blocks,
)
from vkumd.compiler.kernels.conv_gemm import available_conv_gemm_variants
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

CONV_PATHS = ("gemm", "implicit", "im2col", "depthwise", "direct")
# On CPU drivers the implicit GEMM takes convolutions of at most this many output channels
# per group. Its B loads are gathers (two to four times the load instructions per
# multiply-add of the GEMM's wide loads along stored columns), while im2col writes each
# column element once and its GEMM reads it once per output channel: the columns' cost is
# amortised over the output channels. Measured on lavapipe (docs/vision.md, "Layouts and
# kernels"): the implicit GEMM faster at 24-128 channels (PP-OCR's 96 -> 24 on 160x160: 292
# against 707 ms), im2col + GEMM at 256 and 512 (ResNet-50's 3x3 on 14x14: 23 against 52).
IMPLICIT_MAX_CHANNELS_CPU = 128


class ConvRoute(NamedTuple):
    """A convolution's path and, for ``im2col``, the column-row blocks to run in turn."""

    path: str
    blocks: list[tuple[int, int]] | None = None


def conv_route(caps: DeviceCaps, dtype: str, x_shape: tuple[int, int, int, int],
               w_shape: tuple[int, int, int, int], out_hw: tuple[int, int],
               stride: tuple[int, int], dilation: tuple[int, int], pads: tuple[int, ...],
               groups: int, force: str | None = None) -> ConvRoute:
    """The path of a convolution ``x[n, c_in, h, w] * w[c_out, c_in / groups, kh, kw]``
    (``pads``: top, left, bottom, right) on ``caps``.

    Pointwise convolutions are the GEMM; depthwise ones the depthwise kernel where it fits;
    groups too narrow for the GEMM's tiles (:func:`~vkumd.compiler.kernels.conv.
    grouped_as_gemm`) the direct kernel; the rest the implicit GEMM where the device can run
    it and, on CPU drivers, a group has at most :data:`IMPLICIT_MAX_CHANNELS_CPU` output
    channels; else im2col + GEMM while its columns fit one block, else the implicit GEMM
    (the direct kernel where the device has neither).

    Args:
        force: a path of :data:`CONV_PATHS` instead of the choice (tests and benchmarks).

    Raises:
        VkumdValueError: ``force`` names an unknown path, or one that cannot take this
            convolution.
    """
    c_in = x_shape[1]
    c_out = w_shape[0]
    itemsize = 4 if dtype == "float32" else 2
    gemm = conv2d_is_gemm(w_shape[2:], stride, pads, groups, c_out)
    implicit = bool(available_conv_gemm_variants(caps, dtype))
    if force is not None:
        if force not in CONV_PATHS:
            raise VkumdValueError(f"conv2d: path {force!r} is unknown; use one of "
                                  f"{', '.join(CONV_PATHS)}")
        blocks = im2col_blocks(x_shape, w_shape, out_hw, groups, itemsize)
        takes = {"gemm": gemm, "implicit": implicit, "im2col": blocks is not None,
                 "depthwise": depthwise_fits(c_in, w_shape, stride, dilation, groups),
                 "direct": True}
        if not takes[force]:
            raise VkumdValueError(f"conv2d: the {force} path cannot take this convolution "
                                  f"(x {x_shape}, w {w_shape}, groups {groups}) on "
                                  f"{caps.name}; leave the choice to the planner")
        return ConvRoute(force, blocks if force == "im2col" else None)
    if gemm:
        return ConvRoute("gemm")
    if depthwise_fits(c_in, w_shape, stride, dilation, groups):
        return ConvRoute("depthwise")
    if not grouped_as_gemm(c_out, groups):
        return ConvRoute("direct")
    if implicit and (caps.device_type != "cpu"
                     or c_out // groups <= IMPLICIT_MAX_CHANNELS_CPU):
        return ConvRoute("implicit")
    blocks = im2col_blocks(x_shape, w_shape, out_hw, groups, itemsize)
    # Columns past the limit would run in blocks, one GEMM pass each: one implicit pass
    # reads the input instead.
    if blocks is not None and (len(blocks) == 1 or not implicit):
        return ConvRoute("im2col", blocks)
    return ConvRoute("implicit" if implicit else "direct")
