"""Shared plumbing of the transformer ops: argument checks, variants and grids.

The row-wise kernels give one workgroup to each row of the last dimension; the grid folds
into a second dimension past ``maxComputeWorkGroupCount[0]`` rows (:func:`grid_for`).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from vkumd.compiler.kernels import WORKGROUP, transformer
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.ops.elementwise import CPU_WORKGROUPS, _check_tensor, _output
from vkumd.framework.tensor import Tensor
from vkumd.submission.recorder import grid_for

# vkumd dtype -> the type code the row kernels take (shaders/include/rows.glsl).
FLOAT_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16"}

__all__ = ["FLOAT_CODES", "buffer", "check_float", "check_real", "check_same", "grid",
           "leading_rows", "output", "row_variant", "rows_grid", "workgroup_of"]


def check_float(op: str, t: Any, what: str = "x") -> Tensor:
    """``t`` as a live float tensor of a type the row kernels take on its device.

    Raises:
        VkumdTypeError: not a tensor, or not float32/float16/bfloat16.
        CapabilityMissing: a 16-bit type on a device without 16-bit storage.
    """
    t = _check_tensor(op, t, what)
    if t.dtype.name not in FLOAT_CODES:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}; it takes float32, float16 or "
                             "bfloat16 (cast() converts)")
    if t.dtype.itemsize == 2 and not t.context.caps.storage_16bit:
        raise CapabilityMissing(f"{op}: {t.dtype.name} tensors need 16-bit storage "
                                f"(storageBuffer16BitAccess), which {t.context.caps.name} "
                                "lacks; use float32")
    return t


def check_same(op: str, x: Tensor, other: Any, what: str) -> Tensor:
    """``other`` as a tensor of ``x``'s context and dtype."""
    other = _check_tensor(op, other, what)
    if other.context is not x.context:
        raise VkumdValueError(f"{op}: {what} belongs to a different context than x")
    if other.dtype is not x.dtype:
        raise VkumdTypeError(f"{op}: {what} is {other.dtype.name} but x is {x.dtype.name}; "
                             "cast it to x's dtype")
    return other


def check_real(op: str, value: Any, what: str) -> float:
    """``value`` as a float, refusing bools and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"{op}: {what} must be a real number, not {type(value).__name__}")
    return float(value)


def output(op: str, x: Tensor, out: Any, shape: tuple[int, ...],
           dtype: dtypes.DType | None = None) -> Tensor:
    """``out`` checked against ``shape`` and ``dtype`` (default x's), or a new tensor."""
    return _output(op, x.context, out, shape, dtype or x.dtype)


def buffer(t: Tensor) -> tuple[Any, int, int]:
    """The ``(VkBuffer, offset, range)`` binding of a non-empty tensor."""
    assert t.allocation is not None  # callers return early for empty tensors
    return (t.allocation.buffer, t.allocation.offset, t.nbytes)


def row_variant(x: Tensor, cols: int, **extra: Any) -> dict:
    """The row-kernel variant for ``x``: its type, vector width, reduction path and width."""
    # Looked up through the module so tests can swap the reduction path.
    layout = transformer.row_layout(x.context.caps)
    return {"DTYPE": FLOAT_CODES[x.dtype.name], "VEC": 4 if cols % 4 == 0 else 1,
            **layout, **extra}


def grid(context: Any, count: int, workgroup: int) -> tuple[int, int, int]:
    """Groups of ``workgroup`` lanes covering ``count``, 2-D past the x limit."""
    groups = grid_for(count, workgroup, context.caps.max_workgroup_count[0])
    if groups[1] > context.caps.max_workgroup_count[1]:
        raise VkumdValueError(f"{count} work items need more workgroups than "
                              f"{context.caps.name} dispatches at once")
    return groups


def rows_grid(context: Any, rows: int) -> tuple[int, int, int]:
    """One workgroup per row."""
    return grid(context, rows, 1)


def looped_grid(context: Any, groups: int) -> tuple[int, int, int]:
    """A grid for a kernel whose workgroups loop over ``groups`` pieces of work: capped at
    :data:`~vkumd.framework.ops.elementwise.CPU_WORKGROUPS` on CPU drivers."""
    if context.caps.device_type == "cpu":
        groups = min(groups, CPU_WORKGROUPS)
    return grid(context, groups, 1)


def workgroup_of(variant: dict) -> int:
    """The workgroup width a variant asks for."""
    return int(variant[WORKGROUP])


def leading_rows(op: str, x: Tensor) -> tuple[int, int]:
    """``(rows, cols)`` of ``x`` seen as rows of its last dimension.

    Raises:
        VkumdValueError: ``x`` is 0-d.
    """
    if x.ndim == 0:
        raise VkumdValueError(f"{op}: x is 0-d; it works over the last dimension, so x needs "
                              "at least one (reshape it to (1,))")
    return math.prod(x.shape[:-1]), x.shape[-1]
