"""Bitwise ops of integer tensors: ``bitwise_and``, ``bitwise_or``, ``bitwise_xor``,
``bitwise_left_shift`` and ``bitwise_right_shift`` (records and eager functions), run by the
binary elementwise kernel on the integer types with numpy broadcasting.

Values are computed in 32-bit ints (uint32 in uint, uint64 in 64 bits) and stored in the
operands' type, so a left shift wraps as numpy's does; a right shift is arithmetic for signed
types (it keeps a negative int's sign, as numpy's) and logical for unsigned ones; a shift
count outside ``[0, 32)`` (``[0, 64)`` for uint64) gives 0 (or -1, shifting a negative value
right). These ops
join no generated kernel: those compute in float32.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import INTEGER_DTYPES
from vkumd.errors import VkumdTypeError
from vkumd.framework.graph.operands import Types
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_tensor
from vkumd.framework.opset.arith import Operand, binary_type, run_binary
from vkumd.framework.opset.common import binary
from vkumd.framework.opset.unary import binary_dtypes
from vkumd.framework.tensor import Tensor

INTEGERS = INTEGER_DTYPES
# and, or and xor take bool too (logical, as PyTorch's); shifts do not.
LOGICAL = ("bitwise_and", "bitwise_or", "bitwise_xor")


def _takes(op: str) -> tuple[str, ...]:
    return (*INTEGERS, "bool") if op in LOGICAL else INTEGERS


def _integers(op: str, a: Any, b: Any) -> None:
    for what, t in (("the first operand", a), ("the second operand", b)):
        if isinstance(t, Tensor):
            check_tensor(op, t, what)  # released and closed first, as every op refuses them
        if isinstance(t, Tensor) and t.dtype.name not in _takes(op):
            raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}; {op} takes "
                                 f"{', '.join(_takes(op))} tensors")


def _run(op: str, kernel_op: str, a: Operand, b: Operand, out: Tensor | None) -> Tensor:
    _integers(op, a, b)
    return run_binary(op, a, b, out, kernel_op)


def bitwise_and(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a & b`` elementwise with numpy broadcasting.

    Args:
        a: an integer tensor (int32, int8, uint8 and the wider ones) or a bool one (and,
            or and xor of bool are logical, as PyTorch's), or an integer (beside an int32
            tensor).
        b: likewise; two tensors share a dtype and a context.
        out: optional output of the broadcast shape and the operands' dtype.

    Returns:
        The result.

    Raises:
        VkumdTypeError: a float operand, operands of different dtypes, a number beside an
            8-bit tensor.
        VkumdValueError: shapes that do not broadcast; tensors of different contexts.
    """
    return _run("bitwise_and", "and", a, b, out)


def bitwise_or(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a | b`` elementwise, as :func:`bitwise_and`."""
    return _run("bitwise_or", "or", a, b, out)


def bitwise_xor(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a ^ b`` elementwise, as :func:`bitwise_and`."""
    return _run("bitwise_xor", "xor", a, b, out)


def bitwise_left_shift(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a << b`` elementwise, wrapping to the type (0 for a count outside ``[0, 32)``); as
    :func:`bitwise_and` otherwise."""
    return _run("bitwise_left_shift", "shl", a, b, out)


def bitwise_right_shift(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a >> b`` elementwise, arithmetic (a count outside ``[0, 32)`` gives 0, or -1 for a
    negative ``a``); as :func:`bitwise_and` otherwise."""
    return _run("bitwise_right_shift", "shr", a, b, out)


def _shift(left: bool) -> Any:
    def shifted(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        bits = 64 if a.dtype == np.uint64 else 32  # the kernel's computing width
        inside = (b >= 0) & (b < bits)
        count = np.where(inside, b, 0)
        if left:
            return np.where(inside, np.left_shift(a, count), 0)
        return np.where(inside, np.right_shift(a, count), np.where(a < 0, -1, 0))
    return shifted


_BITWISE = {"bitwise_and": (bitwise_and, np.bitwise_and),
            "bitwise_or": (bitwise_or, np.bitwise_or),
            "bitwise_xor": (bitwise_xor, np.bitwise_xor),
            "bitwise_left_shift": (bitwise_left_shift, _shift(True)),
            "bitwise_right_shift": (bitwise_right_shift, _shift(False))}


def _declare(op: str) -> None:
    eager, fn = _BITWISE[op]

    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        out = binary_type(op, ins, dims)
        if out.dtype.name not in _takes(op):
            raise VkumdTypeError(f"{op}: the operands are {out.dtype.name}; {op} takes "
                                 f"{', '.join(_takes(op))} tensors")
        return [out]

    def reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
        # Exact in int64 (the float64 arrays hold integers); a left shift is not wrapped to
        # the operands' type here.
        a, b = (np.asarray(x).astype(np.int64) for x in args)
        return [fn(a, b).astype(np.float64)]

    define(op, ("a", "b"), rule=rule, reference=reference, inplace=True,
           lower=binary(eager), refuse=binary_dtypes, eager=eager)


for _op in _BITWISE:
    _declare(_op)
