"""Elementwise operations with numpy broadcasting: fill, copy, cast, scale, add, sub, mul, div,
and the comparisons lt, le, gt, ge, eq, ne.

Element types: float32, float16, bfloat16 and int32. Floats are computed in float32 and
rounded once to the stored type (bfloat16 to nearest even, as
:func:`vkumd.framework.dtypes.float32_to_bfloat16_bits`); int32 arithmetic wraps on overflow.
float16 and bfloat16 need 16-bit storage; without it these ops raise
:class:`~vkumd.errors.CapabilityMissing`.

One pipeline per kernel and element type serves every shape: the shape and the broadcast
strides travel in push constants, and the grid turns 2-D past ``maxComputeWorkGroupCount[0]``
groups. Every op runs eagerly on the tensors' context and returns the output tensor.

The binary ops take a Python (or numpy) real number for either operand, as ``torch.add``
does; it is converted to the tensor's dtype as :func:`fill` converts (an int32 tensor takes
only integral numbers: vkumd never changes a dtype silently). The cheapest exact launch
is chosen: ``mul`` by a number is one :func:`scale`, and so is ``div`` of a float tensor by
a power of two (its reciprocal is exact); everything else fills a 0-d tensor with the
number (one small launch) and broadcasts it.
"""

from __future__ import annotations

import math
import numbers
import warnings
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import (
    ELEMENTWISE_CODES,
    ELEMENTWISE_MAX_DIMS,
    MASK_CODE,
)
from vkumd.compiler.kernels.elementwise_plan import binary_plan, fill_plan, unary_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.ops.checks import (
    broadcast,
    check_dtype,
    check_pair,
    check_storage,
    check_tensor,
    output,
)
from vkumd.framework.tensor import Tensor

_ROUNDING = {None: "div", "floor": "div_floor", "trunc": "div_trunc"}
_INT32 = np.iinfo(np.int32)
# Powers of two whose reciprocal is a normal number in float32, float16 and bfloat16: dividing
# by one is exactly a multiplication by its reciprocal.
_EXACT_RECIPROCAL = (2.0**-14, 2.0**14)


def _broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
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
    if _broadcast(op, out.shape, shape) != out.shape:  # an input has more or larger dims
        raise VkumdValueError(f"{op}: shape {shape} does not broadcast into out= of shape "
                              f"{out.shape}")
    return out.shape


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
    bits = _scalar_bits("fill", value, t.dtype, "value")
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
    codes = ELEMENTWISE_CODES
    plan = unary_plan(context.caps, kind, codes[src.dtype.name], codes[dtype.name], src.shape,
                      out_shape, alpha_bits)
    context.run(plan, (src, out))
    return out


def copy(src: Tensor, out: Tensor | None = None) -> Tensor:
    """Copy ``src`` into ``out`` (a new tensor when None), broadcasting it to ``out.shape``.

    The stored bits are copied unchanged (NaN payloads and -0.0 included). ``out`` must have
    ``src``'s dtype; use :func:`cast` to change it.
    """
    check_tensor("copy", src, "src")
    check_dtype("copy", src, "src", ELEMENTWISE_CODES)
    if out is not None and isinstance(out, Tensor) and out.dtype is not src.dtype:
        raise VkumdTypeError(f"copy: out= is {out.dtype.name} and src is {src.dtype.name}; "
                             "use cast() to convert")
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
    check_tensor("cast", t, "the tensor")
    target = dtypes.dtype(dtype)
    check_dtype("cast", t, "the tensor", ELEMENTWISE_CODES)
    if target.name not in ELEMENTWISE_CODES:
        raise VkumdTypeError(f"cast: {target.name} is not supported; cast takes "
                             f"{', '.join(ELEMENTWISE_CODES)}")
    check_storage("cast", target, t.context)
    return _unary("cast", t, out, target, "convert")


def scale(t: Tensor, alpha: Any, out: Tensor | None = None) -> Tensor:
    """``t * alpha`` (``alpha`` a real number) into ``out`` or a new tensor of ``t``'s dtype.

    Floats multiply in float32 (``alpha`` rounded to float32). For int32, ``alpha`` must be
    an integer in int32's range and the product wraps on overflow.
    """
    check_tensor("scale", t, "the tensor")
    check_dtype("scale", t, "the tensor", ELEMENTWISE_CODES)
    as_type = t.dtype if t.dtype is dtypes.int32 else dtypes.float32
    bits = _scalar_bits("scale", alpha, as_type, "alpha")
    return _unary("scale", t, out, t.dtype, "scale", bits)


# -- binary ------------------------------------------------------------------------------


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _scalar_tensor(op: str, value: Any, like: Tensor, what: str) -> Tensor:
    """A 0-d tensor of ``like``'s dtype and context holding ``value`` (one fill launch)."""
    bits = _scalar_bits(op, value, like.dtype, what)  # refuses a bad number before allocating
    filled = like.context.empty((), like.dtype)
    filled.context.run(fill_plan(like.context.caps, 8 * like.dtype.itemsize, 1, bits),
                       (filled,))
    return filled


def _with_number(op: str, a: Any, b: Any, out: Tensor | None, kernel_op: str) -> Tensor:
    """A binary op with a real number on one side (see the module notes)."""
    if _is_number(a) and _is_number(b):
        raise VkumdTypeError(f"{op}: both operands are numbers; at least one must be a vkumd "
                             "Tensor (compute plain numbers in Python)")
    number_first = _is_number(a)
    t, value = (b, a) if number_first else (a, b)
    what = "the first operand" if number_first else "the second operand"
    check_tensor(op, t, "the second operand" if number_first else "the first operand")
    check_dtype(op, t, "the tensor operand", ELEMENTWISE_CODES)
    if kernel_op == "mul":
        return scale(t, value, out=out)
    if (kernel_op == "div" and not number_first and t.dtype is not dtypes.int32
            and math.isfinite(value) and value != 0
            and math.frexp(abs(value))[0] == 0.5
            and _EXACT_RECIPROCAL[0] <= abs(value) <= _EXACT_RECIPROCAL[1]):
        return scale(t, 1.0 / value, out=out)
    filled = _scalar_tensor(op, value, t, what)
    try:
        pair = (filled, t) if number_first else (t, filled)
        return _binary(op, *pair, out, kernel_op)
    finally:
        filled.release()  # its memory returns to the pool once the launch has run


def _binary(op: str, a: Any, b: Any, out: Tensor | None, kernel_op: str) -> Tensor:
    # Two tensors is the common case; checking for numbers first costs an ABC lookup each.
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)) and (_is_number(a)
                                                                  or _is_number(b)):
        return _with_number(op, a, b, out, kernel_op)
    context = check_pair(op, a, b)
    dtype = a.dtype
    if dtype is not b.dtype:
        raise VkumdTypeError(f"{op}: dtypes differ ({dtype.name} and {b.dtype.name}); "
                             "cast one first")
    caps = context.caps
    key = (id(caps), kernel_op, dtype.name, a.shape, b.shape)
    known = _BINARY_PLANS.get(key)
    if known is None or known[0] is not caps:
        known = _plan_binary(op, kernel_op, a, b, caps)
        if len(_BINARY_PLANS) >= _KNOWN_PLANS:
            _BINARY_PLANS.clear()
        _BINARY_PLANS[key] = known
    _, out_shape, plan = known
    # A live, non-empty out= of the right shape and dtype (the common case) is what
    # output() would accept, checked without its call; anything else goes through it.
    if not (isinstance(out, Tensor) and out.context is context and out.binding is not None
            and out.shape == out_shape and out.dtype is dtype):
        out = output(op, context, out, out_shape, dtype)
        if out.size == 0:
            return out
    context.run(plan, (a, b, out))
    return out


# What the dtype check, the broadcast and the planner made of a binary op's operands, by
# (id of the device caps, kernel op, dtype name, shapes): one dict lookup instead of three
# calls, the planner's cache key and the caps' Python-level hash (about 0.6 us a call). The
# caps object is kept in the value, so a recycled id cannot match.
_BINARY_PLANS: dict[tuple[Any, ...], tuple[Any, tuple[int, ...], Any]] = {}
_KNOWN_PLANS = 4096


def _plan_binary(op: str, kernel_op: str, a: Tensor, b: Tensor, caps: Any
                 ) -> tuple[Any, tuple[int, ...], Any]:
    """Check and plan ``a OP b``: ``(caps, out_shape, plan)``; raises as the checks do."""
    check_dtype(op, a, "the first operand", ELEMENTWISE_CODES)
    out_shape = _broadcast(op, a.shape, b.shape)
    if 0 in out_shape:  # nothing to launch
        return caps, out_shape, None
    plan = binary_plan(caps, kernel_op, ELEMENTWISE_CODES[a.dtype.name], a.shape, b.shape,
                       out_shape)
    return caps, out_shape, plan


Operand = Tensor | float | int


def add(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` with numpy broadcasting; both operands have the same dtype, or one is a
    real number (converted to the other's dtype)."""
    return _binary("add", a, b, out, "add")


def sub(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a - b`` with numpy broadcasting; either may be a real number."""
    return _binary("sub", a, b, out, "sub")


def mul(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` with numpy broadcasting; either may be a real number (then one scale)."""
    return _binary("mul", a, b, out, "mul")


def div(a: Operand, b: Operand, *, rounding: str | None = None,
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
    tensor = a if isinstance(a, Tensor) else b
    if rounding is None and isinstance(tensor, Tensor) and tensor.dtype is dtypes.int32:
        raise VkumdTypeError("div: int32 true division would need a float result; cast to "
                             "float32 first, or pass rounding='floor' (numpy's //) or "
                             "rounding='trunc'")
    return _binary("div", a, b, out, _ROUNDING[rounding])


# -- comparisons -------------------------------------------------------------------------


def _compare(op: str, a: Operand, b: Operand, out: Tensor | None) -> Tensor:
    if isinstance(out, Tensor) and out.dtype is dtypes.uint8:
        return _compare_mask(op, a, b, out)
    return _binary(op, a, b, out, op)


def _compare_mask(op: str, a: Any, b: Any, out: Tensor) -> Tensor:
    """``a OP b`` stored as a uint8 1/0 mask in ``out`` (a graph's bool), from two tensors."""
    context = check_pair(op, a, b)
    if a.dtype is not b.dtype:
        raise VkumdTypeError(f"{op}: dtypes differ ({a.dtype.name} and {b.dtype.name}); "
                             "cast one first")
    check_dtype(op, a, "the first operand", ELEMENTWISE_CODES)
    check_storage(op, dtypes.uint8, context)
    out_shape = _broadcast(op, a.shape, b.shape)
    out = output(op, context, out, out_shape, dtypes.uint8)
    if out.size == 0:
        return out
    plan = binary_plan(context.caps, op, ELEMENTWISE_CODES[a.dtype.name], a.shape, b.shape,
                       out_shape, out=MASK_CODE)
    context.run(plan, (a, b, out))
    return out


def lt(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a < b`` elementwise with numpy broadcasting: 1 where true, 0 where false.

    The result has the operands' dtype (vkumd has no bool tensors; a 0/1 mask of the same
    type multiplies straight into arithmetic, e.g. ``x * lt(x, 0)``), unlike numpy's bool.
    Floats compare in float32, exactly for every type; any comparison with NaN is false
    except :func:`ne`. Either operand may be a real number, as for :func:`add`.

    Args:
        a: a tensor of float32, float16, bfloat16 or int32, or a real number.
        b: likewise; two tensors must share a dtype and a context.
        out: optional output of the broadcast shape and the operands' dtype, or uint8 (two
            tensor operands): the 1/0 mask stored as bytes, as a graph's comparison gives.

    Returns:
        The 0/1 tensor.

    Raises:
        VkumdTypeError: a non-tensor that is not a number; dtypes that differ; an int32
            tensor against a non-integral number.
        VkumdValueError: shapes that do not broadcast; tensors of different contexts.
    """
    return _compare("lt", a, b, out)


def le(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a <= b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("le", a, b, out)


def gt(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a > b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("gt", a, b, out)


def ge(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a >= b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("ge", a, b, out)


def eq(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a == b`` elementwise, as :func:`lt` (1/0 in the operands' dtype; NaN equals
    nothing, and ``-0.0 == 0.0``)."""
    return _compare("eq", a, b, out)


def ne(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a != b`` elementwise, as :func:`lt` (1/0 in the operands' dtype; NaN differs from
    everything, itself included)."""
    return _compare("ne", a, b, out)
