"""Elementwise binary operations with numpy broadcasting."""

from __future__ import annotations

import struct

import numpy as np

from vkumd.compiler.kernels import ELEMENTWISE_OPS, WORKGROUP
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor
from vkumd.submission.recorder import grid_for
from vkumd.vk.errors import CapabilityMissing, VkumdTypeError, VkumdValueError

MAX_DIMS = 6
_PUSH = struct.Struct("<20I")
_ELEM = {"float32": "float", "float16": "float16_t"}


def _strides_for(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major ``shape`` broadcast to ``out_shape`` (0 = repeated)."""
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    strides = [0] * len(out_shape)
    step = 1
    for d in range(len(out_shape) - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    return strides


def _binary(op: str, a: Tensor, b: Tensor, out: Tensor | None) -> Tensor:
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise VkumdTypeError(f"{op}: both operands must be vkumd tensors")
    if a.context is not b.context:
        raise VkumdValueError(f"{op}: the operands belong to different contexts")
    if a.dtype is not b.dtype:
        raise VkumdTypeError(f"{op}: dtypes differ ({a.dtype.name} and {b.dtype.name}); "
                             "cast one first")
    if a.dtype.name not in _ELEM:
        raise VkumdTypeError(f"{op}: {a.dtype.name} is not supported; use float32 or float16")
    try:
        out_shape = tuple(np.broadcast_shapes(a.shape, b.shape))
    except ValueError:
        raise VkumdValueError(f"{op}: shapes {a.shape} and {b.shape} do not broadcast") from None
    if len(out_shape) > MAX_DIMS:
        raise VkumdValueError(f"{op}: {len(out_shape)} dimensions; at most {MAX_DIMS}")
    ctx = a.context
    if a.dtype is dtypes.float16 and not ctx.caps.storage_16bit:
        raise CapabilityMissing(f"{op}: float16 tensors need 16-bit storage, which "
                                f"{ctx.caps.name} lacks")
    if out is None:
        out = ctx.empty(out_shape, a.dtype)
    elif out.shape != out_shape or out.dtype is not a.dtype:
        raise VkumdValueError(f"{op}: out= has shape {out.shape} and dtype {out.dtype.name}; "
                              f"expected {out_shape} and {a.dtype.name}")
    n = out.size
    if n == 0:
        return out
    dims = list(out_shape) or [1]
    a_strides = _strides_for(a.shape, out_shape) or [0]
    b_strides = _strides_for(b.shape, out_shape) or [0]
    pad = MAX_DIMS - len(dims)
    push = _PUSH.pack(n, len(dims), *dims, *([1] * pad), *a_strides, *([0] * pad),
                      *b_strides, *([0] * pad))
    workgroup = 64
    variant = {"ELEM": _ELEM[a.dtype.name], "OP": ELEMENTWISE_OPS[op], WORKGROUP: workgroup}
    buffers = [(t.allocation.buffer, t.allocation.offset, t.nbytes) for t in (a, b, out)]
    ctx.dispatch("elementwise_binary", variant, buffers, push,
                 grid_for(n, workgroup, ctx.caps.max_workgroup_count[0]), writes=(2,))
    return out


def add(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a + b`` with numpy broadcasting (float32 or float16)."""
    return _binary("add", a, b, out)


def sub(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a - b`` with numpy broadcasting."""
    return _binary("sub", a, b, out)


def mul(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a * b`` with numpy broadcasting."""
    return _binary("mul", a, b, out)


def div(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``a / b`` with numpy broadcasting."""
    return _binary("div", a, b, out)
