"""Planning the transformer kernels: row kernels, activations, gather and permute.

The row-wise kernels (softmax, norm, reduce_rows, gather_rows) give one workgroup to each
row; the grid folds into a second dimension past ``maxComputeWorkGroupCount[0]`` rows. How a
workgroup reduces across its lanes is :func:`~vkumd.compiler.kernels.transformer.row_layout`'s
choice per device class; ``VEC`` 4 variants load four elements at a time when a row's length
allows it. Each planner is cached on everything it reads.
"""

from __future__ import annotations

import functools
import math

from vkumd.compiler.kernels import transformer
from vkumd.compiler.kernels.elementwise_plan import CPU_WORKGROUPS, FixedLaunch
from vkumd.compiler.kernels.transformer import (
    ACTIVATION,
    ACTIVATION_PUSH,
    GATHER,
    GATHER_PUSH,
    NORM,
    NORM_PUSH,
    PERMUTE,
    PERMUTE_MAX_OUTER,
    PERMUTE_PUSH,
    REDUCE_OPS,
    REDUCE_PUSH,
    REDUCE_ROWS,
    ROW_OPS,
    SOFTMAX,
    SOFTMAX_MAX_LEAD,
    SOFTMAX_PUSH,
    permute_workgroup,
)
from vkumd.compiler.launch import grid_for
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

ACTIVATION_WORKGROUP = 64
PERMUTE_CHUNK = 4096  # units of a row per workgroup (shaders/permute.comp CHUNK)
_PLANS = 4096


def grid(caps: DeviceCaps, count: int, workgroup: int) -> tuple[int, int, int]:
    """Groups of ``workgroup`` lanes covering ``count``, 2-D past the x limit.

    Raises:
        VkumdValueError: even the 2-D grid passes the device's limits.
    """
    groups = grid_for(count, workgroup, caps.max_workgroup_count[0])
    if groups[1] > caps.max_workgroup_count[1]:
        raise VkumdValueError(f"{count} work items need more workgroups than "
                              f"{caps.name} dispatches at once")
    return groups


def _layout(caps: DeviceCaps) -> tuple[tuple[str, int], ...]:
    # Looked up through the module on each call, so tests can swap the reduction path.
    return tuple(sorted(transformer.row_layout(caps).items()))


def _row_variant(code: str, cols: int, layout: tuple[tuple[str, int], ...]) -> dict:
    return {"DTYPE": code, "VEC": 4 if cols % 4 == 0 else 1, **dict(layout)}


def softmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int, scale: float,
                 mask_mode: int, lead: tuple[int, ...], mstride: tuple[int, ...]
                 ) -> FixedLaunch:
    """``softmax(x * scale + mask)`` over rows. Operands: x, mask (or None), out.

    Args:
        mask_mode: 0 no mask, 1 a mask row per x row, 2 one mask value per x row.
        lead: x's leading dimensions (at most :data:`SOFTMAX_MAX_LEAD`; empty without a mask).
        mstride: the mask's element strides along them (0 where broadcast).
    """
    return _softmax_plan(caps, _layout(caps), code, rows, cols, scale, mask_mode, lead, mstride)


@functools.lru_cache(maxsize=_PLANS)
def _softmax_plan(caps: DeviceCaps, layout: tuple, code: str, rows: int, cols: int,
                  scale: float, mask_mode: int, lead: tuple[int, ...],
                  mstride: tuple[int, ...]) -> FixedLaunch:
    pad = SOFTMAX_MAX_LEAD - len(lead)
    push = SOFTMAX_PUSH.pack(cols, rows, scale, mask_mode, len(lead), *lead, *([1] * pad),
                             *mstride, *([0] * (SOFTMAX_MAX_LEAD - len(mstride))))
    program = SOFTMAX.specialize(_row_variant(code, cols, layout))
    return FixedLaunch(program, push, grid(caps, rows, 1), (2,))


def norm_plan(caps: DeviceCaps, op: str, code: str, rows: int, cols: int, eps: float,
              weight: bool, bias: bool) -> FixedLaunch:
    """``layer_norm`` or ``rms_norm`` over rows. Operands: x, weight, bias (None when
    absent), out."""
    return _norm_plan(caps, _layout(caps), op, code, rows, cols, eps, weight, bias)


@functools.lru_cache(maxsize=_PLANS)
def _norm_plan(caps: DeviceCaps, layout: tuple, op: str, code: str, rows: int, cols: int,
               eps: float, weight: bool, bias: bool) -> FixedLaunch:
    flags = int(weight) | int(bias) << 1
    program = NORM.specialize({**_row_variant(code, cols, layout), "OP": ROW_OPS[op]})
    return FixedLaunch(program, NORM_PUSH.pack(cols, rows, eps, flags), grid(caps, rows, 1),
                       (3,))


def reduce_plan(caps: DeviceCaps, op: str, code: str, rows: int, cols: int) -> FixedLaunch:
    """``sum``, ``mean`` or ``max`` over rows (``cols`` > 0). Operands: x, out."""
    return _reduce_plan(caps, _layout(caps), op, code, rows, cols)


@functools.lru_cache(maxsize=_PLANS)
def _reduce_plan(caps: DeviceCaps, layout: tuple, op: str, code: str, rows: int, cols: int
                 ) -> FixedLaunch:
    program = REDUCE_ROWS.specialize({**_row_variant(code, cols, layout),
                                      "OP": REDUCE_OPS[op]})
    return FixedLaunch(program, REDUCE_PUSH.pack(cols, rows), grid(caps, rows, 1), (1,))


@functools.lru_cache(maxsize=_PLANS)
def activation_plan(caps: DeviceCaps, act: int, code: str, size: int) -> FixedLaunch:
    """An activation (code ``act`` of ``ACTIVATIONS``) over ``size`` elements. Operands: x,
    out."""
    vec = 4 if size % 4 == 0 else 1
    units = size // vec
    program = ACTIVATION.specialize({"DTYPE": code, "VEC": vec, "ACT": act,
                                     WORKGROUP: ACTIVATION_WORKGROUP})
    return FixedLaunch(program, ACTIVATION_PUSH.pack(units),
                       grid(caps, units, ACTIVATION_WORKGROUP), (1,))


def gather_plan(caps: DeviceCaps, width: int, dim: int, count: int, vocab: int
                ) -> FixedLaunch:
    """Rows of a ``(vocab, dim)`` table of ``width``-bit elements picked by ``count`` ids.
    Operands: ids, table, out."""
    return _gather_plan(caps, _layout(caps), width, dim, count, vocab)


@functools.lru_cache(maxsize=_PLANS)
def _gather_plan(caps: DeviceCaps, layout: tuple, width: int, dim: int, count: int,
                 vocab: int) -> FixedLaunch:
    vec = 4 if dim % 4 == 0 else 1
    program = GATHER.specialize({"WIDTH": width, "VEC": vec,
                                 WORKGROUP: dict(layout)[WORKGROUP]})
    return FixedLaunch(program, GATHER_PUSH.pack(dim // vec, count, vocab),
                       grid(caps, count, 1), (2,))


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


@functools.lru_cache(maxsize=_PLANS)
def permute_plan(caps: DeviceCaps, op: str, width: int, shape: tuple[int, ...],
                 order: tuple[int, ...]) -> FixedLaunch:
    """A contiguous copy of a ``shape`` tensor of ``width``-bit elements with its dimensions
    reordered as ``order``. Operands: x, out.

    Raises:
        VkumdValueError: the reordering needs more than ``PERMUTE_MAX_OUTER + 1`` dimensions
            after merging the ones that stay adjacent.
    """
    out_shape = [shape[d] for d in order]
    source_strides = [math.prod(shape[d + 1:]) for d in range(len(shape))]
    merged_shape, merged_strides = _merged(out_shape, [source_strides[d] for d in order])
    most = PERMUTE_MAX_OUTER + 1
    if len(merged_shape) > most:
        raise VkumdValueError(f"{op}: this reordering of shape {shape} needs "
                              f"{len(merged_shape)} dimensions after merging; at most {most}")
    # Outer dimensions locate a row of the innermost one; the kernel walks that row.
    outer, outer_strides = merged_shape[:-1], merged_strides[:-1]
    cols = merged_shape[-1]
    rows = math.prod(out_shape) // cols
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
