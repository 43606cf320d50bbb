"""One-input elementwise kernels: ``scale`` and ``cast`` (records and eager functions) and
``fill`` and ``copy`` (eager helpers no record carries), with the launch pieces the binary
families (:mod:`~vkumd.framework.opset.arith`, :mod:`~vkumd.framework.opset.compare`) share.

Element types: float32, float16, bfloat16 and int32. Floats are computed in float32 and
rounded once to the stored type (bfloat16 to nearest even, as
:func:`vkumd.framework.dtypes.float32_to_bfloat16_bits`); int32 arithmetic wraps on overflow.
float16 and bfloat16 need 16-bit storage; without it these ops raise
:class:`~vkumd.errors.CapabilityMissing`.

One pipeline per kernel and element type serves every shape: the shape and the broadcast
strides travel in push constants, and the grid turns 2-D past ``maxComputeWorkGroupCount[0]``
groups. Every op runs eagerly on the tensors' context and returns the output tensor.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import (
    BINARY_CODES,
    BOOL_CODES,
    CAST_CODES,
    ELEMENTWISE_CODES,
    ELEMENTWISE_MAX_DIMS,
    FLOAT8_CODES,
)
from vkumd.compiler.kernels.elementwise_plan import fill_plan, unary_plan
from vkumd.compiler.kernels.limits import PACKED_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.float8 import FORMATS, float32_to_float8_bits
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, only, real
from vkumd.framework.graph.reference import round_to
from vkumd.framework.graph.registry import REQUIRED, Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import (
    broadcast,
    check_dtype,
    check_storage,
    check_tensor,
    output,
)
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.packed import (
    check_packed_pair,
    packed_cast,
    packed_reference,
    round_mode_code,
)
from vkumd.framework.strided import copy_into, strided_operands
from vkumd.framework.tensor import Tensor

_INT32 = np.iinfo(np.int32)
CAST_TARGETS = (*CAST_CODES, *FLOAT8_CODES, *BOOL_CODES)
# What a float8 format converts to and from on the device: the float types and the formats.
FLOAT8_PARTNERS = ("float32", "float16", "bfloat16", *FLOAT8_CODES)


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The broadcast of ``shapes``, within the kernels' dimension limit.

    Raises:
        VkumdValueError: the shapes do not broadcast, or give more than
            :data:`ELEMENTWISE_MAX_DIMS` dimensions.
    """
    shape = shapes[0] if shapes.count(shapes[0]) == len(shapes) else broadcast(op, *shapes)
    if len(shape) > ELEMENTWISE_MAX_DIMS:
        raise VkumdValueError(f"{op}: {len(shape)} dimensions; at most {ELEMENTWISE_MAX_DIMS}")
    return shape


def _into(op: str, out: Tensor | None, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output shape: ``shape``, or ``out``'s when ``shape`` broadcasts into it.

    Raises:
        VkumdValueError: ``shape`` does not broadcast into ``out``'s shape.
    """
    if out is None:
        return shape
    check_tensor(op, out, "out=")
    if broadcast_shape(op, out.shape, shape) != out.shape:  # an input has more or larger dims
        raise VkumdValueError(f"{op}: shape {shape} does not broadcast into out= of shape "
                              f"{out.shape}")
    return out.shape


def as_float(value: Any) -> float:
    """``float(value)``, an int past float64 included (it becomes infinity, as any number
    past the type's range does)."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def scalar_bits(op: str, value: Any, dtype: dtypes.DType, what: str) -> int:
    """The storage bits of ``value`` as ``dtype`` (exactly what numpy would store)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"{op}: {what} must be a real number, not {type(value).__name__}")
    if dtype is dtypes.int32:
        if isinstance(value, numbers.Integral):
            as_int = int(value)
        elif float(value).is_integer():
            as_int = int(float(value))
        else:
            raise VkumdValueError(f"{op}: {what}={value!r} is not an integer, so it cannot "
                                  "apply to an int32 tensor; cast to float32 first")
        if not _INT32.min <= as_int <= _INT32.max:
            raise VkumdValueError(f"{op}: {what}={value!r} does not fit in int32")
        return as_int & 0xFFFFFFFF
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # overflow to inf is the answer
        source = np.array([as_float(value)],
                          dtype=np.float32 if dtype is dtypes.bfloat16 else None)
        bits = dtypes.to_storage(source, dtype)
    return int(bits.view(np.uint32 if dtype.itemsize == 4 else np.uint16)[0])


# -- fill, copy, cast, scale -------------------------------------------------------------


def fill(t: Tensor, value: Any) -> Tensor:
    """Set every element of ``t`` to ``value``, converted as numpy would store it.

    For int32, ``value`` must be an integer (or an integral float) within range; for float
    types it is rounded to the type (bfloat16: float64 -> float32 -> nearest even), and values
    past the type's range become infinity.

    Returns:
        ``t``.
    """
    check_tensor("fill", t, "the tensor")
    check_dtype("fill", t, "the tensor", ELEMENTWISE_CODES)
    bits = scalar_bits("fill", value, t.dtype, "value")
    if t.size == 0:
        return t
    t.context.run(fill_plan(t.context.caps, 8 * t.dtype.itemsize, t.size, bits), (t,))
    return t


def _unary(op: str, src: Tensor, out: Tensor | None, dtype: dtypes.DType,
           kind: str, alpha_bits: int = 0) -> Tensor:
    context = src.context
    out_shape = _into(op, out, src.shape)
    out = output(op, context, out, out_shape, dtype)
    if out.size == 0:
        return out
    codes = {**CAST_CODES, **FLOAT8_CODES, **BOOL_CODES}
    layout = None
    if src.binding is None:
        in_place = strided_operands(context.caps, (src,), out)
        if in_place is not None:  # a view read through the kernel's strides, no copy
            (src_bound,), (layout,) = in_place
    plan = unary_plan(context.caps, kind, codes[src.dtype.name], codes[dtype.name], src.shape,
                      out_shape, alpha_bits, layout=layout)
    context.run(plan, (src if layout is None else src_bound, out))
    return out


def copy(src: Tensor, out: Tensor | None = None) -> Tensor:
    """Copy ``src`` into ``out`` (a new tensor when None), broadcasting it to ``out.shape``.

    The stored bits are copied unchanged (NaN payloads and -0.0 included). ``out`` must have
    ``src``'s dtype; use :func:`cast` to change it.
    """
    check_tensor("copy", src, "src")
    check_dtype("copy", src, "src", {**CAST_CODES, **BOOL_CODES})
    if out is not None and isinstance(out, Tensor) and out.dtype is not src.dtype:
        raise VkumdTypeError(f"copy: out= is {out.dtype.name} and src is {src.dtype.name}; "
                             "use cast() to convert")
    if isinstance(out, Tensor) and out.binding is None and out.size and not out.released:
        # Into a strided view: one strided-copy launch writes through it.
        check_tensor("copy", out, "out=")
        if out.context is not src.context:
            raise VkumdValueError("copy: out= belongs to a different context than src")
        copy_into("copy", out, src)
        return out
    if src.binding is None and src.size and (out is None or isinstance(out, Tensor)):
        # From a strided view: one strided-copy launch reads it (and broadcasts it).
        out = output("copy", src.context, out, src.shape if out is None else out.shape,
                     src.dtype)
        copy_into("copy", out, src)
        return out
    if out is None or (isinstance(out, Tensor) and out.shape == src.shape):
        out = output("copy", src.context, out, src.shape, src.dtype)
        if out.size == 0:
            return out
        # Same shape: a transfer command, not a kernel (lavapipe moves 16 MiB in about 2 ms
        # this way against 13 ms through the copy kernel). Overlapping byte ranges, which a
        # transfer may not have, take the kernel.
        s, d = src.binding, out.binding
        if s is not None and d is not None and (s[0] != d[0] or s[1] + s[2] <= d[1]
                                                or d[1] + d[2] <= s[1]):
            src.context.current_stream().copy(s, d)
            return out
    return _unary("copy", src, out, src.dtype, "convert")


def cast(t: Tensor, dtype: Any, out: Tensor | None = None, *, saturate: bool = True,
         round_mode: str = "up") -> Tensor:
    """Convert ``t`` to ``dtype`` (float32, float16, bfloat16, int32, one of int16, uint16,
    uint32, uint64, float64, int8 and uint8, or a float8 format), like numpy's astype.

    Float to an integer truncates toward zero; values out of the target's range and NaN give
    undefined results. Conversions to floats round to nearest even (bfloat16 as
    :func:`~vkumd.framework.dtypes.float32_to_bfloat16_bits`); between the first four,
    int32 goes through float32 first, which is exact up to 2**24. Where either side is one of
    the wider types the value converts from its own type (float64 in double: int32 to
    float64 is exact), and integers to integers wrap as numpy's astype does. Casting to the
    same dtype copies. ``t`` broadcasts into ``out`` when given.

    The float8 formats (``float8_e4m3fn``, ``float8_e4m3fnuz``, ``float8_e5m2``,
    ``float8_e5m2fnuz``) convert to and from the float types and each other, as ONNX's Cast:
    rounded to nearest even; with ``saturate`` (the default, as ONNX's) a value past the
    format's range, infinity included, becomes its largest finite value; without it E5M2
    gives infinity and the others NaN (:mod:`vkumd.framework.float8`). They need 8-bit
    storage.

    The packed types (:mod:`vkumd.framework.packed`: ``int4``, ``uint4``, ``int2``,
    ``uint2`` to and from the float types, int32, int8 and uint8; ``float4_e2m1`` and
    ``float8_e8m0`` to and from the float types) convert as ONNX's Cast: integers wrap into
    an integer type, a float becomes its truncation when that fits and 0 otherwise;
    float4_e2m1 rounds to nearest even and saturates; float8_e8m0 rounds as ``round_mode``
    (``"up"``, ``"nearest"``, ``"down"``), saturating with ``saturate``. ``out`` then has
    ``t``'s shape; 8-bit storage is needed.

    Raises:
        VkumdTypeError: ``dtype`` is unknown or not one cast takes, or a float8 format
            paired with an integer type or float64, or a packed type with one it does not
            convert to or from.
        CapabilityMissing: float64 without shaderFloat64, uint64 without shaderInt64, a
            16-bit or 8-bit type without 16-bit or 8-bit storage.
    """
    check_tensor("cast", t, "the tensor")
    target = dtypes.dtype(dtype)
    if t.dtype.is_packed or target.is_packed:
        return packed_cast(t, target, out, saturate, round_mode)
    check_dtype("cast", t, "the tensor", CAST_TARGETS)
    if target.name not in CAST_TARGETS:
        raise VkumdTypeError(f"cast: {target.name} is not supported; cast takes "
                             f"{', '.join(CAST_TARGETS)}")
    _check_float8_pair(t.dtype, target)
    _check_bool_pair(t.dtype, target)
    check_storage("cast", target, t.context)
    return _unary("cast", t, out, target, "convert", int(bool(saturate)))


def _check_float8_pair(source: dtypes.DType, target: dtypes.DType) -> None:
    """Refuse a float8 format paired with int32 (no kernel converts those)."""
    if (source.is_float8 or target.is_float8) and not (source.name in FLOAT8_PARTNERS
                                                       and target.name in FLOAT8_PARTNERS):
        raise VkumdTypeError(f"cast: {source.name} to {target.name} is not supported; the "
                             f"float8 formats convert to and from {', '.join(FLOAT8_PARTNERS)}"
                             " (cast through float32)")


def _check_bool_pair(source: dtypes.DType, target: dtypes.DType) -> None:
    """Refuse bool paired with a float8 format: no kernel converts those."""
    for one, other in ((source, target), (target, source)):
        if one is dtypes.bool_ and other.is_float8:
            raise VkumdTypeError(f"cast: {source.name} to {target.name} is not supported; "
                                 "cast through float32")


def scale(t: Tensor, alpha: Any, out: Tensor | None = None) -> Tensor:
    """``t * alpha`` (``alpha`` a real number) into ``out`` or a new tensor of ``t``'s dtype.

    Floats multiply in float32 (``alpha`` rounded to float32). For int32, ``alpha`` must be
    an integer in int32's range and the product wraps on overflow.
    """
    check_tensor("scale", t, "the tensor")
    check_dtype("scale", t, "the tensor", ELEMENTWISE_CODES)
    as_type = t.dtype if t.dtype is dtypes.int32 else dtypes.float32
    bits = scalar_bits("scale", alpha, as_type, "alpha")
    return _unary("scale", t, out, t.dtype, "scale", bits)


# -- binary ------------------------------------------------------------------------------


def kernel_dtypes(node: Node) -> str | None:
    """Why the elementwise kernels cannot run ``node``: an operand type they do not take, or
    more dimensions than the eager ops index (:func:`broadcast_shape`), which would otherwise
    fail only when the graph is lowered."""
    return _unrunnable(node, ELEMENTWISE_CODES)


def cast_dtypes(node: Node) -> str | None:
    """Why the conversion kernel cannot run ``node``: a source type it does not take, or more
    dimensions than it indexes (as :func:`kernel_dtypes`)."""
    return _unrunnable(node, CAST_CODES)


def _unrunnable(node: Node, codes: Any) -> str | None:
    first = node.inputs[0]
    if first is not None and first.dtype.name not in codes:
        return (f"{node.op} has no device kernel for {first.dtype.name} (its kernels take "
                f"{', '.join(codes)})")
    rank = max(len(v.shape) for v in (*node.inputs, *node.outputs) if v is not None)
    if rank > ELEMENTWISE_MAX_DIMS:
        return (f"{node.op} of more dimensions than the elementwise kernels index "
                f"({rank}; at most {ELEMENTWISE_MAX_DIMS}: reshape to merge some)")
    return None


# The binary ops the kernel runs on bool operands (as their uint8 bytes).
BOOL_BINARY_RECORDS = ("eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
                       "bitwise_xor")


def binary_dtypes(node: Node) -> str | None:
    """Why the binary kernel cannot run ``node`` (an operand type it does not take)."""
    first = node.inputs[0]
    if first is not None and first.dtype is dtypes.bool_ and node.op in BOOL_BINARY_RECORDS:
        return None
    if first is not None and first.dtype.name not in BINARY_CODES:
        return (f"{node.op} has no device kernel for {first.dtype.name} (its kernel takes "
                f"{', '.join(BINARY_CODES)})")
    return None


def _scale_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    real("scale", attrs["alpha"], "alpha")
    return [only(ins)]


def _scale_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    x, out = ins[0], outs[0]
    if len(out.shape) > ELEMENTWISE_MAX_DIMS:
        # Same shape, both contiguous (_scale_refuse): one dimension of every element.
        x, out = x.alias((x.size,)), out.alias((out.size,))
    scale(x, attrs_of(node)["alpha"], out=out)


def _scale_refuse(node: Node) -> str | None:
    """As :func:`kernel_dtypes`, but a scale keeping its shape takes any number of
    dimensions: its lowering views both sides as one dimension."""
    x, y = node.inputs[0], node.outputs[0]
    if x is not None and x.shape == y.shape and all(isinstance(d, int) for d in x.shape):
        reason = kernel_dtypes(node)
        return reason if reason is None or "more dimensions" not in reason else None
    return kernel_dtypes(node)


define("scale", ("x",), {"alpha": 1.0}, inplace=True, rule=_scale_rule,
       saturating=("alpha",),
       reference=lambda a, attrs, s: [a[0] * as_float(attrs["alpha"])],
       lower=_scale_lower, refuse=_scale_refuse, eager=scale,
       elementwise=Elementwise(1, rewrite=lambda refs, at: (
           "mul", refs[0], ("const", float(at["alpha"])))))


def _cast_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    target = attrs["dtype"]
    name = target.name if isinstance(target, dtypes.DType) else target
    source = only(ins)
    if source.dtype.is_packed or name in PACKED_DTYPES:
        check_packed_pair(source.dtype, dtypes.dtype(name))
        round_mode_code(attrs["round_mode"], attrs["saturate"])
        return [TensorType(source.shape, dtypes.dtype(name))]
    if name not in CAST_TARGETS:
        raise VkumdTypeError(f"cast: dtype={target!r}; cast converts to "
                             f"{', '.join(CAST_TARGETS)}")
    _check_float8_pair(source.dtype, dtypes.dtype(name))
    _check_bool_pair(source.dtype, dtypes.dtype(name))
    return [TensorType(source.shape, dtypes.dtype(name))]


def _cast_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    attrs = attrs_of(node)
    cast(ins[0], attrs["dtype"], out=outs[0], saturate=attrs["saturate"],
         round_mode=attrs["round_mode"])


def _cast_reference(a: list[np.ndarray], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    target = dtypes.dtype(attrs["dtype"])
    if target.is_packed:
        return [packed_reference(a[0], target, bool(attrs["saturate"]), attrs["round_mode"])]
    if target.is_float8:  # from float32, as the device reads it
        bits = float32_to_float8_bits(a[0], FORMATS[target.name], bool(attrs["saturate"]))
        return [np.asarray(dtypes.from_storage(bits, target), np.float64)]
    return [round_to(a[0], target)]


def _cast_refuse(node: Node) -> str | None:
    """Why the unary kernel cannot run this cast (a float8 format with its partners passes)."""
    ends = [v.dtype for v in (node.inputs[0], node.outputs[0]) if v is not None]
    if any(d.is_packed for d in ends):
        return None  # the pair was checked by the rule; packed_cast takes any rank
    if any(d.is_float8 for d in ends) and all(d.name in FLOAT8_PARTNERS for d in ends):
        rank = max(len(v.shape) for v in (*node.inputs, *node.outputs) if v is not None)
        if rank > ELEMENTWISE_MAX_DIMS:
            return (f"cast of more dimensions than the elementwise kernels index ({rank}; at "
                    f"most {ELEMENTWISE_MAX_DIMS}: reshape to merge some)")
        return None
    if any(d is dtypes.bool_ for d in ends):  # bool converts to and from every cast type
        return _unrunnable(node, CAST_TARGETS)
    return cast_dtypes(node)


define("cast", ("x",), {"dtype": REQUIRED, "saturate": True, "round_mode": "up"},
       inplace=True, rule=_cast_rule, reference=_cast_reference, lower=_cast_lower,
       refuse=_cast_refuse, eager=cast,
       elementwise=Elementwise(1, "{a}", params=("dtype",), glsl_params={
           "float32": "{a}",
           "float16": "unpackHalf2x16(packHalf2x16(vec2({a}, 0.0))).x",
           "bfloat16": "bf16_to_float(float_to_bf16({a}))",
           "bool": "({a} != 0.0 ? 1.0 : 0.0)"}))
