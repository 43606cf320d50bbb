"""Elementwise arithmetic: add, sub, mul, div, remainder, fmod and pow (records and eager
functions).

The binary ops take a Python (or numpy) real number for either operand, as ``torch.add``
does; it is converted to the tensor's dtype as :func:`fill` converts (an int32 tensor takes
only integral numbers: vkumd never changes a dtype silently). The cheapest exact launch
is chosen: ``mul`` by a number is one :func:`scale`, and so is ``div`` of a float tensor by
a power of two (its reciprocal is exact); everything else fills a 0-d tensor with the
number (one small launch) and broadcasts it.

Binary ops broadcast (numpy rules) over operands of one dtype; each also joins generated
elementwise kernels as a program step (:attr:`OpDef.elementwise`). Element types and
rounding as :mod:`vkumd.framework.opset.unary` describes.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import (
    BINARY_CODES,
    BOOL_BINARY_OPS,
    ELEMENTWISE_CODES,
    INT64_EMULATED_OPS,
    MASK_CODE,
)
from vkumd.compiler.kernels.elementwise_plan import binary_plan, fill_plan
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, only, same_dtype
from vkumd.framework.graph.registry import Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import (
    check_dtype,
    check_pair,
    check_storage,
    check_tensor,
    output,
)
from vkumd.framework.opset.common import attrs_of, binary
from vkumd.framework.opset.unary import (
    as_float,
    binary_dtypes,
    broadcast_shape,
    scalar_bits,
    scale,
)
from vkumd.framework.strided import strided_operands
from vkumd.framework.tensor import Tensor

_ROUNDING = {None: "div", "floor": "div_floor", "trunc": "div_trunc"}
# Powers of two whose reciprocal is a normal number in float32, float16 and bfloat16: dividing
# by one is exactly a multiplication by its reciprocal.
_EXACT_RECIPROCAL = (2.0**-14, 2.0**14)
ROUNDINGS = (None, "floor", "trunc")


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))


def _scalar_tensor(op: str, value: Any, like: Tensor, what: str) -> Tensor:
    """A 0-d tensor of ``like``'s dtype and context holding ``value`` (one fill launch)."""
    bits = scalar_bits(op, value, like.dtype, what)  # refuses a bad number before allocating
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
    number = as_float(value)
    if (kernel_op == "div" and not number_first and t.dtype is not dtypes.int32
            and math.isfinite(number) and number != 0
            and math.frexp(abs(number))[0] == 0.5
            and _EXACT_RECIPROCAL[0] <= abs(number) <= _EXACT_RECIPROCAL[1]):
        return scale(t, 1.0 / number, out=out)
    filled = _scalar_tensor(op, value, t, what)
    try:
        pair = (filled, t) if number_first else (t, filled)
        return run_binary(op, *pair, out, kernel_op)
    finally:
        filled.release()  # its memory returns to the pool once the launch has run


def run_binary(op: str, a: Any, b: Any, out: Tensor | None, kernel_op: str) -> Tensor:
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
    if a.binding is None or b.binding is None:
        in_place = strided_operands(caps, (a, b), out)
        if in_place is not None:  # views read through the kernel's strides, no copy
            shapes = (a.shape, b.shape)
            (a, b), layouts = in_place
            code = MASK_CODE if dtype is dtypes.bool_ else BINARY_CODES[dtype.name]
            plan = binary_plan(caps, kernel_op, code, *shapes,
                               out_shape, layouts=layouts)
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
    if a.dtype is dtypes.bool_:
        code = bool_code(op, kernel_op, a)
    else:
        check_dtype(op, a, "the first operand", BINARY_CODES)
        check_int64_op(op, kernel_op, a.dtype, caps)
        code = BINARY_CODES[a.dtype.name]
    out_shape = broadcast_shape(op, a.shape, b.shape)
    if 0 in out_shape:  # nothing to launch
        return caps, out_shape, None
    plan = binary_plan(caps, kernel_op, code, a.shape, b.shape, out_shape)
    return caps, out_shape, plan


def check_int64_op(op: str, kernel_op: str, dtype: dtypes.DType, caps: Any) -> None:
    """Refuse an int64 op that the emulated path (no ``shaderInt64``:
    ``DeviceCaps.int64_arithmetic``) does not compute.

    Raises:
        CapabilityMissing: naming ``shaderInt64``.
    """
    if (dtype is dtypes.int64 and caps.int64_arithmetic == "emulated"
            and kernel_op not in INT64_EMULATED_OPS):
        raise CapabilityMissing(
            f"{op}: int64 {op} needs 64-bit integer arithmetic in shaders (shaderInt64), which "
            f"{caps.name} lacks; without it vkumd computes int64 in two 32-bit words for "
            f"{', '.join(INT64_EMULATED_OPS)} only. Cast to int32 or float64 first (ops.cast) "
            "where the values allow")


def bool_code(op: str, kernel_op: str, a: Tensor) -> str:
    """The binary kernel's type code for bool operands (uint8's: the same bytes), for the ops
    bool has (comparisons, and, or, xor).

    Raises:
        VkumdTypeError: arithmetic on bool, which PyTorch refuses too.
        CapabilityMissing: the device has no 8-bit storage.
    """
    if kernel_op not in BOOL_BINARY_OPS:
        raise VkumdTypeError(f"{op}: the operands are bool, which has no arithmetic; cast "
                             "to a number type first (ops.cast(x, 'float32')), or use "
                             "bitwise_and, bitwise_or or bitwise_xor for logic")
    check_storage(op, a.dtype, a.context)
    return MASK_CODE


Operand = Tensor | float | int


def add(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` with numpy broadcasting; both operands have the same dtype, or one is a
    real number (converted to the other's dtype)."""
    return run_binary("add", a, b, out, "add")


def sub(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a - b`` with numpy broadcasting; either may be a real number."""
    return run_binary("sub", a, b, out, "sub")


def mul(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` with numpy broadcasting; either may be a real number (then one scale)."""
    return run_binary("mul", a, b, out, "mul")


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
    if rounding is None and isinstance(tensor, Tensor) and not tensor.dtype.is_float:
        raise VkumdTypeError(f"div: {tensor.dtype.name} true division would need a float "
                             "result; cast to "
                             "float32 first, or pass rounding='floor' (numpy's //) or "
                             "rounding='trunc'")
    return run_binary("div", a, b, out, _ROUNDING[rounding])


def binary_type(op: str, ins: Types, dims: DimTable) -> TensorType:
    a, b = only(ins), ins[1]
    assert b is not None  # a required input, checked by the registry
    dt = same_dtype(op, ("a", a), ("b", b))
    return TensorType(dims.broadcast(a.shape, b.shape), dt)


def _arith(op: str, eager: Any, reference: Any, glsl: str) -> None:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [binary_type(op, ins, dims)]

    define(op, ("a", "b"), rule=rule, reference=reference, inplace=True,
           elementwise=Elementwise(2, glsl), lower=binary(eager), refuse=binary_dtypes,
           eager=eager)


_arith("add", add, lambda a, attrs, s: [a[0] + a[1]], "({a} + {b})")
_arith("sub", sub, lambda a, attrs, s: [a[0] - a[1]], "({a} - {b})")
_arith("mul", mul, lambda a, attrs, s: [a[0] * a[1]], "({a} * {b})")


def _div_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    rounding = attrs["rounding"]
    if rounding not in ROUNDINGS:
        raise VkumdValueError(f"div: rounding={rounding!r}; use None, 'floor' or 'trunc'")
    out = binary_type("div", ins, dims)
    if rounding is None and not out.dtype.is_float:
        raise VkumdTypeError(f"div: {out.dtype.name} true division would need a float result; "
                             "cast to "
                             "float32 first, or set rounding='floor' or 'trunc'")
    return [out]


def _div_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    a, b = args
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a / b
    rounding = attrs["rounding"]
    if rounding is None:
        return [q]
    q = np.floor(q) if rounding == "floor" else np.trunc(q)
    # Integer division by zero gives 0, as the kernel (and numpy's floor_divide) does.
    return [np.where(np.broadcast_to(b, q.shape) == 0, 0.0, q)]


def _div_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    div(ins[0], ins[1], rounding=attrs_of(node)["rounding"], out=outs[0])


define("div", ("a", "b"), {"rounding": None}, rule=_div_rule, reference=_div_reference,
       inplace=True, lower=_div_lower, refuse=binary_dtypes, eager=div,
       elementwise=Elementwise(2, "({a} / {b})", params=("rounding",),
                               glsl_params={"floor": "floor({a} / {b})",
                                            "trunc": "trunc({a} / {b})"}))


def remainder(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """The floored remainder ``a - floor(a / b) b``, with ``b``'s sign (Python's ``%``,
    numpy's ``mod``, ``torch.remainder``, ONNX's Mod with ``fmod=0``), with numpy
    broadcasting; either operand may be a real number.

    int32 is exact, and a zero divisor gives 0. Floats are computed in float32 and rounded
    once: NaN for an infinite ``a`` or a zero ``b``; a finite ``a`` against an infinite ``b``
    is ``a`` where their signs agree, else ``b`` (numpy's); exact while ``|a / b| < 2**24``.

    Raises:
        VkumdTypeError: operands of different dtypes, or of a dtype the kernels do not take.
        VkumdValueError: shapes that do not broadcast; tensors of different contexts.
    """
    return run_binary("remainder", a, b, out, "remainder")


def fmod(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """The truncated remainder ``a - trunc(a / b) b``, with ``a``'s sign (C's ``fmod``,
    ``torch.fmod``, ONNX's Mod with ``fmod=1``); as :func:`remainder` otherwise (an infinite
    ``b`` leaves a finite ``a`` as it is)."""
    return run_binary("fmod", a, b, out, "fmod")


def _remainder_reference(floored: bool) -> Any:
    def reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore"):
            return [np.mod(args[0], args[1]) if floored else np.fmod(args[0], args[1])]
    return reference


def _remainder_rule(op: str) -> Any:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [binary_type(op, ins, dims)]
    return rule


# int32 by a zero divisor: the kernels give 0 (as div's rounded quotients), the reference NaN.
for _op, _eager, _glsl in (("remainder", remainder, "vkumd_mod({a}, {b})"),
                           ("fmod", fmod, "vkumd_fmod({a}, {b})")):
    define(_op, ("a", "b"), rule=_remainder_rule(_op),
           reference=_remainder_reference(_op == "remainder"), inplace=True,
           elementwise=Elementwise(2, _glsl), lower=binary(_eager), refuse=binary_dtypes,
           eager=_eager)


def pow(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:  # noqa: A001
    """``a ** b`` elementwise with numpy broadcasting (numpy's ``power``, ONNX's Pow); both
    operands of one dtype, or one a real number.

    Floats are computed in float32 and rounded once: 1 for ``b == 0`` and for ``a == 1``; NaN
    for a negative ``a`` and a non-integer ``b``; an integer ``|b| <= 64`` multiplies by
    squaring, other exponents are ``exp2(b log2 |a|)`` (a relative error of about
    ``|b log2 a|`` float32 ulps). int32 multiplies exactly, wrapping on overflow; a negative
    exponent gives ``1 / a**-b`` truncated (0 unless ``a`` is 1 or -1; 0 for ``a == 0``,
    where numpy raises).

    Raises:
        VkumdTypeError: operands of different dtypes, or of a dtype the kernels do not take.
        VkumdValueError: shapes that do not broadcast; tensors of different contexts.
    """
    return run_binary("pow", a, b, out, "pow")


def _pow_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    return [binary_type("pow", ins, dims)]


def _pow_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [np.power(args[0], args[1])]


define("pow", ("a", "b"), rule=_pow_rule, reference=_pow_reference, inplace=True,
       elementwise=Elementwise(2, "vkumd_pow({a}, {b})"), lower=binary(pow),
       refuse=binary_dtypes, eager=pow)
