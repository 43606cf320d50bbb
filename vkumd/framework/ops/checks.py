"""Argument checks every op shares: tensors, dtypes, scalars, ``out=`` and broadcasting.

Each check names the op and the argument in its message, says what was expected and what to
do, and raises a :class:`~vkumd.errors.VkumdTypeError` or
:class:`~vkumd.errors.VkumdValueError` (or :class:`~vkumd.errors.CapabilityMissing` for a
type the device cannot store), so a bad call never reaches the planner or the driver.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Iterable
from typing import Any

import numpy as np

from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor

# The float types the row, activation and attention kernels take.
FLOATS = ("float32", "float16", "bfloat16")


def check_tensor(op: str, t: Any, what: str) -> Tensor:
    """``t`` as a live tensor of an open context.

    Raises:
        VkumdTypeError: ``t`` is not a vkumd Tensor.
        ContextClosed: its context was closed.
        VkumdValueError: it was released.
    """
    if not isinstance(t, Tensor):
        raise VkumdTypeError(f"{op}: {what} must be a vkumd Tensor, not {type(t).__name__}; "
                             "convert with ctx.tensor(array)")
    t.context.check_open(op)
    if t.released:
        raise VkumdValueError(f"{op}: {what} was released")
    return t


def check_pair(op: str, a: Any, b: Any, what_a: str = "the first operand",
               what_b: str = "the second operand") -> Any:
    """``a`` and ``b`` as live tensors of one open context; return that context.

    The same checks as :func:`check_tensor` on each and :func:`check_context`, with one
    context check for the two (every binary op starts here; each check costs about 0.3 us).

    Raises:
        VkumdTypeError, ContextClosed, VkumdValueError: as :func:`check_tensor` and
            :func:`check_context`, in that order.
    """
    # A tensor with a binding is live and non-empty: a plain attribute read, where
    # ``released`` is a property call (empty tensors take the full checks).
    if (isinstance(a, Tensor) and isinstance(b, Tensor) and a.context is b.context
            and a.binding is not None and b.binding is not None):
        context = a.context
        context.check_open(op)
        return context
    check_tensor(op, a, what_a)
    check_tensor(op, b, what_b)
    check_context(op, a, b, what_b)
    return a.context


def check_dtype(op: str, t: Tensor, what: str, allowed: Iterable[str]) -> dtypes.DType:
    """``t``'s dtype, refusing one outside ``allowed`` or one its device cannot store.

    Raises:
        VkumdTypeError: the dtype is not in ``allowed``.
        CapabilityMissing: a 16-bit or 8-bit type on a device without that storage.
    """
    dt = t.dtype
    if dt.name not in allowed:
        raise VkumdTypeError(f"{op}: {what} is {dt.name}, which is not supported; {op} takes "
                             f"{', '.join(allowed)} (cast() converts)")
    if dt.itemsize != 4:  # 32-bit types need no storage feature (and are the common case)
        check_storage(op, dt, t.context)
    return dt


def check_storage(op: str, dt: dtypes.DType, context: Any) -> None:
    """Refuse a dtype its device cannot store or compute: 16-bit and 8-bit types in buffers,
    float64 and uint64 arithmetic.

    Raises:
        CapabilityMissing: ``storageBuffer16BitAccess``, ``storageBuffer8BitAccess``,
            ``shaderFloat64`` or ``shaderInt64`` is missing.
    """
    caps = context.caps
    if dt.itemsize == 2 and not caps.storage_16bit:
        raise CapabilityMissing(f"{op}: {dt.name} tensors need 16-bit storage "
                                f"(storageBuffer16BitAccess), which {caps.name} lacks; use "
                                "float32")
    if dt.itemsize == 1 and not (caps.storage_8bit and caps.shader_int8):
        raise CapabilityMissing(f"{op}: {dt.name} tensors need 8-bit storage and int8 "
                                f"arithmetic, which {caps.name} lacks")
    if dt.name == "float64" and not caps.shader_float64:
        raise CapabilityMissing(f"{op}: float64 tensors need double arithmetic in shaders "
                                f"(shaderFloat64), which {caps.name} lacks; vkumd computes "
                                "float64 in double only: cast to float32 on the host")
    if dt.name == "uint64" and not caps.shader_int64:
        raise CapabilityMissing(f"{op}: uint64 tensors need 64-bit integer arithmetic in "
                                f"shaders (shaderInt64), which {caps.name} lacks; convert to "
                                "a 32-bit type on the host")


def check_float(op: str, t: Any, what: str = "x") -> Tensor:
    """``t`` as a live float32, float16 or bfloat16 tensor its device can store."""
    t = check_tensor(op, t, what)
    check_dtype(op, t, what, FLOATS)
    return t


def check_context(op: str, x: Tensor, other: Tensor, what: str) -> None:
    """Refuse ``other`` when it belongs to another context than ``x``.

    Raises:
        VkumdValueError: the contexts differ.
    """
    if other.context is not x.context:
        raise VkumdValueError(f"{op}: {what} belongs to a different context than the other "
                              "operands; move it with ctx.tensor(other.numpy())")


def check_real(op: str, value: Any, what: str, *, finite: bool = False) -> float:
    """``value`` as a float, refusing bools and non-numbers (and, if asked, inf and NaN).

    Raises:
        VkumdTypeError: not a real number.
        VkumdValueError: not finite, with ``finite=True``.
    """
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"{op}: {what} must be a real number, not {type(value).__name__}")
    try:
        result = float(value)
    except OverflowError:  # an int past float64
        raise VkumdValueError(f"{op}: {what}={value!r} is outside the float range") from None
    if finite and not math.isfinite(result):
        raise VkumdValueError(f"{op}: {what}={value!r} is not finite")
    return result


def check_bool(op: str, value: Any, what: str) -> bool:
    """``value`` as a bool, refusing anything else (a string ``"yes"`` is not true).

    Raises:
        VkumdTypeError: ``value`` is not a bool.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise VkumdTypeError(f"{op}: {what} must be a bool (True or False), not {value!r}")
    return bool(value)


def output(op: str, context: Any, out: Any, shape: tuple[int, ...], dtype: dtypes.DType,
           inputs: Iterable[Tensor | None] = ()) -> Tensor:
    """``out`` checked against ``shape`` and ``dtype``, or a new tensor when it is None.

    Args:
        context: the inputs' context, which the caller has checked is open.
        inputs: tensors the kernel reads while it writes ``out``; ``out`` may not be one of
            them (the kernel would read what it overwrites).

    Raises:
        VkumdTypeError: ``out`` is not a tensor, or of another dtype.
        VkumdValueError: ``out`` is released, of another context or shape, or shares memory
            with an input.
    """
    if out is None:
        return context.empty(shape, dtype)
    # A live tensor of the inputs' context needs no second look at that context (0.3 us).
    if not (isinstance(out, Tensor) and out.context is context and not out.released):
        check_tensor(op, out, "out=")
    if out.context is not context:
        raise VkumdValueError(f"{op}: out= belongs to a different context than the inputs")
    if out.shape != shape:
        raise VkumdValueError(f"{op}: out= has shape {out.shape} and dtype {out.dtype.name}; "
                              f"expected {shape} and {dtype.name}")
    if out.dtype is not dtype:
        raise VkumdTypeError(f"{op}: out= is {out.dtype.name}; the result is {dtype.name} "
                             f"(shape {shape}). Pass an out= of {dtype.name}, or cast after")
    allocation = out.allocation
    if allocation is not None and out.binding is None:
        raise VkumdValueError(
            f"{op}: out= is a strided view (shape {out.shape}, strides {out.element_strides}, "
            f"offset {out.element_offset}), which kernels cannot write; compute into a new "
            "tensor and write it through the view with out.copy_(result)")
    if allocation is not None:
        for t in inputs:
            # A strided input is copied to new memory before the kernel reads it.
            if t is not None and t.allocation is allocation and t.binding is not None:
                raise VkumdValueError(f"{op}: out= is the same tensor as an input; the kernel "
                                      "would read what it overwrites. Use a new output")
    return out


def broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """The numpy broadcast of ``shapes``.

    Raises:
        VkumdValueError: the shapes do not broadcast.
    """
    if shapes.count(shapes[0]) == len(shapes):
        return shapes[0]
    try:
        return _broadcast(shapes)
    except ValueError:
        listed = " and ".join(str(s) for s in shapes)
        raise VkumdValueError(f"{op}: shapes {listed} do not broadcast") from None


@functools.lru_cache(maxsize=1024)
def _broadcast(shapes: tuple[tuple[int, ...], ...]) -> tuple[int, ...]:
    # np.broadcast_shapes costs microseconds; programs repeat a few shapes.
    return tuple(np.broadcast_shapes(*shapes))
