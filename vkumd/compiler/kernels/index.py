"""The index kernels and their planners: ``shaders/gather_elements.comp`` (GatherElements),
``shaders/gather_nd.comp`` (GatherND), ``shaders/trilu.comp`` (triu/tril) and
``shaders/scatter.comp`` (ScatterElements and ScatterND, with their reductions).

The gathers and trilu copy stored bits (32- or 16-bit elements, any dtype of that width);
the scatter computes its reductions in the element's type (float32 for the float types).
Every kernel reads int32 indices, counts negative ones from the end of their axis, and
never reads or writes outside its buffers for an index still out of range (see each shader).
"""

from __future__ import annotations

import functools
import math

from vkumd.compiler.kernels.elementwise import storage_widths
from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import (
    INDEX_DTYPES,
    INDEX_MAX_DIMS,
    SCATTER_REDUCTIONS,
)
from vkumd.compiler.kernels.rows import PLANS
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

_DIMS = INDEX_MAX_DIMS
GATHER_ELEMENTS_PUSH = PushLayout("n:u32", "ndim:u32", "axis_size:u32", "axis_stride:u32",
                                  f"shape:u32[{_DIMS}]", f"stride:u32[{_DIMS}]")
GATHER_ND_PUSH = PushLayout("n:u32", "slice:u32", "tuples:u32", "depth:u32",
                            "batch_stride:u32", f"dims:u32[{_DIMS}]", f"strides:u32[{_DIMS}]")
TRILU_PUSH = PushLayout("n:u32", "rows:u32", "cols:u32", "k:i32", "upper:u32")
SCATTER_PUSH = PushLayout("lines:u32", "count:u32", "depth:u32", "ndim:u32", "axis_size:u32",
                          "u_axis_stride:u32", "o_axis_stride:u32", f"shape:u32[{_DIMS}]",
                          f"u_stride:u32[{_DIMS}]", f"o_stride:u32[{_DIMS}]")
SCATTER_CODES = type_codes(INDEX_DTYPES)
# The scatter's index modes (its MODE define): per-axis indices, or index tuples.
SCATTER_MODES = {"elements": 0, "nd": 1}
_UINT32 = 1 << 32


def _bit_variants(caps: DeviceCaps) -> list[dict]:
    return [{"WIDTH": w, WORKGROUP: ELEMENTWISE_WORKGROUP} for w in storage_widths(caps)]


def _scatter_variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in SCATTER_CODES.values() if caps.storage_16bit or c in ("F32", "I32")]
    return [{"DTYPE": c, "MODE": m, "REDUCE": r, WORKGROUP: ELEMENTWISE_WORKGROUP}
            for c in codes for m in SCATTER_MODES.values() for r in range(len(SCATTER_REDUCTIONS))]


GATHER_ELEMENTS = register(Kernel(
    name="gather_elements", source="gather_elements.comp", buffers=3,
    push=GATHER_ELEMENTS_PUSH, defines={"WIDTH": (32, 16)}, spec_constants={WORKGROUP: 0},
    variants=_bit_variants,
))
GATHER_ND = register(Kernel(
    name="gather_nd", source="gather_nd.comp", buffers=3, push=GATHER_ND_PUSH,
    defines={"WIDTH": (32, 16)}, spec_constants={WORKGROUP: 0}, variants=_bit_variants,
))
TRILU = register(Kernel(
    name="trilu", source="trilu.comp", buffers=2, push=TRILU_PUSH,
    defines={"WIDTH": (32, 16)}, spec_constants={WORKGROUP: 0}, variants=_bit_variants,
))
SCATTER = register(Kernel(
    name="scatter", source="scatter.comp", buffers=3, push=SCATTER_PUSH,
    defines={"DTYPE": tuple(SCATTER_CODES.values()), "MODE": tuple(SCATTER_MODES.values())},
    spec_constants={WORKGROUP: 0, "REDUCE": 1}, variants=_scatter_variants,
))


def _check_size(op: str, *counts: int) -> None:
    """The kernels index with 32-bit unsigned offsets."""
    for count in counts:
        if count >= _UINT32:
            raise VkumdValueError(f"{op}: {count} elements pass the kernel's 32-bit indexing; "
                                  "split the tensor")


def _launch(program: object, push: bytes, caps: DeviceCaps, items: int,
            writes: tuple[int, ...]) -> FixedLaunch:
    groups = -(-items // ELEMENTWISE_WORKGROUP)
    return FixedLaunch(program, push, looped_grid(caps, groups), writes)


def _merge(shape: list[int], strides: list[int], keep: int | None) -> tuple[list[int], list[int]]:
    """Dimensions of size 1 dropped and neighbours that stay contiguous in the source merged
    (never the one at index ``keep``)."""
    pairs = [(n, s, d == keep) for d, (n, s) in enumerate(zip(shape, strides, strict=True))
             if n != 1 or d == keep]
    merged: list[tuple[int, int, bool]] = []
    for n, s, kept in pairs:
        if merged and not kept and not merged[-1][2] and merged[-1][1] == s * n:
            merged[-1] = (merged[-1][0] * n, s, False)
        else:
            merged.append((n, s, kept))
    if not merged:
        merged = [(1, 0, False)]
    return [n for n, _, _ in merged], [s for _, s, _ in merged]


def _row_major(shape: tuple[int, ...]) -> list[int]:
    return [math.prod(shape[d + 1:]) for d in range(len(shape))]


def gather_elements_dims(data_shape: tuple[int, ...], index_shape: tuple[int, ...],
                         axis: int) -> tuple[list[int], list[int], int]:
    """The output's dimensions left after merging, data's strides for them, and data's
    stride along ``axis``."""
    strides = _row_major(data_shape)
    axis_stride = strides[axis]
    strides[axis] = 0
    shape, merged = _merge(list(index_shape), strides, None)
    return shape, merged, axis_stride


def scatter_elements_dims(data_shape: tuple[int, ...], index_shape: tuple[int, ...],
                          axis: int) -> list[tuple[int, int, int]]:
    """The update lines' dimensions left after merging, as (size, updates' stride, output's
    stride): every dimension but the axis, kept apart where the two layouts differ."""
    u_strides, o_strides = _row_major(index_shape), _row_major(data_shape)
    dims = [(n, u, o) for d, (n, u, o) in enumerate(zip(index_shape, u_strides, o_strides,
                                                         strict=True)) if n != 1 and d != axis]
    merged: list[tuple[int, int, int]] = []
    for n, u, o in dims:
        if merged and merged[-1][1] == u * n and merged[-1][2] == o * n:
            merged[-1] = (merged[-1][0] * n, u, o)
        else:
            merged.append((n, u, o))
    return merged or [(1, 0, 0)]


@functools.lru_cache(maxsize=PLANS)
def gather_elements_plan(caps: DeviceCaps, width: int, data_shape: tuple[int, ...],
                         index_shape: tuple[int, ...], axis: int) -> FixedLaunch:
    """``out[p] = data[p, its axis coordinate replaced by indices[p]]`` over a data of
    ``width``-bit elements. Operands: data, indices (int32), out.

    Raises:
        VkumdValueError: more than ``INDEX_MAX_DIMS`` dimensions left after merging; sizes
            past 32-bit indexing.
    """
    _check_size("gather_elements", math.prod(data_shape), math.prod(index_shape))
    shape, merged, axis_stride = gather_elements_dims(data_shape, index_shape, axis)
    if len(shape) > _DIMS:
        raise VkumdValueError(f"gather_elements: indices of shape {index_shape} need "
                              f"{len(shape)} dimensions after merging; the kernel takes "
                              f"{_DIMS}")
    pad = _DIMS - len(shape)
    n = math.prod(index_shape)
    push = GATHER_ELEMENTS_PUSH.pack(n, len(shape), data_shape[axis], axis_stride,
                                     *shape, *([1] * pad), *merged, *([0] * pad))
    program = GATHER_ELEMENTS.specialize({"WIDTH": width, WORKGROUP: ELEMENTWISE_WORKGROUP})
    return _launch(program, push, caps, n, (2,))


@functools.lru_cache(maxsize=PLANS)
def gather_nd_plan(caps: DeviceCaps, width: int, data_shape: tuple[int, ...], batch: int,
                   tuples: int, depth: int) -> FixedLaunch:
    """GatherND over a data of ``width``-bit elements whose first ``batch`` dimensions are
    batch dimensions: ``tuples`` index tuples of ``depth`` entries per batch element pick
    slices of ``data_shape[batch + depth:]``. Operands: data, indices (int32), out.

    Raises:
        VkumdValueError: a depth past ``INDEX_MAX_DIMS``; sizes past 32-bit indexing.
    """
    if depth > _DIMS:
        raise VkumdValueError(f"gather_nd: index tuples of {depth} entries; the kernel takes "
                              f"at most {_DIMS}")
    batches = math.prod(data_shape[:batch])
    indexed = list(data_shape[batch:batch + depth])
    slice_size = math.prod(data_shape[batch + depth:])
    n = batches * tuples * slice_size
    _check_size("gather_nd", math.prod(data_shape), n, batches * tuples * depth)
    strides = [math.prod(indexed[j + 1:]) * slice_size for j in range(depth)]
    pad = _DIMS - depth
    push = GATHER_ND_PUSH.pack(n, slice_size, tuples, depth, math.prod(data_shape[batch:]),
                               *indexed, *([1] * pad), *strides, *([0] * pad))
    program = GATHER_ND.specialize({"WIDTH": width, WORKGROUP: ELEMENTWISE_WORKGROUP})
    return _launch(program, push, caps, n, (2,))


@functools.lru_cache(maxsize=PLANS)
def trilu_plan(caps: DeviceCaps, width: int, shape: tuple[int, ...], k: int, upper: bool
               ) -> FixedLaunch:
    """The upper (``col - row >= k``) or lower (``col - row <= k``) triangle of the last two
    dimensions of ``shape``, the rest zeroed. Operands: x, out (may be x).

    Raises:
        VkumdValueError: sizes past 32-bit indexing.
    """
    n = math.prod(shape)
    _check_size("trilu", n)
    rows, cols = shape[-2], shape[-1]
    # Past these every element is kept or every one dropped: the clamp keeps k in int32.
    k = max(-rows - 1, min(k, cols + 1))
    push = TRILU_PUSH.pack(n, rows, cols, k, int(upper))
    program = TRILU.specialize({"WIDTH": width, WORKGROUP: ELEMENTWISE_WORKGROUP})
    return _launch(program, push, caps, n, (1,))


@functools.lru_cache(maxsize=PLANS)
def scatter_elements_plan(caps: DeviceCaps, code: str, data_shape: tuple[int, ...],
                          index_shape: tuple[int, ...], axis: int, reduction: str
                          ) -> FixedLaunch:
    """ScatterElements into ``out`` (already holding data): each line of the updates along
    ``axis`` is applied in order by one invocation. Operands: indices (int32), updates, out.

    Raises:
        VkumdValueError: more than ``INDEX_MAX_DIMS`` dimensions left after merging; sizes
            past 32-bit indexing.
    """
    _check_size("scatter_elements", math.prod(data_shape), math.prod(index_shape))
    u_strides, o_strides = _row_major(index_shape), _row_major(data_shape)
    merged = scatter_elements_dims(data_shape, index_shape, axis)
    if len(merged) > _DIMS:
        raise VkumdValueError(f"scatter_elements: updates of shape {index_shape} need "
                              f"{len(merged)} dimensions after merging; the kernel takes "
                              f"{_DIMS}")
    pad = _DIMS - len(merged)
    lines = math.prod(n for n, _, _ in merged)
    push = SCATTER_PUSH.pack(lines, index_shape[axis], 0, len(merged), data_shape[axis],
                             u_strides[axis], o_strides[axis],
                             *[n for n, _, _ in merged], *([1] * pad),
                             *[u for _, u, _ in merged], *([0] * pad),
                             *[o for _, _, o in merged], *([0] * pad))
    return _scatter_launch(caps, code, "elements", reduction, push, lines)


@functools.lru_cache(maxsize=PLANS)
def scatter_nd_plan(caps: DeviceCaps, code: str, data_shape: tuple[int, ...], tuples: int,
                    depth: int, reduction: str) -> FixedLaunch:
    """ScatterND into ``out`` (already holding data): ``tuples`` index tuples of ``depth``
    entries each address a slice of ``data_shape[depth:]``; one invocation per element of a
    slice applies every tuple's update to it in order. Operands: indices (int32), updates,
    out.

    Raises:
        VkumdValueError: a depth past ``INDEX_MAX_DIMS``; sizes past 32-bit indexing.
    """
    if depth > _DIMS:
        raise VkumdValueError(f"scatter_nd: index tuples of {depth} entries; the kernel takes "
                              f"at most {_DIMS}")
    slice_size = math.prod(data_shape[depth:])
    _check_size("scatter_nd", math.prod(data_shape), tuples * slice_size, tuples * depth)
    indexed = list(data_shape[:depth])
    strides = [math.prod(indexed[j + 1:]) * slice_size for j in range(depth)]
    pad = _DIMS - depth
    push = SCATTER_PUSH.pack(slice_size, tuples, depth, 0, 0, 0, 0, *indexed, *([1] * pad),
                             *([0] * _DIMS), *strides, *([0] * pad))
    return _scatter_launch(caps, code, "nd", reduction, push, slice_size)


def _scatter_launch(caps: DeviceCaps, code: str, mode: str, reduction: str, push: bytes,
                    items: int) -> FixedLaunch:
    program = SCATTER.specialize({"DTYPE": code, "MODE": SCATTER_MODES[mode],
                                  "REDUCE": SCATTER_REDUCTIONS.index(reduction),
                                  WORKGROUP: ELEMENTWISE_WORKGROUP})
    return _launch(program, push, caps, items, (2,))
