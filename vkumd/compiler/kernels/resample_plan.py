"""Planners of the resampling kernels (:mod:`.resample`): resize, pad and transposed
convolution, each one launch over the output elements.

Resize's policy lives here: every ONNX coordinate transformation becomes, per axis, the exact
rational map ``source(o) = (o * a + b) / d`` in 32-bit integers, so the kernel rounds
nearest neighbours exactly as the float64 definition does. A scale whose exact fraction would
overflow int32 (a float32 scale such as 0.6 is ``10066330 / 2**24``) is replaced by its
nearest fraction with a smaller denominator: the source coordinates then move by less than
``out / 2**16`` of a pixel, below what bilinear weights in float32 resolve.
"""

from __future__ import annotations

import functools
import math
from fractions import Fraction

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import (
    PAD_MAX_RANK,
    PAD_MODES,
    RESIZE_MODES,
    RESIZE_ROUNDINGS,
)
from vkumd.compiler.kernels.resample import (
    CONV_TRANSPOSE2D,
    CONV_TRANSPOSE_PUSH,
    PAD,
    PAD_PUSH,
    RESIZE2D,
    RESIZE_PUSH,
)
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# The kernels index with 32-bit unsigned integers and map coordinates in int32.
_MAX_ELEMENTS = (1 << 32) - 1
_INT32 = (1 << 31) - 1


def _source_map(coordinate: str, size: int, out: int, scale: Fraction
                ) -> tuple[Fraction, Fraction]:
    """``(alpha, beta)`` with ``source(o) = o * alpha + beta`` (ONNX's formulas)."""
    if coordinate == "asymmetric":
        return 1 / scale, Fraction(0)
    if coordinate == "tf_half_pixel_for_nn":
        return 1 / scale, 1 / (2 * scale)
    if coordinate == "align_corners":
        length = size * scale
        if length == 1:
            return Fraction(0), Fraction(0)
        return Fraction(size - 1) / (length - 1), Fraction(0)
    if coordinate == "pytorch_half_pixel" and size * scale == 1:
        return Fraction(0), Fraction(-1, 2)
    beta = 1 / (2 * scale) - Fraction(1, 2)
    if coordinate == "half_pixel_symmetric":
        beta += Fraction(size, 2) - Fraction(out) / (2 * scale)
    return 1 / scale, beta


def _crop_map(size: int, out: int, start: Fraction, end: Fraction
              ) -> tuple[Fraction, Fraction]:
    """tf_crop_and_resize's ``(alpha, beta)``: the crop ``[start, end]`` (fractions of
    ``size - 1``) spread over the output, a single output reading the crop's middle."""
    if out == 1:
        return Fraction(0), (end - start) * (size - 1) / 2 + start * (size - 1)
    return (end - start) * (size - 1) / (out - 1), start * (size - 1)


def _integers(alpha: Fraction, beta: Fraction, out: int) -> tuple[int, int, int] | None:
    """``(a, b, d)`` with ``alpha = a / d``, ``beta = b / d``; None past int32."""
    d = alpha.denominator * beta.denominator // math.gcd(alpha.denominator, beta.denominator)
    a, b = int(alpha * d), int(beta * d)
    if 2 * d <= _INT32 and abs(a) * max(out - 1, 0) + abs(b) <= _INT32:
        return a, b, d
    return None


def resize_axis(coordinate: str, size: int, out: int, scale: float | None,
                crop: tuple[float, float] = (0.0, 1.0)) -> tuple[int, int, int]:
    """The integers ``(a, b, d)`` of ``source(o) = (o * a + b) / d`` along one axis.

    Args:
        coordinate: an ONNX coordinate_transformation_mode.
        size: the input length.
        out: the output length.
        scale: the scale the formula reads; None: ``out / size`` (ONNX's ``sizes`` input).
        crop: tf_crop_and_resize's (start, end) of the axis, as fractions of ``size - 1``.

    Raises:
        VkumdValueError: no fraction near the scale keeps the map inside int32.
    """
    exact = Fraction(out, size) if scale is None else Fraction(scale)
    for limit in (None, 1 << 16, 1 << 12, 1 << 8):
        if coordinate == "tf_crop_and_resize":
            # The crop's float32 ends have 24-bit denominators: the map's own fractions are
            # approximated (its coordinates move by less than out / 2**16 of a pixel).
            alpha, beta = _crop_map(size, out, Fraction(crop[0]), Fraction(crop[1]))
            if limit is not None:
                alpha, beta = alpha.limit_denominator(limit), beta.limit_denominator(limit)
        else:
            s = exact if limit is None else exact.limit_denominator(limit)
            if s <= 0:
                break
            alpha, beta = _source_map(coordinate, size, out, s)
        found = _integers(alpha, beta, out)
        if found is not None:
            return found
    raise VkumdValueError(f"resize2d: the scale {float(exact)!r} over {size} -> {out} "
                          "cannot be mapped in 32-bit integers; resize in steps")


@functools.lru_cache(maxsize=4096)
def resize2d_plan(caps: DeviceCaps, code: str, planes: int, hw: tuple[int, int],
                  out_hw: tuple[int, int], mode: str, coordinate: str, rounding: str,
                  scales: tuple[float, float] | None, cubic_a: float = -0.75,
                  exclude_outside: bool = False,
                  roi: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0),
                  extrapolation: float = 0.0, antialias: bool = False) -> FixedLaunch:
    """Resize ``planes`` (N * C) planes of ``hw`` to ``out_hw`` in ``mode`` (nearest,
    linear, cubic). ``scales`` (height, width) are what the coordinate formulas read; None:
    the sizes' ratios. ``roi`` (start_h, start_w, end_h, end_w) and ``extrapolation`` are
    tf_crop_and_resize's crop and outside value; ``antialias`` stretches a downsampling
    linear or cubic filter by the inverse scale. Operands: x, out.

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing; an unmappable scale.
    """
    total = planes * out_hw[0] * out_hw[1]
    for what, size in (("x", planes * hw[0] * hw[1]), ("out", total)):
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"resize2d: {what} has {size} elements; the kernel indexes "
                                  f"at most {_MAX_ELEMENTS} (split the batch)")
    maps = [resize_axis(coordinate, hw[i], out_hw[i], None if scales is None else scales[i],
                        (roi[i], roi[2 + i])) for i in (0, 1)]
    program = RESIZE2D.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = RESIZE_PUSH.pack(total, *hw, *out_hw, RESIZE_MODES.index(mode),
                            RESIZE_ROUNDINGS.index(rounding), *maps[0], *maps[1], cubic_a,
                            int(exclude_outside), int(coordinate == "tf_crop_and_resize"),
                            extrapolation, *(_antialias(antialias, hw[i], out_hw[i],
                                                        None if scales is None else scales[i])
                                             for i in (0, 1)))
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (1,))


def _antialias(on: bool, size: int, out: int, scale: float | None) -> float:
    """The filter's scale along an axis: min(scale, 1) when antialiasing, else 0 (off)."""
    if not on:
        return 0.0
    return min(out / size if scale is None else scale, 1.0)


def merge_padded(shape: tuple[int, ...], pads: tuple[int, ...]
                 ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Neighbouring unpadded dimensions merged into one (a padded 4-D NCHW tensor becomes
    ``[N*C, H, W]``): ``(shape, pads)`` with pads as (begins..., ends...)."""
    rank = len(shape)
    dims: list[int] = []
    begins: list[int] = []
    ends: list[int] = []
    for i, size in enumerate(shape):
        plain = pads[i] == 0 and pads[rank + i] == 0
        if plain and dims and begins[-1] == 0 and ends[-1] == 0:
            dims[-1] *= size
        else:
            dims.append(size)
            begins.append(pads[i])
            ends.append(pads[rank + i])
    return tuple(dims), (*begins, *ends)


@functools.lru_cache(maxsize=4096)
def pad_plan(caps: DeviceCaps, code: str, shape: tuple[int, ...], pads: tuple[int, ...],
             mode: str, value: float) -> FixedLaunch:
    """Pad ``x`` of ``shape`` by ``pads`` (begins..., ends...; negative crops) in ``mode``
    with ``value`` (constant mode). Operands: x, out.

    Raises:
        VkumdValueError: more than :data:`PAD_MAX_RANK` dimensions once neighbouring
            unpadded ones merge; a tensor past the kernel's 32-bit indexing.
    """
    dims, merged = merge_padded(shape, pads)
    rank = len(dims)
    if rank > PAD_MAX_RANK:
        raise VkumdValueError(f"pad: {rank} padded (or separated) dimensions of {shape}; the "
                              f"kernel takes {PAD_MAX_RANK} (pad in two steps)")
    lead = [max(p, 0) for p in merged[:rank]]
    start = [max(-p, 0) for p in merged[:rank]]
    kept = [d - s - max(-e, 0) for d, s, e in zip(dims, start, merged[rank:], strict=True)]
    out = [k + b + max(e, 0) for k, b, e in zip(kept, lead, merged[rank:], strict=True)]
    total = math.prod(out)
    for what, size in (("x", math.prod(dims)), ("out", total)):
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"pad: {what} has {size} elements; the kernel indexes at "
                                  f"most {_MAX_ELEMENTS} (split the tensor)")
    fill = [1] * (PAD_MAX_RANK - rank)
    zero = [0] * (PAD_MAX_RANK - rank)
    program = PAD.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = PAD_PUSH.pack(total, PAD_MODES.index(mode), value, *fill, *out, *fill, *dims,
                         *zero, *lead, *zero, *start, *fill, *kept)
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (1,))


def conv_transpose_is_gemm(kernel: tuple[int, int], stride: tuple[int, int],
                           dilation: tuple[int, int], pads: tuple[int, ...],
                           output_padding: tuple[int, int], groups: int) -> bool:
    """Whether the transposed convolution is the GEMM ``w[C, C_out*kh*kw]^T @ x[n, C, H*W]``
    followed by a permute that interleaves the taps (stride equal to the kernel, no dilation,
    pads or output padding, one group: the taps never overlap). PP-OCR's 2x2 stride-2
    upsampling is one. Measured on lavapipe (2 cores shared, loaded), 24 -> 24 channels,
    160x160: about 1 s in the gather kernel against 110-250 ms for numpy's einsum."""
    return (stride == kernel and dilation == (1, 1) and not any(pads)
            and not any(output_padding) and groups == 1)


@functools.lru_cache(maxsize=4096)
def conv_transpose2d_plan(caps: DeviceCaps, code: str, x_shape: tuple[int, int, int, int],
                          w_shape: tuple[int, int, int, int], out_shape: tuple[int, ...],
                          stride: tuple[int, int], dilation: tuple[int, int],
                          pads: tuple[int, int], groups: int, has_bias: bool) -> FixedLaunch:
    """Transposed convolution of ``x[n, c_in, h, w]`` with ``w[c_in, c_out / groups, kh,
    kw]`` into ``out_shape``; ``pads`` is (top, left). Operands: x, w, bias (w again when
    there is none), out.

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    n, c_in, h, w = x_shape
    _, _, kh, kw = w_shape
    total = math.prod(out_shape)
    for what, size in (("x", n * c_in * h * w), ("out", total)):
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"conv_transpose2d: {what} has {size} elements; the kernel "
                                  f"indexes at most {_MAX_ELEMENTS} (split the batch)")
    program = CONV_TRANSPOSE2D.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = CONV_TRANSPOSE_PUSH.pack(total, c_in, h, w, out_shape[1], out_shape[2],
                                    out_shape[3], kh, kw, *stride, *dilation, *pads, groups,
                                    int(has_bias))
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (3,))
