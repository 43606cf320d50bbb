"""Converters of ONNX's resampling operators: Resize (and opset 7-9's Upsample), GridSample,
ConvTranspose and Pad.

Resize runs on 4-D NCHW with its scales or sizes known at import time; the batch and channel
scales must be 1. keep_aspect_ratio_policy's one scale and rounded sizes are computed here;
tf_crop_and_resize's roi must be a constant that leaves the batch and channels whole. Before
opset 11 Resize and Upsample had no coordinate attributes: they are asymmetric, nearest
rounding down (onnxruntime's reading). ConvTranspose's ``output_shape`` and ``auto_pad``
become explicit pads and output padding here, 1-D as height 1 as Conv does.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.limits import RESIZE_COORDINATES, RESIZE_ROUNDINGS
from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.frontends.onnx.ops_vision import AUTO_PADS, _as_2d, _ints, _spatial
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Dim

_RESIZE_ATTRS = ("mode", "coordinate_transformation_mode", "nearest_mode", "cubic_coeff_a",
                 "exclude_outside", "extrapolation_value", "antialias", "axes",
                 "keep_aspect_ratio_policy", "scales")


def _floats(st: State, node: onnx.NodeProto, i: int, what: str) -> list[float] | None:
    """A known float vector input, None when absent or empty."""
    if not st.present(node, i):
        return None
    array = st.known(node.input[i])
    if array is None:
        raise NeedsConstant(f"{what} must be a constant (it is computed at run time)",
                            node.input[i])
    values = [float(v) for v in np.asarray(array, np.float64).reshape(-1)]
    return values or None


def _full(values: list[Any], axes: list[int] | None, rank: int, fill: Any, what: str
          ) -> list[Any]:
    """``values`` over ``axes`` spread to every dimension (``fill`` elsewhere)."""
    if axes is None:
        if len(values) != rank:
            raise Unsupported(f"{what} has {len(values)} entries for a rank-{rank} input")
        return values
    if len(values) != len(axes):
        raise Unsupported(f"{what} has {len(values)} entries for axes={axes}")
    full = [fill] * rank
    for a, v in zip(axes, values, strict=True):
        if not -rank <= a < rank:
            raise Unsupported(f"axes={axes} is out of range for a rank-{rank} input")
        full[a % rank] = v
    return full


@converter("Resize", "Upsample", attrs=_RESIZE_ATTRS)
def resize(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Nearest and bilinear resize of the last two axes of a 4-D input."""
    x = st.value(node.input[0])
    mode = attrs.get("mode", "nearest")
    if mode not in ("nearest", "linear", "bilinear", "cubic"):
        raise Unsupported(f"mode={mode!r}: ONNX defines nearest, linear and cubic")
    antialias = bool(int(attrs.get("antialias", 0)))
    if antialias and mode == "nearest":
        raise Unsupported("antialias=1 with mode='nearest' (ONNX antialiases linear and "
                          "cubic only)")
    policy = attrs.get("keep_aspect_ratio_policy", "stretch")
    if policy not in ("stretch", "not_larger", "not_smaller"):
        raise Unsupported(f"keep_aspect_ratio_policy={policy!r}; ONNX defines stretch, "
                          "not_larger and not_smaller")
    old = node.op_type == "Upsample" or st.opset < 11
    roi = None
    if old:
        coordinate, rounding = "asymmetric", "floor"
        if node.op_type == "Upsample" and "scales" in attrs:
            scales: list[float] | None = [float(s) for s in attrs["scales"]]
        else:
            scales = _floats(st, node, 1, "scales")
        sizes = None
    else:
        if "scales" in attrs:
            raise Unsupported("attribute scales is not a Resize attribute from opset 11")
        coordinate = attrs.get("coordinate_transformation_mode", "half_pixel")
        rounding = attrs.get("nearest_mode", "round_prefer_floor")
        if coordinate not in RESIZE_COORDINATES:
            raise Unsupported(f"coordinate_transformation_mode={coordinate!r}; vkumd takes "
                              f"{', '.join(RESIZE_COORDINATES)}")
        if rounding not in RESIZE_ROUNDINGS:
            raise Unsupported(f"nearest_mode={rounding!r}; ONNX defines "
                              f"{', '.join(RESIZE_ROUNDINGS)}")
        # Read before the sizes, so that a model feeding both as graph inputs is specialized
        # on both (a refusal names one input).
        roi = _floats(st, node, 1, "roi") if coordinate == "tf_crop_and_resize" else None
        scales = _floats(st, node, 2, "scales")
        sizes = (st.dims(node.input[3], "sizes")
                 if st.present(node, 3) and st.shape(node.input[3]) != (0,) else None)
    if scales is None and sizes is None:
        raise Unsupported("neither scales nor sizes is given")
    rank = len(x.shape)
    if rank != 4:
        raise Unsupported(f"Resize of a rank-{rank} input: vkumd resizes [N, C, H, W]")
    axes = [int(a) for a in attrs["axes"]] if "axes" in attrs else None
    kw: dict[str, Any] = {}
    if coordinate == "tf_crop_and_resize":
        kw["roi"] = _roi(roi, axes, rank)
        kw["extrapolation"] = float(attrs.get("extrapolation_value", 0.0))
    if antialias:
        kw["antialias"] = True
    if mode == "cubic":
        kw["cubic_a"] = float(attrs.get("cubic_coeff_a", -0.75))
        kw["exclude_outside"] = bool(int(attrs.get("exclude_outside", 0)))
    if sizes is not None:
        full = _full(list(sizes), axes, rank, None, "sizes")
        if policy != "stretch":
            full = _keep_aspect(full, list(x.shape), policy, kw)
        for i in (0, 1):
            if full[i] is not None and not _same(full[i], x.shape[i]):
                raise Unsupported(f"sizes={list(sizes)} changes the batch or channel "
                                  "dimension; vkumd resizes H and W only")
        kw["size"] = (full[2] if full[2] is not None else x.shape[2],
                      full[3] if full[3] is not None else x.shape[3])
    else:
        assert scales is not None
        full = _full(scales, axes, rank, 1.0, "scales")
        if full[0] != 1.0 or full[1] != 1.0:
            raise Unsupported(f"scales={scales} scales the batch or channel dimension; "
                              "vkumd resizes H and W only")
        if old and mode == "nearest" and min(full[2:]) < 1:
            raise Unsupported(f"scales={scales}: opset {st.opset} nearest downsampling "
                              "(onnxruntime rounds it up) is not supported")
        # ONNX's scales are float32; the output size and coordinates read that value.
        kw["scale"] = (float(np.float32(full[2])), float(np.float32(full[3])))
    y = st.b.resize2d(x, mode="linear" if mode == "bilinear" else mode,
                      coordinate=coordinate, rounding=rounding, **kw)
    return [y]


def _roi(roi: list[float] | None, axes: list[int] | None, rank: int
         ) -> tuple[float, float, float, float]:
    """tf_crop_and_resize's (start_h, start_w, end_h, end_w) from the roi input's values."""
    if roi is None:
        raise Unsupported("coordinate_transformation_mode='tf_crop_and_resize' without a roi")
    half = len(roi) // 2
    if len(roi) != 2 * half:
        raise Unsupported(f"roi={roi} has an odd number of entries")
    starts = _full(roi[:half], axes, rank, 0.0, "roi's starts")
    ends = _full(roi[half:], axes, rank, 1.0, "roi's ends")
    if starts[:2] != [0.0, 0.0] or ends[:2] != [1.0, 1.0]:
        raise Unsupported(f"roi={roi} crops the batch or channel dimension; vkumd crops H "
                          "and W only")
    return starts[2], starts[3], ends[2], ends[3]


def _keep_aspect(full: list[Any], shape: list[Any], policy: str, kw: dict[str, Any]
                 ) -> list[Any]:
    """ONNX's keep_aspect_ratio_policy: one scale for the given axes (the least or the
    greatest of their ratios), each size ``round(in * scale)``; ``kw['scale']`` is set to
    what the coordinate formulas then read."""
    given = [i for i, v in enumerate(full) if v is not None]
    if any(isinstance(shape[i], Dim) or isinstance(full[i], Dim) for i in given):
        raise Unsupported(f"keep_aspect_ratio_policy={policy!r} with symbolic sizes (bind "
                          "the sizes)")
    ratios = [int(full[i]) / int(shape[i]) for i in given]
    scale = min(ratios) if policy == "not_larger" else max(ratios)
    out = list(full)
    for i in given:
        out[i] = int(scale * int(shape[i]) + 0.5)
    kw["scale"] = (scale if 2 in given else 1.0, scale if 3 in given else 1.0)
    return out


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Dim) or isinstance(b, Dim):
        return a is b or a == b
    return int(a) == int(b)


@converter("ConvTranspose", attrs=("auto_pad", "dilations", "group", "kernel_shape",
                                    "output_padding", "output_shape", "pads", "strides"))
def conv_transpose(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """Transposed convolution with optional bias, 1-D or 2-D, groups included."""
    x, w = st.value(node.input[0]), st.value(node.input[1])
    n = _spatial("ConvTranspose", x)
    if len(w.shape) != n + 2:
        raise Unsupported(f"ConvTranspose weight of shape {tuple(w.shape)} for a {n}-D "
                          "convolution")
    kernel = [int(k) for k in w.shape[2:]]
    if "kernel_shape" in attrs and [int(k) for k in attrs["kernel_shape"]] != kernel:
        raise Unsupported(f"kernel_shape={list(attrs['kernel_shape'])} differs from the "
                          f"weight's {kernel}")
    strides = _ints(attrs, "strides", n, 1)
    dilations = _ints(attrs, "dilations", n, 1)
    extra = _ints(attrs, "output_padding", n, 0)
    mode = attrs.get("auto_pad", "NOTSET")
    if mode not in AUTO_PADS:
        raise Unsupported(f"auto_pad={mode!r}; ONNX defines {', '.join(AUTO_PADS)}")
    pads = [0] * (2 * n) if mode != "NOTSET" else _ints(attrs, "pads", 2 * n, 0)
    if any(p < 0 for p in pads):
        raise Unsupported(f"pads={pads}: negative pads are not supported")
    sizes = x.shape[2:]
    wanted = _ints(attrs, "output_shape", n, 0)[-n:] if "output_shape" in attrs else None
    if wanted is None and mode in ("SAME_UPPER", "SAME_LOWER"):
        if any(isinstance(s, Dim) for s in sizes):
            raise Unsupported(f"auto_pad={mode} of symbolic sizes {sizes} (bind the sizes)")
        wanted = [int(s) * st_ for s, st_ in zip(sizes, strides, strict=True)]
    if wanted is not None:
        if any(isinstance(s, Dim) for s in sizes):
            raise Unsupported(f"output_shape with symbolic sizes {sizes} (bind the sizes)")
        for i in range(n):
            span = (kernel[i] - 1) * dilations[i] + 1
            natural = strides[i] * (int(sizes[i]) - 1) + extra[i] + span
            if mode == "NOTSET" and natural - pads[i] - pads[n + i] <= wanted[i]:
                # The reference extends the output at its end, as output padding would.
                extra[i] += wanted[i] - (natural - pads[i] - pads[n + i])
                continue
            total = natural - wanted[i]
            small = total // 2
            pads[i], pads[n + i] = ((small, total - small) if mode == "SAME_UPPER"
                                    else (total - small, small))
    bias = st.value(node.input[2]) if st.present(node, 2) else None
    one_d = n == 1
    y = st.b.conv_transpose2d(
        _as_2d(st, x, one_d), _as_2d(st, w, one_d), bias,
        stride=(1, strides[0]) if one_d else tuple(strides),
        dilation=(1, dilations[0]) if one_d else tuple(dilations),
        pads=(0, pads[0], 0, pads[1]) if one_d else tuple(pads),
        output_padding=(0, extra[0]) if one_d else tuple(extra),
        groups=int(attrs.get("group", 1)))
    if one_d:
        y = st.b.reshape(y, (y.shape[0], y.shape[1], y.shape[3]))
    return [y]


@converter("Pad", attrs=("mode", "pads", "value"))
def pad(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Constant, reflect and edge padding; negative pads crop."""
    x = st.value(node.input[0])
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge"):
        raise Unsupported(f"mode={mode!r}: vkumd pads with constant, reflect and edge")
    rank = len(x.shape)
    if st.opset < 11:
        if "pads" not in attrs:
            raise Unsupported("pads is required")
        pads = [int(p) for p in attrs["pads"]]
        value = float(attrs.get("value", 0.0))
    else:
        for name in ("pads", "value"):
            if name in attrs:
                raise Unsupported(f"attribute {name} is an input from opset 11")
        value = 0.0
        # Read before pads, so that a model feeding both as graph inputs is specialized on
        # both (a refusal names one input; the integer pads are specialized on anyway).
        if st.present(node, 2):
            known = st.known(node.input[2])
            if known is None:
                raise NeedsConstant("constant_value must be a constant (it is computed at "
                                    "run time)", node.input[2])
            value = float(np.asarray(known, np.float64).reshape(-1)[0])
        pads = st.ints(node.input[1], "pads")
        if st.present(node, 3):
            axes = st.ints(node.input[3], "axes")
            half = len(pads) // 2
            if len(pads) != 2 * len(axes):
                raise Unsupported(f"pads={pads} has {len(pads)} entries for axes={axes}")
            pads = (_full(pads[:half], axes, rank, 0, "pads")
                    + _full(pads[half:], axes, rank, 0, "pads"))
    if len(pads) != 2 * rank:
        raise Unsupported(f"pads={pads} has {len(pads)} entries for a rank-{rank} input "
                          f"(it takes {2 * rank})")
    return [st.b.pad(x, pads=tuple(pads), mode=mode, value=value)]



# GridSample's opset-16 mode names and the names vkumd (and opset 20 on) use.
_GRID_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear",
               "cubic": "cubic", "nearest": "nearest"}


@converter("GridSample", attrs=("mode", "padding_mode", "align_corners"))
def grid_sample(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Sampling of 4-D (and, from opset 20, 5-D) inputs at a grid; a grid of another float
    type is cast to x's."""
    x = st.value(node.input[0])
    grid = st.value(node.input[1])
    mode = attrs.get("mode", "bilinear" if st.opset < 20 else "linear")
    if mode not in _GRID_MODES:
        raise Unsupported(f"mode={mode!r}; ONNX defines {', '.join(_GRID_MODES)}")
    padding = attrs.get("padding_mode", "zeros")
    if padding not in ("zeros", "border", "reflection"):
        raise Unsupported(f"padding_mode={padding!r}; ONNX defines zeros, border and "
                          "reflection")
    if len(x.shape) not in (4, 5):
        raise Unsupported(f"a rank-{len(x.shape)} input: vkumd samples [N, C, H, W] and "
                          "[N, C, D, H, W]")
    if grid.dtype is not x.dtype:
        grid = st.b.cast(grid, x.dtype.name)
    return [st.b.grid_sample(x, grid, mode=_GRID_MODES[mode], padding=padding,
                             align_corners=bool(int(attrs.get("align_corners", 0))))]


def _affine_base(sizes: list[int], align_corners: bool) -> np.ndarray:
    """AffineGrid's homogeneous base grid ``[prod(sizes), rank + 1]``: per point its
    normalized (x, y[, z]) and a 1 (ONNX's reference order)."""
    axes = []
    for n in sizes:
        if align_corners:
            axes.append(np.linspace(-1.0, 1.0, n) if n > 1 else np.full(1, -1.0))
        else:
            axes.append((2.0 * np.arange(n) + 1.0) / n - 1.0)
    mesh = np.meshgrid(*axes, indexing="ij")
    coords = [m.reshape(-1) for m in mesh[::-1]]  # x (the last axis) first
    return np.stack([*coords, np.ones_like(coords[0])], axis=1)


@converter("AffineGrid", attrs=("align_corners",))
def affine_grid(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                ) -> list[Bound | None]:
    """The base grid of the known ``size`` (a constant) times each batch entry's theta: one
    batched ``matmul``."""
    theta = st.value(node.input[0])
    size = st.ints(node.input[1], "size")
    if len(size) not in (4, 5):
        raise Unsupported(f"size={size}: AffineGrid makes 2-D ([N, C, H, W]) and 3-D "
                          "([N, C, D, H, W]) grids")
    n, spatial = size[0], size[2:]
    rank = len(spatial)
    if tuple(theta.shape) != (n, rank, rank + 1):
        raise Unsupported(f"theta has shape {tuple(theta.shape)}; size {size} takes "
                          f"[{n}, {rank}, {rank + 1}]")
    base = _affine_base(spatial, bool(int(attrs.get("align_corners", 0))))
    batched = np.ascontiguousarray(np.broadcast_to(base, (n, *base.shape)), np.float32)
    grid = st.b.matmul(st.constant(batched, theta.dtype.name), theta, trans_b=True)
    return [st.b.reshape(grid, (n, *spatial, rank))]


@converter("CenterCropPad", attrs=("axes",))
def center_crop_pad(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                    ) -> list[Bound | None]:
    """One ``pad`` whose negative pads crop: each axis centred on the asked size (the
    odd element cropped or padded at the end, as ONNX's reference)."""
    x = st.value(node.input[0])
    shape = st.ints(node.input[1], "shape")
    rank = len(x.shape)
    axes = [int(a) for a in attrs.get("axes", range(rank))]
    if len(axes) != len(shape) or any(not -rank <= a < rank for a in axes):
        raise Unsupported(f"shape={shape} and axes={axes} do not fit a rank-{rank} input")
    begins, ends = [0] * rank, [0] * rank
    for a, want in zip(axes, shape, strict=True):
        size = x.shape[a % rank]
        if isinstance(size, Dim):
            raise Unsupported(f"axis {a} is symbolic ({size}); bind the size")
        diff = want - int(size)
        begins[a % rank] = diff // 2 if diff >= 0 else -(-diff // 2)
        ends[a % rank] = diff - begins[a % rank]
    return [st.b.pad(x, pads=(*begins, *ends), mode="constant", value=0.0)]
