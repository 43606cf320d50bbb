"""``quantize_linear`` and ``dequantize_linear``: ONNX's QuantizeLinear and DequantizeLinear,
per tensor, per axis or blocked, on the device (``shaders/qlinear.comp``).

Quantized types: uint8, int8, the float8 formats, and the packed int4, uint4, int2, uint2 and
float4_e2m1 (:mod:`vkumd.framework.packed`; float4_e2m1 quantizes as ONNX's reference,
``x / scale + zero_point`` rounded to nearest even and saturated); float types: float32 and
float16. The
scale is float32 (the ONNX importer converts another first). ``quantize_linear`` computes
``x / scale`` in float32, rounds it to nearest even and adds the zero point, clamped to the
type's range (to a float8 format: the float8 cast, saturating or not, whose zero point is
zero); ``dequantize_linear`` computes ``(q - zero_point) * scale`` in float32.

Which scale applies to an element (ONNX's rule): a scale of one element applies to all
(per tensor); a 1-D scale as long as ``x.shape[axis]`` gives one per index of that axis (per
axis); with ``block_size`` > 0 the scale has x's rank and shape except along ``axis``, where it
has ``ceil(x.shape[axis] / block_size)`` (blocked). A zero point has the scale's shape and the
quantized type.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import QLINEAR_FLOAT_DTYPES, QLINEAR_QUANT_DTYPES
from vkumd.compiler.kernels.qlinear import qlinear_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.float8 import FORMATS, float8_bits_to_float32, float32_to_float8_bits
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.packed import FORMATS as PACKED_FORMATS
from vkumd.framework.packed import codes_to_values, floats_to_codes
from vkumd.framework.tensor import Tensor

_INT_RANGES = {"uint8": (0, 255), "int8": (-128, 127)}
_INT_RANGES.update({n: (f.low, f.high) for n, f in PACKED_FORMATS.items() if f.is_int})


def scale_words(op: str, shape: tuple[int, ...], scale: tuple[int, ...], axis: Any,
                block_size: Any) -> tuple[int, ...]:
    """The kernel's ``(inner, axis_len, block, s_outer, s_axis, s_inner)`` for ``x`` of
    ``shape`` and a scale of shape ``scale`` (see the module's rule).

    Raises:
        VkumdTypeError: axis or block_size not an int.
        VkumdValueError: axis out of range, block_size negative, or a scale shape that fits
            none of the three forms.
    """
    for name, value in (("axis", axis), ("block_size", block_size)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise VkumdTypeError(f"{op}: {name} must be an int, not {value!r}")
    n = math.prod(shape)
    if math.prod(scale) == 1 and (block_size == 0 or len(scale) <= 1):
        return (1, max(n, 1), max(n, 1), 0, 0, 0)
    if not -len(shape) <= axis < len(shape):
        raise VkumdValueError(f"{op}: axis {axis} is out of range for x of shape "
                              f"{format_shape(shape)}")
    axis = int(axis) % len(shape)
    inner, length = math.prod(shape[axis + 1:]), shape[axis]
    if block_size < 0:
        raise VkumdValueError(f"{op}: block_size must be >= 0, got {block_size}")
    if block_size == 0:
        if scale != (length,):
            raise VkumdValueError(f"{op}: the scale has shape {format_shape(scale)}; per axis "
                                  f"it must be [{length}] (x.shape[{axis}]), or one element, "
                                  "or pass block_size for blocked quantization")
        return (max(inner, 1), max(length, 1), 1, 0, 1, 0)
    blocks = -(-length // block_size)
    want = shape[:axis] + (blocks,) + shape[axis + 1:]
    if scale != want:
        raise VkumdValueError(f"{op}: the scale has shape {format_shape(scale)}; blocks of "
                              f"{block_size} along axis {axis} need {format_shape(want)}")
    return (max(inner, 1), max(length, 1), int(block_size), blocks * inner, inner, 1)


def _check(op: str, x: Tensor, scale: Tensor, zero_point: Tensor | None, qtype: str,
           axis: Any, block_size: Any) -> tuple[int, ...]:
    """The operands checked (context, types, shapes); the kernel's scale words."""
    for what, t in (("scale", scale), ("zero_point", zero_point)):
        if t is not None:
            check_tensor(op, t, what)
            if t.context is not x.context:
                raise VkumdValueError(f"{op}: {what} belongs to a different context than x")
    if scale.dtype is not dtypes.float32:
        raise VkumdTypeError(f"{op}: the scale is {scale.dtype.name}; it must be float32 "
                             "(cast() converts)")
    if zero_point is not None:
        if zero_point.dtype.name != qtype:
            raise VkumdTypeError(f"{op}: zero_point is {zero_point.dtype.name}; it must be "
                                 f"{qtype}, the quantized type")
        if zero_point.shape != scale.shape and not zero_point.size == scale.size == 1:
            raise VkumdValueError(f"{op}: zero_point has shape {format_shape(zero_point.shape)}"
                                  f"; it must have the scale's, {format_shape(scale.shape)}")
    for name in {qtype, x.dtype.name}:
        check_storage(op, dtypes.dtype(name), x.context)
    return scale_words(op, x.shape, scale.shape, axis, block_size)


def _run(op: str, x: Tensor, scale: Tensor, zero_point: Tensor | None, out: Tensor,
         qtype: str, ftype: str, words: tuple[int, ...], saturate: bool) -> Tensor:
    if out.size == 0:
        return out
    plan = qlinear_plan(x.context.caps, op.split("_")[0], qtype, ftype,
                        (out.size, *words, int(zero_point is not None), int(saturate)))
    x.context.run(plan, (x, scale, zero_point, out))
    return out


def quantize_linear(x: Tensor, scale: Tensor, zero_point: Tensor | None = None, *,
                    axis: int = 1, block_size: int = 0, dtype: Any = "uint8",
                    saturate: bool = True, out: Tensor | None = None) -> Tensor:
    """``clamp(round(x / scale) + zero_point)`` in ``dtype`` (ONNX's QuantizeLinear).

    Args:
        x: float32 or float16.
        scale: float32; one element, one per index of ``axis``, or blocked (module doc).
        zero_point: optional, the scale's shape, of ``dtype`` (zero when absent).
        axis: the quantized axis (per axis and blocked; negative counts from the end).
        block_size: elements of ``axis`` per scale; 0 for per tensor or per axis.
        dtype: uint8, int8 or a float8 format (the zero point's type when given).
        saturate: float8 only: clamp values past the format's range (else infinity or NaN).
        out: optional output of x's shape and ``dtype``.

    Returns:
        x's shape, ``dtype``.

    Raises:
        VkumdTypeError: x not float32/float16, a scale not float32, a quantized type not
            taken, a zero point of another type.
        VkumdValueError: a scale or zero point of a shape that fits no form; axis out of
            range.
    """
    op = "quantize_linear"
    x = check_tensor(op, x, "x")
    qtype = dtypes.dtype(dtype).name
    if x.dtype.name not in QLINEAR_FLOAT_DTYPES or qtype not in QLINEAR_QUANT_DTYPES:
        raise VkumdTypeError(f"{op}: {x.dtype.name} to {qtype} is not supported; x is one of "
                             f"{', '.join(QLINEAR_FLOAT_DTYPES)}, dtype one of "
                             f"{', '.join(QLINEAR_QUANT_DTYPES)}")
    words = _check(op, x, scale, zero_point, qtype, axis, block_size)
    out = output(op, x.context, out, x.shape, dtypes.dtype(qtype), (x, scale, zero_point))
    return _run(op, x, scale, zero_point, out, qtype, x.dtype.name, words, bool(saturate))


def dequantize_linear(x: Tensor, scale: Tensor, zero_point: Tensor | None = None, *,
                      axis: int = 1, block_size: int = 0, dtype: Any = "float32",
                      out: Tensor | None = None) -> Tensor:
    """``(x - zero_point) * scale`` in ``dtype`` (ONNX's DequantizeLinear).

    Args:
        x: uint8, int8 or a float8 format.
        scale: float32; one element, one per index of ``axis``, or blocked (module doc).
        zero_point: optional, the scale's shape, of x's type.
        axis: the quantized axis (per axis and blocked; negative counts from the end).
        block_size: elements of ``axis`` per scale; 0 for per tensor or per axis.
        dtype: the result's type, float32 or float16.
        out: optional output of x's shape and ``dtype``.

    Returns:
        x's shape, ``dtype``.

    Raises:
        VkumdTypeError: x or ``dtype`` not taken, a scale not float32, a zero point of
            another type.
        VkumdValueError: a scale or zero point of a shape that fits no form; axis out of
            range.
    """
    op = "dequantize_linear"
    x = check_tensor(op, x, "x")
    ftype = dtypes.dtype(dtype).name
    if x.dtype.name not in QLINEAR_QUANT_DTYPES or ftype not in QLINEAR_FLOAT_DTYPES:
        raise VkumdTypeError(f"{op}: {x.dtype.name} to {ftype} is not supported; x is one of "
                             f"{', '.join(QLINEAR_QUANT_DTYPES)}, dtype one of "
                             f"{', '.join(QLINEAR_FLOAT_DTYPES)}")
    words = _check(op, x, scale, zero_point, x.dtype.name, axis, block_size)
    out = output(op, x.context, out, x.shape, dtypes.dtype(ftype), (x, scale, zero_point))
    return _run(op, x, scale, zero_point, out, x.dtype.name, ftype, words, True)


# -- records -----------------------------------------------------------------------------


def _expand(value: np.ndarray, shape: tuple[int, ...], axis: int, block_size: int
            ) -> np.ndarray:
    """A scale or zero point repeated to ``shape`` (per tensor, per axis or blocked)."""
    value = np.asarray(value)
    if value.size == 1 and (block_size == 0 or value.ndim <= 1):
        return value.reshape(())
    axis %= len(shape)
    if block_size == 0:
        return value.reshape([-1 if d == axis else 1 for d in range(len(shape))])
    return np.repeat(value, block_size, axis=axis).take(range(shape[axis]), axis=axis)


def quantize_reference(x: np.ndarray, scale: np.ndarray, zero: np.ndarray | None, qtype: str,
                       axis: int, block_size: int, saturate: bool) -> np.ndarray:
    """QuantizeLinear as ONNX's reference computes it: ``x / scale`` in float32, then round
    half to even, add the zero point and clamp (float8: the saturating or plain cast)."""
    ratio = (np.asarray(x, np.float32)
             / _expand(scale, x.shape, axis, block_size).astype(np.float32))
    if qtype in FORMATS:
        fmt = FORMATS[qtype]
        return float8_bits_to_float32(float32_to_float8_bits(ratio, fmt, saturate), fmt)
    if qtype == "float4_e2m1":  # x / scale + zero point, rounded and saturated (packed.py)
        shift = 0.0 if zero is None else _expand(zero, x.shape, axis, block_size)
        fmt = PACKED_FORMATS[qtype]
        return codes_to_values(floats_to_codes(ratio + np.float32(shift), fmt), fmt)
    low, high = _INT_RANGES[qtype]
    shift = 0.0 if zero is None else _expand(zero, x.shape, axis, block_size)
    return np.clip(np.rint(ratio.astype(np.float64)) + shift, low, high)


def _rule(op: str):  # noqa: ANN202  (a rule of the registry's signature)
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x, scale, zero = ins
        assert x is not None and scale is not None
        quantize = op == "quantize_linear"
        target = dtypes.dtype(attrs["dtype"])
        qtype = target.name if quantize else x.dtype.name
        ftype = x.dtype.name if quantize else target.name
        if qtype not in QLINEAR_QUANT_DTYPES or ftype not in QLINEAR_FLOAT_DTYPES:
            raise VkumdTypeError(f"{op}: {x.dtype.name} to {target.name} is not supported; "
                                 f"the quantized types are {', '.join(QLINEAR_QUANT_DTYPES)}, "
                                 f"the float ones {', '.join(QLINEAR_FLOAT_DTYPES)}")
        if scale.dtype is not dtypes.float32:
            raise VkumdTypeError(f"{op}: the scale is {scale.dtype.name}; it must be float32")
        if zero is not None and zero.dtype.name != qtype:
            raise VkumdTypeError(f"{op}: zero_point is {zero.dtype.name}; it must be {qtype}")
        shapes = [tuple(dims.resolve(d) for d in t.shape) for t in (x, scale)]
        if all(isinstance(d, int) for s in shapes for d in s):
            scale_words(op, shapes[0], shapes[1], attrs["axis"], attrs["block_size"])
        return [TensorType(x.shape, target)]
    return rule


def _quantize_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    quantize_linear(ins[0], ins[1], ins[2], axis=at["axis"], block_size=at["block_size"],
                    dtype=at["dtype"], saturate=at["saturate"], out=outs[0])


def _dequantize_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    dequantize_linear(ins[0], ins[1], ins[2], axis=at["axis"], block_size=at["block_size"],
                      dtype=at["dtype"], out=outs[0])


def _quantize_reference(a: list[Any], at: dict[str, Any], s: Any) -> list[np.ndarray]:
    return [quantize_reference(a[0], a[1], a[2], dtypes.dtype(at["dtype"]).name, at["axis"],
                               at["block_size"], bool(at["saturate"]))]


def _dequantize_reference(a: list[Any], at: dict[str, Any], s: Any) -> list[np.ndarray]:
    x, scale, zero = a
    shift = 0.0 if zero is None else _expand(zero, x.shape, at["axis"], at["block_size"])
    return [(np.asarray(x, np.float64) - shift)
            * _expand(scale, x.shape, at["axis"], at["block_size"])]


define("quantize_linear", ("x", "scale", "zero_point?"),
       {"axis": 1, "block_size": 0, "dtype": "uint8", "saturate": True},
       rule=_rule("quantize_linear"), reference=_quantize_reference, lower=_quantize_lower,
       eager=quantize_linear)
define("dequantize_linear", ("x", "scale", "zero_point?"),
       {"axis": 1, "block_size": 0, "dtype": "float32"},
       rule=_rule("dequantize_linear"), reference=_dequantize_reference,
       lower=_dequantize_lower, eager=dequantize_linear)
