"""The strided-copy kernel, ``shaders/strided_copy.comp``, and its planner: copies the
elements of a shape between two strided layouts (element strides and offsets on each side).

It makes a strided tensor view contiguous and writes into a view of a tensor; see
:mod:`vkumd.framework.strided`. Stored bits are copied unchanged, so one variant per element
width serves every dtype of that width.
"""

from __future__ import annotations

import functools
import math

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import STRIDED_MAX_DIMS
from vkumd.compiler.kernels.rows import PLANS
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

_DIMS = STRIDED_MAX_DIMS
STRIDED_COPY_PUSH = PushLayout("n:u32", "ndim:u32", "src_offset:u32", "dst_offset:u32",
                               f"shape:u32[{_DIMS}]", f"src_stride:u32[{_DIMS}]",
                               f"dst_stride:u32[{_DIMS}]")
_UINT32 = 1 << 32


def strided_widths(caps: DeviceCaps) -> list[int]:
    """Element widths in bits the strided copy moves on this device (64-bit elements move as
    two 32-bit words, so they need no 64-bit shader feature)."""
    widths = [32, 64]
    if caps.storage_16bit:
        widths.append(16)
    if caps.storage_8bit:
        widths.append(8)
    return widths


def _variants(caps: DeviceCaps) -> list[dict]:
    return [{"WIDTH": w, WORKGROUP: ELEMENTWISE_WORKGROUP} for w in strided_widths(caps)]


STRIDED_COPY = register(Kernel(
    name="strided_copy", source="strided_copy.comp", buffers=2, push=STRIDED_COPY_PUSH,
    defines={"WIDTH": (32, 64, 16, 8)}, spec_constants={WORKGROUP: 0}, variants=_variants,
))


def merge_dims(shape: tuple[int, ...], *strides: tuple[int, ...]
               ) -> tuple[list[int], list[list[int]]]:
    """``shape`` without its size-1 dimensions, and adjacent dimensions merged where every
    layout in ``strides`` steps over the inner one exactly (as a contiguous run does).

    Returns:
        ``(merged shape, merged strides of each layout)``; ``([1], [[0], ...])`` for one
        element.
    """
    kept = [i for i, n in enumerate(shape) if n != 1]
    if not kept:
        return [1], [[0] for _ in strides]
    dims = [shape[kept[0]]]
    merged = [[s[kept[0]]] for s in strides]
    for i in kept[1:]:
        n = shape[i]
        if all(m[-1] == s[i] * n for m, s in zip(merged, strides, strict=True)):
            dims[-1] *= n
            for m, s in zip(merged, strides, strict=True):
                m[-1] = s[i]
        else:
            dims.append(n)
            for m, s in zip(merged, strides, strict=True):
                m.append(s[i])
    return dims, merged


@functools.lru_cache(maxsize=PLANS)
def strided_copy_plan(caps: DeviceCaps, width: int, shape: tuple[int, ...],
                      src_offset: int, src_strides: tuple[int, ...],
                      dst_offset: int, dst_strides: tuple[int, ...]) -> FixedLaunch:
    """Copy the ``shape`` elements of ``width`` bits from one strided layout to another.
    Operands: src, dst, each bound whole (offsets and strides count elements from the
    binding's start; strides may be 0 or negative).

    Raises:
        VkumdValueError: the layouts need more than ``STRIDED_MAX_DIMS`` dimensions after
            merging, or offsets past 32-bit indexing.
    """
    n = math.prod(shape)
    dims, (src, dst) = merge_dims(shape, src_strides, dst_strides)
    if len(dims) > _DIMS:
        raise VkumdValueError(
            f"strided copy: a view of shape {shape} with strides {src_strides} into strides "
            f"{dst_strides} needs {len(dims)} dimensions after merging; the kernel indexes "
            f"{_DIMS}. Make the tensor contiguous in fewer steps (reshape a contiguous copy)")
    if n >= _UINT32 or max(src_offset, dst_offset) >= _UINT32:
        raise VkumdValueError(f"strided copy: {n} elements at offsets {src_offset}, "
                              f"{dst_offset} pass the kernel's 32-bit indexing; split the tensor")
    pad = _DIMS - len(dims)
    wrap = _UINT32 - 1
    push = STRIDED_COPY_PUSH.pack(n, len(dims), src_offset, dst_offset, *dims, *([1] * pad),
                                  *(s & wrap for s in src), *([0] * pad),
                                  *(s & wrap for s in dst), *([0] * pad))
    program = STRIDED_COPY.specialize({"WIDTH": width, WORKGROUP: ELEMENTWISE_WORKGROUP})
    groups = -(-n // ELEMENTWISE_WORKGROUP)
    return FixedLaunch(program, push, looped_grid(caps, groups), (1,))
