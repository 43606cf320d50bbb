"""Casts to and from the packed types (int4, uint4, int2, uint2, float4_e2m1, float8_e8m0;
:mod:`vkumd.framework.packed`) on the device (``shaders/packed_cast.comp``), the part of
:func:`vkumd.framework.opset.unary.cast` that takes them, and their float64 reference."""

from __future__ import annotations

import numpy as np

from vkumd.compiler.kernels.packed_cast import packed_cast_plan, packed_partners
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.ops.checks import check_storage, output
from vkumd.framework.packed import E8M0_ROUND_MODES, FORMATS, codes_to_values, floats_to_codes
from vkumd.framework.tensor import Tensor


def check_packed_pair(source: dtypes.DType, target: dtypes.DType) -> None:
    """Refuse a cast between a packed type and one it does not convert to or from.

    Raises:
        VkumdTypeError: the pair is not taken (two packed types, or a packed float type and
            an integer type), with the types it takes.
    """
    packed = source if source.is_packed else target
    other = target if source.is_packed else source
    partners = packed_partners(packed.name)
    if other.name not in partners and other is not packed:
        raise VkumdTypeError(f"cast: {source.name} to {target.name} is not supported; "
                             f"{packed.name} converts to and from {', '.join(partners)} "
                             "(cast through one of them)")


def round_mode_code(round_mode: str, saturate: bool) -> int:
    """packed_cast.comp's mode word: bit 0 saturate, bits 1-2 the float8_e8m0 rounding."""
    if round_mode not in E8M0_ROUND_MODES:
        raise VkumdValueError(f"cast: round_mode={round_mode!r}; it is one of "
                              f"{', '.join(E8M0_ROUND_MODES)}")
    return int(bool(saturate)) | (E8M0_ROUND_MODES.index(round_mode) << 1)


def packed_cast(t: Tensor, target: dtypes.DType, out: Tensor | None, saturate: bool,
                round_mode: str) -> Tensor:
    """``cast`` where ``t`` or ``target`` is a packed type (:func:`~vkumd.framework.opset.
    unary.cast` documents the rules); ``out`` must have ``t``'s shape (no broadcast)."""
    check_packed_pair(t.dtype, target)
    mode = round_mode_code(round_mode, saturate)
    if t.dtype is target:
        raise VkumdTypeError(f"cast: {t.dtype.name} to itself; use copy() or the tensor "
                             "itself")
    for dt in (t.dtype, target):
        check_storage("cast", dt, t.context)
    if out is not None and isinstance(out, Tensor) and out.shape != t.shape:
        raise VkumdValueError(f"cast: out= has shape {out.shape}; a cast to or from "
                              f"{target.name if target.is_packed else t.dtype.name} writes "
                              f"the source's shape {t.shape} (no broadcast)")
    out = output("cast", t.context, out, t.shape, target, (t,))
    if out.size:
        t.context.run(packed_cast_plan(t.context.caps, t.dtype.name, target.name, t.size,
                                       mode), (t, out))
    return out


def packed_reference(values: np.ndarray, target: dtypes.DType, saturate: bool,
                     round_mode: str) -> np.ndarray:
    """The cast of float64 ``values`` to packed ``target`` as the device computes it from a
    float source (float32 first), widened to float64."""
    fmt = FORMATS[target.name]
    with np.errstate(invalid="ignore", over="ignore"):
        codes = floats_to_codes(np.asarray(values, np.float32), fmt, saturate, round_mode)
    return np.asarray(codes_to_values(codes, fmt), np.float64)
