"""Checks the ops' shape rules share: operand dtypes, attribute values, axes.

Each raises ``VkumdTypeError`` or ``VkumdValueError`` worded as the op's own message
(``"softmax: x is int32; ..."``); :func:`~vkumd.framework.graph.registry.infer` puts the
node's name in place of the op's.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.registry import TensorType

FLOATS = ("float32", "float16", "bfloat16")

Types = list[TensorType | None]


def need_float(op: str, t: TensorType, what: str = "x") -> None:
    """Refuse a non-float ``t``."""
    if t.dtype.name not in FLOATS:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}, which is not supported; {op} "
                             f"takes {', '.join(FLOATS)} (cast() converts)")


def same_dtype(op: str, *pairs: tuple[str, TensorType | None]) -> dtypes.DType:
    """The one dtype of every present operand; refuse operands that differ."""
    present = [(n, t) for n, t in pairs if t is not None]
    first = present[0][1].dtype
    if any(t.dtype is not first for _, t in present):
        listed = ", ".join(f"{n} {t.dtype.name}" for n, t in present)
        raise VkumdTypeError(f"{op}: operands must share a dtype, got {listed}; insert a cast")
    return first


def real(op: str, value: Any, what: str, *, finite: bool = True) -> float:
    """``value`` as a float, refusing bools and non-numbers (and inf and NaN, unless
    ``finite`` is False)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"{op}: {what} must be a real number, not {value!r}")
    try:
        result = float(value)
    except OverflowError:  # an int past float64
        raise VkumdValueError(f"{op}: {what}={value!r} is outside the float range") from None
    if finite and not math.isfinite(result):
        raise VkumdValueError(f"{op}: {what}={value!r} is not finite")
    return result


def flag(op: str, value: Any, what: str) -> bool:
    """``value`` as a bool (numpy's included), refusing anything else (``1``, ``"yes"``)."""
    if not isinstance(value, (bool, np.bool_)):
        raise VkumdTypeError(f"{op}: {what} must be True or False, not {value!r} ({what} "
                             "must be a bool)")
    return bool(value)


def at_least_1d(op: str, t: TensorType) -> None:
    """Refuse a 0-d ``t`` (the row ops work on the last axis)."""
    if t.ndim == 0:
        raise VkumdValueError(f"{op}: x is 0-d; {op} works over the last dimension, so x "
                              "needs at least one (reshape it to [1])")


def axis_of(op: str, axis: Any, ndim: int) -> int:
    """``axis`` (negative counts from the end) as an index into ``ndim`` dimensions."""
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise VkumdTypeError(f"{op}: axis must be an int, not {axis!r}")
    if not -ndim <= axis < ndim:
        raise VkumdValueError(f"{op}: axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def like_x(op: str, x: TensorType, t: TensorType, what: str) -> None:
    """Refuse an operand ``t`` whose dtype is not ``x``'s."""
    if t.dtype is not x.dtype:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name} but x is {x.dtype.name}; cast it "
                             "to x's dtype")


def only(ins: Types) -> TensorType:
    """The first input of an op whose rule the registry called with it present."""
    x = ins[0]
    if x is None:  # the registry checks required inputs before any rule runs
        raise VkumdValueError("a required input is absent")
    return x
