"""Planning the elementwise kernels: broadcast strides, push constants and grids.

One pipeline per kernel and element type serves every shape: the shape and the broadcast
strides travel in push constants. Neighbouring dimensions every operand steps through
contiguously are merged first, and ``ndim`` 0 tells the kernel that every operand has the
output's shape, so it indexes them directly. Plans are cached on the shapes and the device
(programs repeat a few shapes, and working a plan out costs more than recording it).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from vkumd.compiler.kernels.elementwise import (
    BINARY_PUSH,
    ELEMENTWISE_BINARY,
    ELEMENTWISE_FILL,
    ELEMENTWISE_MAX_DIMS,
    ELEMENTWISE_OPS,
    ELEMENTWISE_UNARY,
    ELEMENTWISE_UNARY_OPS,
    FILL_PUSH,
    UNARY_PUSH,
    int64_emulated,
)
from vkumd.compiler.kernels.elementwise_vector import (
    invocations,
    vector_aligned,
    vector_layout,
)
from vkumd.compiler.launch import KernelVariant, Launch, Operand
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

ELEMENTWISE_WORKGROUP = 64
# Workgroups per dispatch on CPU drivers: lavapipe pays per workgroup, so a few large ones
# looping over the elements beat one per 64 elements. GPUs get one group per 64 elements
# up to the dispatch limit, then loop too.
CPU_WORKGROUPS = 64
# ... and each of them loops over at least this many pieces of work (64 x 64 elements for the
# elementwise kernels): on lavapipe an extra workgroup costs about as much as 130
# elements of an add (docs/performance.md, "Kernel tuning").
CPU_PIECES_PER_WORKGROUP = 64
_PLANS = 4096


@dataclass(frozen=True)
class FixedLaunch:
    """A plan of one launch whose push constants and grid the problem fixes; the operands
    supply the bindings (an absent optional operand binds the first one, never read).

    Attributes:
        program: the kernel variant.
        push: the packed push constants.
        groups: workgroup counts.
        writes: indices of the operands the kernel writes.
        scratch: none.
    """

    program: KernelVariant
    push: bytes
    groups: tuple[int, int, int]
    writes: tuple[int, ...]
    scratch: tuple[int, ...] = ()

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """One launch binding ``operands`` in kernel order."""
        first = operands[0].binding  # type: ignore[union-attr]
        buffers = tuple([first if o is None else o.binding for o in operands])
        return [Launch(self.program, buffers, self.push, self.groups, self.writes)]


def looped_grid(caps: DeviceCaps, groups: int) -> tuple[int, int, int]:
    """A grid for a kernel whose workgroups loop over ``groups`` pieces of work: capped at
    :data:`CPU_WORKGROUPS` on CPU drivers (each looping over at least
    :data:`CPU_PIECES_PER_WORKGROUP` pieces) and at the dispatch limit elsewhere."""
    if caps.device_type == "cpu":
        return (max(1, min(-(-groups // CPU_PIECES_PER_WORKGROUP), CPU_WORKGROUPS)), 1, 1)
    return (max(1, min(groups, caps.max_workgroup_count[0])), 1, 1)


def _strides_for(shape: tuple[int, ...], out_shape: tuple[int, ...]) -> list[int]:
    """Element strides of a row-major ``shape`` broadcast to ``out_shape`` (0 = repeated)."""
    padded = (1,) * (len(out_shape) - len(shape)) + shape
    strides = [0] * len(out_shape)
    step = 1
    for d in range(len(out_shape) - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    return strides


def _collapse(out_shape: tuple[int, ...], strides: list[list[int]]
              ) -> tuple[list[int], list[list[int]]]:
    """Merge neighbouring dimensions that every input steps through contiguously; drop 1s."""
    dims: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(out_shape):
        if size == 1:
            continue
        if dims and all(s[d] * size == m[-1] for s, m in zip(strides, merged, strict=True)):
            dims[-1] *= size
            for s, m in zip(strides, merged, strict=True):
                m[-1] = s[d]
            continue
        dims.append(size)
        for s, m in zip(strides, merged, strict=True):
            m.append(s[d])
    return dims, merged


def shape_words(out_shape: tuple[int, ...], *inputs: tuple[int, ...]) -> list[int]:
    """``n, ndim, shape[6]`` then each input's ``stride[6]``, as the kernels' blocks begin.

    Raises:
        VkumdValueError: more than :data:`ELEMENTWISE_MAX_DIMS` dimensions remain after
            merging the contiguous ones.
    """
    padded = ELEMENTWISE_MAX_DIMS
    size = math.prod(out_shape)
    if all(shape == out_shape for shape in inputs):
        return [size, 0, *([1] * padded), *([0] * (padded * len(inputs)))]
    dims, strides = _collapse(out_shape, [_strides_for(shape, out_shape) for shape in inputs])
    if not dims:  # every dimension is 1
        dims, strides = [1], [[0] for _ in inputs]
    if len(dims) > padded:
        raise VkumdValueError(f"broadcasting to {out_shape} needs {len(dims)} dimensions after "
                              f"merging; elementwise kernels take at most {padded}")
    words = [size, len(dims), *dims, *([1] * (padded - len(dims)))]
    for stride in strides:
        words += stride + [0] * (padded - len(stride))
    return words


def strided_words(out_shape: tuple[int, ...],
                  *inputs: tuple[tuple[int, ...], tuple[int, ...], int]) -> list[int]:
    """As :func:`shape_words`, for inputs read in place as strided views: each input is
    ``(shape, element strides, element offset)`` in its bound allocation, broadcast to
    ``out_shape``; the offsets follow the strides. Strides may be negative (signed here;
    the kernels take them as two's complement).

    Raises:
        VkumdValueError: more than :data:`ELEMENTWISE_MAX_DIMS` dimensions remain after
            merging the contiguous ones.
    """
    padded = ELEMENTWISE_MAX_DIMS
    rank = len(out_shape)
    broadcast = []
    for shape, strides, _ in inputs:
        lead = rank - len(shape)
        broadcast.append([0] * lead + [s if n != 1 else 0 for n, s in
                                       zip(shape, strides, strict=True)])
    dims, merged = _collapse(out_shape, broadcast)
    if not dims:
        dims, merged = [1], [[0] for _ in inputs]
    if len(dims) > padded:
        raise VkumdValueError(f"broadcasting to {out_shape} needs {len(dims)} dimensions after "
                              f"merging; elementwise kernels take at most {padded}")
    words = [math.prod(out_shape), len(dims), *dims, *([1] * (padded - len(dims)))]
    for stride in merged:
        words += stride + [0] * (padded - len(stride))
    return words + [offset for _, _, offset in inputs]


def _u32(words: list[int]) -> list[int]:
    """Signed words as the kernels read them (two's complement)."""
    return [w & 0xFFFFFFFF for w in words]


@functools.lru_cache(maxsize=_PLANS)
def binary_plan(caps: DeviceCaps, op: str, dtype: str, a_shape: tuple[int, ...],
                b_shape: tuple[int, ...], out_shape: tuple[int, ...],
                vector: bool = True, out: str | None = None,
                layouts: tuple[tuple[tuple[int, ...], int] | None, ...] | None = None
                ) -> FixedLaunch:
    """``out = a OP b`` with ``a`` and ``b`` broadcast to ``out_shape``.

    Operands: a, b, out. ``op`` is a key of ``ELEMENTWISE_OPS``; ``dtype`` a type code; ``out``
    the result's code where it differs (``MASK_CODE``, for a comparison's uint8 mask).
    ``layouts``: for an input read in place as a strided view, ``(element strides, element
    offset)`` in the allocation it is bound with; ``None`` (for both, or one) where the
    input is contiguous and bound as it is.
    Where the layout allows (:func:`~vkumd.compiler.kernels.elementwise_vector.vector_layout`)
    the plan takes the kernel's vectorised variant (``VEC`` 4: four elements per invocation,
    the same bits); ``vector=False`` always takes the scalar one, which benchmarks and tests
    compare against. The choice is part of the cached plan, so a call costs nothing for it.
    """
    if layouts is None or all(layout is None for layout in layouts):
        words = [*shape_words(out_shape, a_shape, b_shape), 0, 0]
    else:
        words = strided_words(out_shape, *(
            (shape, *(layout or (_row_major(shape), 0)))
            for shape, layout in zip((a_shape, b_shape), layouts, strict=True)))
        # The vector paths index from each binding's start with non-negative strides.
        if words[-2:] != [0, 0] or min(words) < 0:
            vector = False
        words = _u32(words)
    emulated = int64_emulated(caps, dtype)
    mask = (vector_layout(caps, (dtype, dtype, out or dtype), words)
            if vector and not emulated else None)
    variant = {"DTYPE": dtype, "OP": ELEMENTWISE_OPS[op], "VEC": 1 if mask is None else 4,
               "BCAST": mask or 0, WORKGROUP: ELEMENTWISE_WORKGROUP}
    if out is not None:
        variant["OUT"] = out
    if emulated:  # int64 in two 32-bit words (DeviceCaps.int64_arithmetic)
        variant["EMU64"] = 1
    program = ELEMENTWISE_BINARY.specialize(variant)
    size = math.prod(out_shape)
    return FixedLaunch(program, BINARY_PUSH.pack(*words),
                       _grid(caps, invocations(size, mask is not None)), (2,))


@functools.lru_cache(maxsize=_PLANS)
def unary_plan(caps: DeviceCaps, kind: str, src: str, dst: str, src_shape: tuple[int, ...],
               out_shape: tuple[int, ...], alpha_bits: int = 0,
               vector: bool = True,
               layout: tuple[tuple[int, ...], int] | None = None) -> FixedLaunch:
    """``out = convert(src)`` or ``out = src * alpha`` with ``src`` broadcast to ``out_shape``.

    Operands: src, out. ``kind`` is a key of ``ELEMENTWISE_UNARY_OPS``; ``alpha_bits`` the
    scale's float32 bits (or int32 value) for ``"scale"``. ``layout``: ``(element strides,
    element offset)`` of a source read in place as a strided view (as for
    :func:`binary_plan`). As :func:`binary_plan`, the vectorised variant where the layout
    allows and ``vector``.
    """
    size = math.prod(out_shape)
    offset = 0
    if layout is None:
        words = shape_words(out_shape, src_shape)
    else:
        *words, offset = strided_words(out_shape, (src_shape, *layout))
        if offset or min(words) < 0:  # the vector paths: aligned, non-negative steps
            vector = False
        words = _u32(words)
    emulated = int64_emulated(caps, src, dst)
    mask = vector_layout(caps, (src, dst), words) if vector and not emulated else None
    dims = words[2:2 + words[1]]
    push = UNARY_PUSH.pack(*words, alpha_bits, offset, 0, *_padded(_row_major(dims)))
    return FixedLaunch(_unary_program(kind, src, dst, mask, emulated), push,
                       _grid(caps, invocations(size, mask is not None)), (1,))


def _unary_program(kind: str, src: str, dst: str, mask: int | None,
                   emulated: bool = False) -> KernelVariant:
    """The unary kernel's variant: scalar where ``mask`` is None, else VEC 4 with it;
    ``emulated``: int64 in two 32-bit words (``EMU64`` 1)."""
    variant = {"SRC": src, "DST": dst, "OP": ELEMENTWISE_UNARY_OPS[kind],
               "VEC": 1 if mask is None else 4, "BCAST": mask or 0,
               WORKGROUP: ELEMENTWISE_WORKGROUP}
    if emulated:
        variant["EMU64"] = 1
    return ELEMENTWISE_UNARY.specialize(variant)


def _row_major(shape: Sequence[int]) -> list[int]:
    """Element strides of a contiguous row-major ``shape``."""
    strides = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        strides[d] = strides[d + 1] * shape[d + 1]
    return strides


def _padded(words: list[int], fill: int = 0) -> list[int]:
    return words + [fill] * (ELEMENTWISE_MAX_DIMS - len(words))


@functools.lru_cache(maxsize=_PLANS)
def window_copy_plan(caps: DeviceCaps, src: str, dst: str, window: tuple[int, ...],
                     src_shape: tuple[int, ...], src_start: tuple[int, ...],
                     dst_shape: tuple[int, ...], dst_start: tuple[int, ...]) -> FixedLaunch:
    """A ``window``-shaped block of a contiguous ``src_shape`` tensor at ``src_start``,
    converted and written into a contiguous ``dst_shape`` tensor at ``dst_start``: a slice read
    out of a tensor, or a block written into a slice of one (concatenation).

    Operands: src, out. ``src`` and ``dst`` are element-type codes. Both sides become element
    strides and offsets for the ``elementwise_unary`` kernel; dimensions that both sides step
    through contiguously are merged first, so a leading-dimension slice runs as one flat copy.

    Raises:
        VkumdValueError: more than :data:`ELEMENTWISE_MAX_DIMS` dimensions remain after
            merging.
    """
    src_strides, dst_strides = _row_major(src_shape), _row_major(dst_shape)
    src_offset = sum(i * s for i, s in zip(src_start, src_strides, strict=True))
    dst_offset = sum(i * s for i, s in zip(dst_start, dst_strides, strict=True))
    dims, (read, write) = _collapse(window, [src_strides, dst_strides])
    if not dims:  # every dimension is 1: one element
        dims, read, write = [1], [0], [0]
    if len(dims) > ELEMENTWISE_MAX_DIMS:
        raise VkumdValueError(f"copying a {window} window needs {len(dims)} dimensions after "
                              f"merging; the copy kernel takes at most {ELEMENTWISE_MAX_DIMS}")
    # One flat run on both sides is the kernel's index-free path (ndim 0).
    ndim = 0 if len(dims) == 1 and read == [1] and write == [1] else len(dims)
    size = math.prod(window)
    push = UNARY_PUSH.pack(size, ndim, *_padded(dims, 1), *_padded(read), 0, src_offset,
                           dst_offset, *_padded(write))
    # The vector variant takes one flat run whose both ends start on a vector.
    emulated = int64_emulated(caps, src, dst)
    vector = (ndim == 0 and src_offset % 4 == 0 and dst_offset % 4 == 0
              and vector_aligned(caps, (src, dst)) and not emulated)
    program = _unary_program("convert", src, dst, 0 if vector else None, emulated)
    return FixedLaunch(program, push, _grid(caps, invocations(size, vector)), (1,))


@functools.lru_cache(maxsize=_PLANS)
def fill_plan(caps: DeviceCaps, width: int, count: int, bits: int,
              vector: bool = True) -> FixedLaunch:
    """Every one of ``count`` elements of ``width`` bits set to ``bits``. Operands: out.

    Four elements per invocation (one vector store) where bindings are vector-aligned
    (:func:`~vkumd.compiler.kernels.elementwise_vector.vector_aligned`) and ``vector``.
    """
    vectorised = vector and vector_aligned(caps, ("F32" if width == 32 else "F16",))
    program = ELEMENTWISE_FILL.specialize({"WIDTH": width, "VEC": 4 if vectorised else 1,
                                           WORKGROUP: ELEMENTWISE_WORKGROUP})
    return FixedLaunch(program, FILL_PUSH.pack(count, bits),
                       _grid(caps, invocations(count, vectorised)), (0,))


def _grid(caps: DeviceCaps, n: int) -> tuple[int, int, int]:
    return looped_grid(caps, -(-n // ELEMENTWISE_WORKGROUP))
