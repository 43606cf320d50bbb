"""Elementwise operations with numpy broadcasting: fill, copy, cast, scale, add, sub, mul, div.

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
import struct
import warnings
from typing import Any

import numpy as np

from vkumd.compiler.kernels import ELEMENTWISE_OPS, ELEMENTWISE_UNARY_OPS, WORKGROUP
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor

MAX_DIMS = 6
_WORKGROUP = 64
_ALPHA = struct.Struct("<I")  # the last word of elementwise_unary's 15-word block
_FILL_PUSH = struct.Struct("<2I")
# vkumd dtype -> the type code the shaders take (shaders/include/elementwise_types.glsl).
_CODE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int32": "I32"}
_ROUNDING = {None: "div", "floor": "div_floor", "trunc": "div_trunc"}
_INT32 = np.iinfo(np.int32)


def _strides_for(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major ``shape`` broadcast to ``out_shape`` (0 = repeated)."""
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    strides = [0] * len(out_shape)
    step = 1
    for d in range(len(out_shape) - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    return strides


def _padded(values: list[int], fill: int) -> list[int]:
    return values + [fill] * (MAX_DIMS - len(values))


def _check_tensor(op: str, t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise VkumdTypeError(f"{op}: {what} must be a vkumd Tensor, not {type(t).__name__}")
    t.context.check_open(op)
    if t.released:
        raise VkumdValueError(f"{op}: {what} was released")
    return t


def _check_dtype(op: str, dtype: dtypes.DType, context: Any) -> None:
    if dtype.name not in _CODE:
        raise VkumdTypeError(f"{op}: {dtype.name} is not supported; elementwise ops take "
                             f"{', '.join(_CODE)}")
    if dtype.itemsize == 2 and not context.caps.storage_16bit:
        raise CapabilityMissing(f"{op}: {dtype.name} tensors need 16-bit storage "
                                f"(storageBuffer16BitAccess), which {context.caps.name} lacks; "
                                "cast to float32 on the host instead")


def _broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    try:
        shape = tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise VkumdValueError(f"{op}: shapes {listed} do not broadcast") from None
    if len(shape) > MAX_DIMS:
        raise VkumdValueError(f"{op}: {len(shape)} dimensions; at most {MAX_DIMS}")
    return shape


def _output(op: str, context: Any, out: Any, shape: tuple[int, ...],
            dtype: dtypes.DType) -> Tensor:
    """``out`` checked against ``shape`` and ``dtype``, or a new tensor when it is None."""
    if out is None:
        return context.empty(shape, dtype)
    _check_tensor(op, out, "out=")
    if out.context is not context:
        raise VkumdValueError(f"{op}: out= belongs to a different context than the inputs")
    if out.shape != shape or out.dtype is not dtype:
        raise VkumdValueError(f"{op}: out= has shape {out.shape} and dtype {out.dtype.name}; "
                              f"expected {shape} and {dtype.name}")
    return out


def _buffer(t: Tensor) -> tuple[Any, int, int]:
    assert t.allocation is not None  # callers return early for empty tensors
    return (t.allocation.buffer, t.allocation.offset, t.nbytes)


# Workgroups per dispatch on CPU drivers: lavapipe pays per workgroup, so a few large ones
# looping over the elements beat one per 64 elements. GPUs get one group per 64 elements
# up to the dispatch limit, then loop too.
CPU_WORKGROUPS = 64


def _grid(context: Any, n: int) -> tuple[int, int, int]:
    caps = context.caps
    cap = CPU_WORKGROUPS if caps.device_type == "cpu" else caps.max_workgroup_count[0]
    return (max(1, min(-(-n // _WORKGROUP), cap)), 1, 1)


def _collapse(out_shape: tuple[int, ...], strides: list[list[int]]
              ) -> tuple[list[int], list[list[int]]]:
    """Merge neighbouring dimensions that every input steps through contiguously; drop 1s."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(out_shape):
        if size == 1:
            continue
        if dims and all(s[d] * size == m[-1] for s, m in zip(strides, merged, strict=True)):
            dims[-1] *= size
            for s, m in zip(strides, merged, strict=True):
                m[-1] = s[d]
            continue
        dims.append(size)
        for s, m in zip(strides, merged, strict=True):
            m.append(s[d])
    return dims, merged


def _shape_push(out_shape: tuple[int, ...], *inputs: tuple[int, ...]) -> list[int]:
    """``ndim, shape[6]`` then each input's ``stride[6]``.

    Dimensions are collapsed first; ``ndim`` 0 tells the kernel that every input has the
    output's shape, so it indexes them directly.
    """
    if all(shape == out_shape for shape in inputs):
        return [0, *_padded([], 1)] + [0] * (MAX_DIMS * len(inputs))
    dims, strides = _collapse(out_shape, [_strides_for(shape, out_shape) for shape in inputs])
    if not dims:  # every dimension is 1
        dims, strides = [1], [[0] for _ in inputs]
    words = [len(dims), *_padded(dims, 1)]
    for stride in strides:
        words += _padded(stride, 0)
    return words


def _scalar_bits(op: str, value: Any, dtype: dtypes.DType, what: str) -> int:
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
        source = np.array([float(value)], dtype=np.float32 if dtype is dtypes.bfloat16 else None)
        bits = dtypes.to_storage(source, dtype)
    return int(bits.view(np.uint32 if dtype.itemsize == 4 else np.uint16)[0])


# Broadcast plans: (output shape, push constants up to the last shape word, grid), by the
# operand shapes and what the grid depends on. Programs repeat the same few shapes, and
# working a plan out costs more than recording the dispatch.
_PLANS: dict[tuple, tuple[tuple[int, ...], bytes, tuple[int, int, int]]] = {}
_MAX_PLANS = 4096


def _plan(op: str, context: Any, out_shape: tuple[int, ...] | None,
          *inputs: tuple[int, ...]) -> tuple[tuple[int, ...], bytes, tuple[int, int, int]]:
    """The plan for ``inputs`` broadcast to ``out_shape`` (``None``: to each other).

    Raises:
        VkumdValueError: the shapes do not broadcast, or not into ``out_shape``.
    """
    caps = context.caps
    key = (out_shape, inputs, caps.device_type, caps.max_workgroup_count)
    plan = _PLANS.get(key)
    if plan is None:
        if out_shape is None:
            shape = inputs[0] if all(s == inputs[0] for s in inputs) else _broadcast(op, *inputs)
        else:
            shape = _broadcast(op, out_shape, *inputs)
            if shape != out_shape:  # an input has more or larger dimensions
                listed = " and ".join(str(s) for s in inputs)
                raise VkumdValueError(f"{op}: shape {listed} does not broadcast into out= of "
                                      f"shape {out_shape}")
        size = math.prod(shape)
        words = [size, *_shape_push(shape, *inputs)]
        plan = (shape, struct.pack(f"<{len(words)}I", *words),
                _grid(context, size) if size else (0, 0, 0))
        if len(_PLANS) >= _MAX_PLANS:
            _PLANS.clear()
        _PLANS[key] = plan
    return plan


# -- fill, copy, cast, scale -------------------------------------------------------------


def fill(t: Tensor, value: Any) -> Tensor:
    """Set every element of ``t`` to ``value``, converted as numpy would store it.

    For int32, ``value`` must be an integer (or an integral float) within range; for float
    types it is rounded to the type (bfloat16: float64 -> float32 -> nearest even), and values
    past the type's range become infinity.

    Returns:
        ``t``.
    """
    _check_tensor("fill", t, "the tensor")
    _check_dtype("fill", t.dtype, t.context)
    bits = _scalar_bits("fill", value, t.dtype, "value")
    if t.size == 0:
        return t
    variant = {"WIDTH": 8 * t.dtype.itemsize, WORKGROUP: _WORKGROUP}
    t.context.dispatch("elementwise_fill", variant, [_buffer(t)],
                       _FILL_PUSH.pack(t.size, bits), _grid(t.context, t.size), writes=(0,))
    return t


def _unary(op: str, src: Tensor, out: Tensor | None, dtype: dtypes.DType,
           kind: str, alpha_bits: int = 0) -> Tensor:
    context = src.context
    if out is not None:
        _check_tensor(op, out, "out=")
    out_shape, head, groups = _plan(op, context, None if out is None else out.shape, src.shape)
    out = _output(op, context, out, out_shape, dtype)
    if out.size == 0:
        return out
    push = head + _ALPHA.pack(alpha_bits)
    variant = {"SRC": _CODE[src.dtype.name], "DST": _CODE[dtype.name],
               "OP": ELEMENTWISE_UNARY_OPS[kind], WORKGROUP: _WORKGROUP}
    context.dispatch("elementwise_unary", variant, [_buffer(src), _buffer(out)], push, groups,
                     writes=(1,))
    return out


def copy(src: Tensor, out: Tensor | None = None) -> Tensor:
    """Copy ``src`` into ``out`` (a new tensor when None), broadcasting it to ``out.shape``.

    The stored bits are copied unchanged (NaN payloads and -0.0 included). ``out`` must have
    ``src``'s dtype; use :func:`cast` to change it.
    """
    _check_tensor("copy", src, "src")
    _check_dtype("copy", src.dtype, src.context)
    if out is not None and isinstance(out, Tensor) and out.dtype is not src.dtype:
        raise VkumdTypeError(f"copy: out= is {out.dtype.name} and src is {src.dtype.name}; "
                             "use cast() to convert")
    return _unary("copy", src, out, src.dtype, "convert")


def cast(t: Tensor, dtype: Any, out: Tensor | None = None) -> Tensor:
    """Convert ``t`` to ``dtype`` (float32, float16, bfloat16 or int32), like numpy's astype.

    Float to int32 truncates toward zero; values out of int32's range and NaN give undefined
    results. Conversions to floats round to nearest even (bfloat16 as
    :func:`~vkumd.framework.dtypes.float32_to_bfloat16_bits`); int32 goes through float32
    first, which is exact up to 2**24. Casting to the same dtype copies. ``t`` broadcasts into
    ``out`` when given.

    Raises:
        VkumdTypeError: ``dtype`` is unknown or not one of the four.
    """
    _check_tensor("cast", t, "the tensor")
    target = dtypes.dtype(dtype)
    _check_dtype("cast", t.dtype, t.context)
    _check_dtype("cast", target, t.context)
    return _unary("cast", t, out, target, "convert")


def scale(t: Tensor, alpha: Any, out: Tensor | None = None) -> Tensor:
    """``t * alpha`` (``alpha`` a real number) into ``out`` or a new tensor of ``t``'s dtype.

    Floats multiply in float32 (``alpha`` rounded to float32). For int32, ``alpha`` must be
    an integer in int32's range and the product wraps on overflow.
    """
    _check_tensor("scale", t, "the tensor")
    _check_dtype("scale", t.dtype, t.context)
    as_type = t.dtype if t.dtype is dtypes.int32 else dtypes.float32
    bits = _scalar_bits("scale", alpha, as_type, "alpha")
    return _unary("scale", t, out, t.dtype, "scale", bits)


# -- binary ------------------------------------------------------------------------------


def _binary(op: str, a: Tensor, b: Tensor, out: Tensor | None, kernel_op: str) -> Tensor:
    _check_tensor(op, a, "the first operand")
    _check_tensor(op, b, "the second operand")
    if a.context is not b.context:
        raise VkumdValueError(f"{op}: the operands belong to different contexts")
    if a.dtype is not b.dtype:
        raise VkumdTypeError(f"{op}: dtypes differ ({a.dtype.name} and {b.dtype.name}); "
                             "cast one first")
    context = a.context
    _check_dtype(op, a.dtype, context)
    out_shape, push, groups = _plan(op, context, None, a.shape, b.shape)
    out = _output(op, context, out, out_shape, a.dtype)
    if out.size == 0:
        return out
    variant = {"DTYPE": _CODE[a.dtype.name], "OP": ELEMENTWISE_OPS[kernel_op],
               WORKGROUP: _WORKGROUP}
    context.dispatch("elementwise_binary", variant, [_buffer(a), _buffer(b), _buffer(out)],
                     push, groups, writes=(2,))
    return out


def add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` with numpy broadcasting; both operands have the same dtype."""
    return _binary("add", a, b, out, "add")


def sub(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a - b`` with numpy broadcasting."""
    return _binary("sub", a, b, out, "sub")


def mul(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    return _binary("mul", a, b, out, "mul")


def div(a: Tensor, b: Tensor, *, rounding: str | None = None,
        out: Tensor | None = None) -> Tensor:
    """``a / b`` with numpy broadcasting, rounded as ``rounding`` says (as ``torch.div``).

    Args:
        rounding: ``None`` for true division (floats only); ``"floor"`` rounds the quotient
            down (numpy's ``floor_divide`` for int32); ``"trunc"`` rounds it toward zero
            (C's integer division). int32 needs one of the two. For floats the float32
            quotient is rounded.

    int32 division by zero gives 0 (as numpy's ``floor_divide``), and ``INT32_MIN / -1``
    wraps to ``INT32_MIN``.

    Raises:
        VkumdTypeError: int32 operands without ``rounding``.
        VkumdValueError: an unknown ``rounding``.
    """
    if rounding not in _ROUNDING:
        raise VkumdValueError(f"div: rounding={rounding!r}; use None, 'floor' or 'trunc'")
    if rounding is None and isinstance(a, Tensor) and a.dtype is dtypes.int32:
        raise VkumdTypeError("div: int32 true division would need a float result; cast to "
                             "float32 first, or pass rounding='floor' (numpy's //) or "
                             "rounding='trunc'")
    return _binary("div", a, b, out, _ROUNDING[rounding])
