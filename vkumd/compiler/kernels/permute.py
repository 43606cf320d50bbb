"""The permute kernel, ``shaders/permute.comp``: a contiguous copy with dimensions reordered.

It copies bits (32- or 16-bit elements, any dtype of that width): each workgroup walks
chunks of output rows, a row being the innermost dimension after merging the ones that stay
adjacent in the source.
"""

from __future__ import annotations

import functools
import math

from vkumd.compiler.kernels.elementwise import storage_widths
from vkumd.compiler.kernels.elementwise_plan import CPU_WORKGROUPS, FixedLaunch
from vkumd.compiler.kernels.limits import PERMUTE_MAX_OUTER
from vkumd.compiler.kernels.rows import PLANS, grid
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

PERMUTE_PUSH = PushLayout("rows:u32", "cols:u32", "inner_stride:u32", "chunks:u32",
                          "nouter:u32", f"outer:u32[{PERMUTE_MAX_OUTER}]",
                          f"outer_stride:u32[{PERMUTE_MAX_OUTER}]")
PERMUTE_CHUNK = 4096  # units of a row per workgroup (shaders/permute.comp CHUNK)


def permute_workgroup(caps: DeviceCaps, cols: int) -> int:
    """Lanes per output row of ``permute``: enough for ``cols``, from a subgroup up to 64."""
    width = max(1, caps.subgroup_size)
    while width < min(cols, 64):
        width *= 2
    return min(width, caps.max_workgroup_size[0])


def _permute_variants(caps: DeviceCaps) -> list[dict]:
    widths = storage_widths(caps)
    lanes = sorted({permute_workgroup(caps, cols) for cols in (1, 8, 16, 32, 64)})
    return [{"WIDTH": w, "VEC": v, WORKGROUP: n} for w in widths for v in (1, 4) for n in lanes]


PERMUTE = register(Kernel(
    name="permute",
    source="permute.comp",
    buffers=2,
    push=PERMUTE_PUSH,
    defines={"WIDTH": (32, 16), "VEC": (1, 4)},
    spec_constants={WORKGROUP: 0},
    variants=_permute_variants,
))


def _merged(shape: list[int], strides: list[int]) -> tuple[list[int], list[int]]:
    """Adjacent output dimensions that stay adjacent in the source, merged into one."""
    pairs = [(n, s) for n, s in zip(shape, strides, strict=True) if n != 1]
    if not pairs:
        return [1], [0]
    merged = [pairs[0]]
    for n, s in pairs[1:]:
        outer_n, outer_s = merged[-1]
        if outer_s == s * n:
            merged[-1] = (outer_n * n, s)
        else:
            merged.append((n, s))
    return [n for n, _ in merged], [s for _, s in merged]


@functools.lru_cache(maxsize=PLANS)
def permute_plan(caps: DeviceCaps, op: str, width: int, shape: tuple[int, ...],
                 order: tuple[int, ...]) -> FixedLaunch:
    """A contiguous copy of a ``shape`` tensor of ``width``-bit elements with its dimensions
    reordered as ``order``. Operands: x, out.

    Raises:
        VkumdValueError: the reordering needs more than ``PERMUTE_MAX_OUTER + 1`` dimensions
            after merging the ones that stay adjacent.
    """
    out_shape = tuple(shape[d] for d in order)
    source_strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    return strided_read_plan(caps, op, width, out_shape, tuple(source_strides[d] for d in order))


@functools.lru_cache(maxsize=PLANS)
def strided_read_plan(caps: DeviceCaps, op: str, width: int, out_shape: tuple[int, ...],
                strides: tuple[int, ...]) -> FixedLaunch:
    """A contiguous copy of the ``out_shape`` elements of a source read with element
    ``strides`` (non-negative; 0 repeats an element) from its binding's first element: a
    permute, or any strided view that starts there. Operands: x, out.

    Raises:
        VkumdValueError: the layout needs more than ``PERMUTE_MAX_OUTER + 1`` dimensions
            after merging the ones that stay adjacent.
    """
    merged_shape, merged_strides = _merged(list(out_shape), list(strides))
    most = PERMUTE_MAX_OUTER + 1
    if len(merged_shape) > most:
        raise VkumdValueError(f"{op}: this layout of shape {out_shape} needs "
                              f"{len(merged_shape)} dimensions after merging; at most {most}")
    # Outer dimensions locate a row of the innermost one; the kernel walks that row.
    outer, outer_strides = merged_shape[:-1], merged_strides[:-1]
    cols = merged_shape[-1]
    rows = math.prod(out_shape) // max(cols, 1)
    # Rows that are contiguous runs starting at multiples of four move four elements a load
    # (a head permute's rows of 32): CPU drivers pay per load and store, not per byte.
    vec = 4 if (merged_strides[-1] == 1 and cols % 4 == 0
                and all(s % 4 == 0 for s in outer_strides)) else 1
    cols //= vec
    outer_strides = [s // vec for s in outer_strides]
    pad = PERMUTE_MAX_OUTER - len(outer)
    chunks = -(-cols // PERMUTE_CHUNK)
    push = PERMUTE_PUSH.pack(rows, cols, merged_strides[-1], chunks, len(outer), *outer,
                             *([1] * pad), *outer_strides, *([0] * pad))
    program = PERMUTE.specialize({"WIDTH": width, "VEC": vec,
                                  WORKGROUP: permute_workgroup(caps, cols)})
    # The workgroups loop over the (row, chunk) pairs, so a CPU driver gets a few of them.
    groups = rows * chunks
    if caps.device_type == "cpu":
        groups = min(groups, CPU_WORKGROUPS)
    return FixedLaunch(program, push, grid(caps, groups, 1), (1,))
