"""aten handlers of the resampling ops and 2-D convolution: nearest and bilinear upsampling
(``F.interpolate``), grid sampling (``F.grid_sample``), constant, reflection and replication
padding (``F.pad``), and ``aten.convolution`` both ways (``nn.Conv2d``,
``nn.ConvTranspose2d``). Each appends one IR node; pooling and batch norm are in
:mod:`aten_cnn`.
"""

from __future__ import annotations

from typing import Any

from torch import fx

from vkumd.framework.frontends.torch.aten_map import arg, aten, meta, on
from vkumd.framework.graph.ir import Value


def _float_4d(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not val.dtype.is_floating_point or val.dim() != 4:
        return "needs a 4-D floating-point result"
    return None


def _sizes(output_size: Any, scales: Any) -> dict[str, Any]:
    """``size=`` from torch's output size, else ``scale=`` from its factors (torch then reads
    source coordinates as ``dst / factor``, as the op does with a scale)."""
    if output_size is not None:
        return {"size": (output_size[0], output_size[1])}
    return {"scale": (float(scales[0]), float(scales[1]))}


@on(aten.upsample_nearest2d.vec, check=_float_4d)
def _nearest(cv: Any, node: fx.Node, x: Value, output_size: Any = None,
             scale_factors: Any = None) -> Value:
    # torch's nearest: floor(dst * in / out), or floor(dst / factor).
    return cv.b.resize2d(x, mode="nearest", coordinate="asymmetric", rounding="floor",
                         **_sizes(output_size, scale_factors))


@on(aten.upsample_bilinear2d.vec, check=_float_4d)
def _bilinear(cv: Any, node: fx.Node, x: Value, output_size: Any = None,
              align_corners: bool = False, scale_factors: Any = None) -> Value:
    # torch clamps a negative source coordinate to 0, which ONNX's half_pixel equals once
    # both neighbours clamp to the first pixel.
    if align_corners:  # torch spans the integer output size, even given factors
        size = tuple(meta(node).shape[2:]) if output_size is None else output_size
        return cv.b.resize2d(x, mode="linear", coordinate="align_corners",
                             size=(int(size[0]), int(size[1])))
    return cv.b.resize2d(x, mode="linear", coordinate="half_pixel",
                         **_sizes(output_size, scale_factors))


@on(aten.upsample_bicubic2d.vec, check=_float_4d)
def _bicubic(cv: Any, node: fx.Node, x: Value, output_size: Any = None,
             align_corners: bool = False, scale_factors: Any = None) -> Value:
    # torch's bicubic is ONNX's cubic with A = -0.75 and taps clamped to the edge; it does not
    # clamp a negative source coordinate (unlike its bilinear), so half_pixel holds as is.
    if align_corners:  # torch spans the integer output size, even given factors
        size = tuple(meta(node).shape[2:]) if output_size is None else output_size
        return cv.b.resize2d(x, mode="cubic", coordinate="align_corners",
                             size=(int(size[0]), int(size[1])))
    return cv.b.resize2d(x, mode="cubic", coordinate="half_pixel",
                         **_sizes(output_size, scale_factors))


def _onnx_pads(rank: int, torch_pads: Any) -> tuple[int, ...]:
    """torch's (last dim's left, right, the one before's ...) as ONNX's begins then ends."""
    begins, ends = [0] * rank, [0] * rank
    for i in range(len(torch_pads) // 2):
        begins[rank - 1 - i] = int(torch_pads[2 * i])
        ends[rank - 1 - i] = int(torch_pads[2 * i + 1])
    return (*begins, *ends)


def _float_result(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not val.dtype.is_floating_point:
        return "needs a floating-point result"
    return None


@on(aten.constant_pad_nd.default, check=_float_result)
def _constant_pad(cv: Any, node: fx.Node, x: Value, pad: Any, value: float = 0.0) -> Value:
    return cv.b.pad(x, pads=_onnx_pads(len(x.shape), pad), mode="constant",
                    value=float(value))


def _mode_pad(mode: str) -> Any:
    def handle(cv: Any, node: fx.Node, x: Value, padding: Any) -> Value:
        return cv.b.pad(x, pads=_onnx_pads(len(x.shape), padding), mode=mode)
    return handle


on(aten.reflection_pad1d.default, aten.reflection_pad2d.default,
   aten.reflection_pad3d.default, check=_float_result)(_mode_pad("reflect"))
on(aten.replication_pad1d.default, aten.replication_pad2d.default,
   aten.replication_pad3d.default, check=_float_result)(_mode_pad("edge"))


@on(aten.convolution.default, check=_float_4d)
def _conv_transpose(cv: Any, node: fx.Node, x: Value, w: Value, bias: Value | None,
                    stride: Any, padding: Any, dilation: Any, transposed: bool,
                    output_padding: Any, groups: int) -> Value:
    if not transposed:
        return cv.b.conv2d(x, w, bias, stride=tuple(stride), dilation=tuple(dilation),
                           pads=(padding[0], padding[1], padding[0], padding[1]),
                           groups=int(groups))
    return cv.b.conv_transpose2d(x, w, bias, stride=tuple(stride), dilation=tuple(dilation),
                                 pads=(padding[0], padding[1], padding[0], padding[1]),
                                 output_padding=tuple(output_padding), groups=int(groups))


_PAD_MODES = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}


def _pad_check(node: fx.Node) -> str | None:
    if arg(node, 2, "mode", "constant") not in _PAD_MODES:
        return f"mode {arg(node, 2, 'mode')!r} (vkumd pads constant, reflect, replicate)"
    return _float_result(node)


@on(aten.pad.default, check=_pad_check)
def _pad(cv: Any, node: fx.Node, x: Value, pad: Any, mode: str = "constant",
         value: float | None = None) -> Value:
    return cv.b.pad(x, pads=_onnx_pads(len(x.shape), pad), mode=_PAD_MODES[mode],
                    value=float(value or 0.0))


@on(aten.conv_transpose2d.input, check=_float_4d)
def _conv_transpose2d(cv: Any, node: fx.Node, x: Value, w: Value, bias: Value | None = None,
                      stride: Any = (1, 1), padding: Any = (0, 0),
                      output_padding: Any = (0, 0), groups: int = 1,
                      dilation: Any = (1, 1)) -> Value:
    return _conv_transpose(cv, node, x, w, bias, _pair(stride), _pair(padding),
                           _pair(dilation), True, _pair(output_padding), groups)


def _pair(value: Any) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    return (int(value[0]), int(value[-1]))


# torch's interpolation and padding codes (GridSampler.h) as grid_sample's names.
_GRID_MODES = ("linear", "nearest", "cubic")
_GRID_PADDINGS = ("zeros", "border", "reflection")


def _grid_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not val.dtype.is_floating_point or val.dim() not in (4, 5):
        return "needs a 4-D or 5-D floating-point result"
    mode, padding = int(arg(node, 2, "interpolation_mode")), int(arg(node, 3, "padding_mode"))
    # torch rounds (nearest) after clamping or reflecting a coordinate and does not move a
    # cubic coordinate before its taps; ONNX (the op) rounds first and moves every mode's
    # coordinate. They agree on the cases let through here.
    if (mode == 1 and padding == 2) or (mode == 2 and padding != 0):
        return f"interpolation {_GRID_MODES[mode]} with {_GRID_PADDINGS[padding]} padding " \
               "differs from ONNX's GridSample"
    return None


@on(aten.grid_sampler_2d.default, aten.grid_sampler_3d.default, aten.grid_sampler.default,
    check=_grid_check)
def _grid_sampler(cv: Any, node: fx.Node, x: Value, grid: Value, interpolation_mode: int,
                  padding_mode: int, align_corners: bool) -> Value:
    return cv.b.grid_sample(x, grid, mode=_GRID_MODES[int(interpolation_mode)],
                            padding=_GRID_PADDINGS[int(padding_mode)],
                            align_corners=bool(align_corners))
