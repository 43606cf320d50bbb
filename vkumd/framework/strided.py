"""Strided layouts of tensor views: the arithmetic of shapes, element strides and offsets,
basic indexing as a view, and the one strided-copy launch that moves a view's elements.

A :class:`~vkumd.framework.tensor.Tensor` is ``shape``, ``strides`` and an element
``offset`` over an allocation of ``capacity`` elements, as a PyTorch tensor over its storage.
Kernels bind contiguous tensors that start at their allocation's first element. The binary
kernel reads any other view in place through the strides and offset in its push constants
where the device class is measured to gain from it (:func:`strided_operands`, CPU drivers);
for every other kernel, and on GPUs, a view is copied to contiguous memory by one launch
before the kernel reads it (:func:`contiguous_operands`). Writes through a view take one
launch (:func:`copy_into`).

Hazard tracking keys memory by its allocation's start (:mod:`vkumd.submission.hazards`), so
the strided copy binds the whole allocation of both sides and takes the offsets in its push
constants: a write through a view is ordered against every earlier and later use of any
tensor over the same allocation. That is conservative (two views of disjoint rows of one
tensor are ordered as if they overlapped), never wrong.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import storage_widths
from vkumd.compiler.kernels.permute import strided_read_plan
from vkumd.compiler.kernels.strided import strided_copy_plan
from vkumd.errors import VkumdIndexError, VkumdTypeError, VkumdValueError

Layout = tuple[tuple[int, ...], tuple[int, ...], int]
"""``(shape, strides, offset)`` in elements."""


def contiguous_strides(shape: Sequence[int]) -> tuple[int, ...]:
    """Row-major element strides of ``shape``."""
    strides = []
    step = 1
    for n in reversed(shape):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))


def is_row_major(shape: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether ``strides`` lay ``shape`` out contiguously in row-major order (strides of
    size-1 dimensions do not matter, as in PyTorch)."""
    step = 1
    for n, s in zip(reversed(shape), reversed(strides), strict=True):
        if n == 0:
            return True
        if n != 1 and s != step:
            return False
        step *= n
    return True


def check_span(what: str, shape: Sequence[int], strides: Sequence[int], offset: int,
               capacity: int) -> None:
    """Refuse a layout that reaches outside ``capacity`` elements of storage.

    Raises:
        VkumdValueError: an element of the view lies before 0 or at ``capacity`` or past.
    """
    if math.prod(shape) == 0:
        return
    low = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s < 0)
    high = offset + sum((n - 1) * s for n, s in zip(shape, strides, strict=True) if s > 0)
    if low < 0 or high >= capacity:
        raise VkumdValueError(f"{what}: a view of shape {tuple(shape)}, strides "
                              f"{tuple(strides)} and offset {offset} reaches elements {low} to "
                              f"{high} of a storage of {capacity}")


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def index_view(shape: tuple[int, ...], strides: tuple[int, ...], offset: int, key: Any
               ) -> Layout:
    """Basic indexing ``t[key]`` as a view: ints, slices with any nonzero step (negative
    ones too, as numpy), one ``...`` and ``None``.

    Returns:
        The view's ``(shape, strides, offset)``.

    Raises:
        VkumdTypeError: fancy indexing (lists, arrays, tensors, bools) or non-int bounds.
        VkumdValueError: a step of 0, or two ellipses.
        VkumdIndexError: an int out of range, or more indices than dimensions.
    """
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_int(k)):
            raise VkumdTypeError(f"Tensor[...]: index {k!r} is not supported; vkumd takes "
                                 "ints, slices, ... and None (no fancy or boolean indexing: "
                                 "index on the host with t.numpy()[...])")
    if sum(k is Ellipsis for k in items) > 1:
        raise VkumdValueError("Tensor[...]: an index may hold one ... only")
    used = sum(k is not None and k is not Ellipsis for k in items)
    if used > len(shape):
        raise VkumdIndexError(f"Tensor[...]: {used} indices for a {len(shape)}-d tensor of "
                              f"shape {shape}")
    fill = (slice(None),) * (len(shape) - used)
    at = next((i for i, k in enumerate(items) if k is Ellipsis), None)
    items = (*items[:at], *fill, *items[at + 1:]) if at is not None else (*items, *fill)
    dims: list[int] = []
    steps: list[int] = []
    d = 0
    for k in items:
        if k is None:
            dims.append(1)
            steps.append(0)
            continue
        n, s = shape[d], strides[d]
        if isinstance(k, slice):
            if k.step is not None and _is_int(k.step) and k.step == 0:
                raise VkumdValueError(f"Tensor[...]: slice step 0 along dimension {d} (shape "
                                      f"{shape}); a step must be a nonzero int")
            try:
                start, stop, step = k.indices(n)
            except TypeError:
                raise VkumdTypeError(f"Tensor[...]: slice bounds and step must be ints or "
                                     f"None, not {k!r}") from None
            length = len(range(start, stop, step))
            if length:
                offset += start * s
            dims.append(length)
            steps.append(s * step)
        else:
            i = int(k) + n if k < 0 else int(k)
            if not 0 <= i < n:
                raise VkumdIndexError(f"Tensor[...]: index {k} is out of range for dimension "
                                      f"{d} of size {n} (shape {shape})")
            offset += i * s
        d += 1
    return tuple(dims), tuple(steps), offset


def expanded(op: str, shape: tuple[int, ...], strides: tuple[int, ...], target: Sequence[int]
             ) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(shape, strides)`` broadcast to ``target`` without a copy (stride 0 where a size-1
    dimension grows or a leading one is added); ``-1`` in ``target`` keeps a size, as
    ``torch.Tensor.expand``.

    Raises:
        VkumdTypeError: ``target`` not ints.
        VkumdValueError: fewer dimensions than the tensor, or a size that does not broadcast.
    """
    if not all(_is_int(n) for n in target):
        raise VkumdTypeError(f"{op}: the shape {tuple(target)!r} must hold ints")
    lead = len(target) - len(shape)
    if lead < 0:
        raise VkumdValueError(f"{op}: shape {tuple(target)} has fewer dimensions than the "
                              f"tensor's {shape}")
    dims: list[int] = []
    steps: list[int] = []
    for i, want in enumerate(int(n) for n in target):
        if i < lead:
            if want < 0:
                raise VkumdValueError(f"{op}: size {want} for a new leading dimension of "
                                      f"{tuple(target)}; give its size")
            dims.append(want)
            steps.append(0)
            continue
        n, s = shape[i - lead], strides[i - lead]
        if want == -1 or want == n:
            dims.append(n)
            steps.append(s)
        elif n == 1 and want >= 0:
            dims.append(want)
            steps.append(0)
        else:
            raise VkumdValueError(f"{op}: the tensor's shape {shape} does not broadcast to "
                                  f"{tuple(target)} (dimension {i - lead} of size {n} can "
                                  f"only become {n}, or any size from 1)")
    return tuple(dims), tuple(steps)


class WholeAllocation:
    """A kernel operand binding all of a tensor's allocation (see the module notes)."""

    __slots__ = ("binding",)

    def __init__(self, t: Any) -> None:
        allocation = t.allocation
        self.binding = (allocation.buffer, allocation.offset, t.capacity * t.dtype.itemsize)


def reads_views_in_place(caps: Any) -> bool:
    """Whether kernels that index their operands through strides (the binary kernel) read a
    view in place on this device class, rather than being given a contiguous copy.

    On a CPU driver every lane's load is a gather either way, so reading a view in place
    saves the copy's launch, its writes and the second read: ``bench/views.py`` measured
    ``add(a.T, b)`` read in place at the contiguous add's time or less against 2.4-2.9x it
    through a copy (docs/performance.md). On a GPU a transposed read breaks coalescing, which
    a copy through the permute kernel's rows does not; without a measurement there, GPUs keep
    the copy.
    """
    return caps.device_type == "cpu"


def strided_operands(caps: Any, operands: Sequence[Any], written: Any
                     ) -> tuple[tuple[Any, ...], tuple[tuple[tuple[int, ...], int] | None, ...]
                                ] | None:
    """The operands to bind and their in-place layouts for a kernel that reads strided
    operands through its push constants, or ``None`` where every operand binds as it is,
    this device class copies views instead (:func:`reads_views_in_place`), or a view shares
    memory with ``written``, the tensor the kernel writes (an invocation could read an
    element another has already overwritten; the copy reads it first).

    A view is bound as its whole allocation (as the strided copy binds it, so hazards are
    tracked on the allocation) with ``(element strides, element offset)`` as its layout;
    a tensor that binds as it is keeps ``None``.
    """
    if all(t.binding is not None for t in operands) or not reads_views_in_place(caps):
        return None
    if any(t.binding is None and t.allocation is not None
           and t.allocation is written.allocation for t in operands):
        return None
    bound: list[Any] = []
    layouts: list[tuple[tuple[int, ...], int] | None] = []
    for t in operands:
        if t.binding is not None or t.allocation is None or not t.size:
            bound.append(t)  # as it is (a released tensor is the launcher's error)
            layouts.append(None)
        else:
            bound.append(WholeAllocation(t))
            layouts.append((t.element_strides, t.element_offset))
    return tuple(bound), tuple(layouts)


def launch_copy(src: Any, dst: Any) -> None:
    """Copy ``src``'s elements into ``dst``'s (same shape and dtype, both live and
    non-empty; ``src`` may be broadcast by zero strides) with one launch. Neither needs to
    be contiguous; they must not share an allocation.

    Into a tensor kernels bind, from a view that starts at its allocation's first element
    with no negative stride (a transpose, permute, expand, or a slice from 0), this is the
    permute kernel, which walks rows and carries its indices: ``bench/views.py`` measured it
    2.4-2.6x faster than the strided-copy kernel for an N x N transpose on lavapipe. Any other
    layout (an offset, negative steps, a strided destination) takes the strided-copy kernel.
    """
    caps = src.context.caps
    width = 8 * src.dtype.itemsize
    if (dst.binding is not None and src.element_offset == 0
            and min(src.element_strides, default=0) >= 0
            and width in storage_widths(caps)):
        try:
            plan = strided_read_plan(caps, "contiguous", width, dst.shape, src.element_strides)
        except VkumdValueError:  # more dimensions than the permute kernel walks
            pass
        else:
            src.context.run(plan, (WholeAllocation(src), dst))
            return
    plan = strided_copy_plan(src.context.caps, 8 * src.dtype.itemsize, dst.shape,
                             src.element_offset, src.element_strides,
                             dst.element_offset, dst.element_strides)
    src.context.run(plan, (WholeAllocation(src), WholeAllocation(dst)))


def copy_into(what: str, dst: Any, src: Any) -> None:
    """Write tensor ``src`` (broadcast to ``dst.shape``; ``dst``'s dtype and context) into
    ``dst``, which may be any view: one strided-copy launch, or two when ``src`` shares
    ``dst``'s memory (it is copied out first, as PyTorch does for overlapping copies).

    Raises:
        VkumdValueError: ``src`` does not broadcast to ``dst``'s shape.
    """
    if src.shape != dst.shape:
        try:
            shape, strides = expanded(what, src.shape, src.element_strides, dst.shape)
        except (VkumdValueError, VkumdTypeError):
            raise VkumdValueError(f"{what}: a value of shape {src.shape} does not broadcast "
                                  f"to the target's shape {dst.shape}") from None
        src = src.as_strided(shape, strides, src.element_offset)
    if dst.size == 0:
        return
    if src.allocation is dst.allocation:
        if (src.element_strides == dst.element_strides
                and src.element_offset == dst.element_offset):
            return  # the same elements: t[k] = t[k]
        src = src.copied()
    launch_copy(src, dst)


def contiguous_operands(run: Any) -> Any:
    """``run(plan, operands)`` (a context's launcher) made to take strided views: each view
    that a kernel cannot bind (not contiguous from its allocation's start) is copied to new
    contiguous memory by one strided-copy launch first, and that copy is released once the
    launches are recorded (its memory returns to the pool after they run).

    A view among the operands a plan writes (``plan.writes``) is refused: the kernel would
    write the copy. Ops refuse such an ``out=`` before this (:func:`~vkumd.framework.ops.
    checks.output`); ``t += x`` and ``view.copy_()`` write through views themselves.
    """
    def run_contiguous(plan: Any, operands: Sequence[Any]) -> None:
        for t in operands:
            if t is not None and t.binding is None:
                break
        else:  # the common case: every operand binds as it is
            run(plan, operands)
            return
        _run_with_copies(run, plan, operands)

    run_contiguous.__wrapped__ = run  # type: ignore[attr-defined]
    return run_contiguous


def _run_with_copies(run: Any, plan: Any, operands: Sequence[Any]) -> None:
    written = getattr(plan, "writes", ())
    copies: list[Any] = []
    prepared: list[Any] = []
    try:
        for i, t in enumerate(operands):
            if (t is None or t.binding is not None or not hasattr(t, "copied")
                    or not t.size or t.released):
                prepared.append(t)  # as it is (a released tensor is the launcher's error)
                continue
            if i in written:
                raise VkumdValueError(
                    f"a kernel would write a strided view of shape {t.shape} (strides "
                    f"{t.element_strides}, offset {t.element_offset}), which it cannot bind; "
                    "write into a contiguous tensor and copy it in with view.copy_(result)")
            copy = t.copied()
            copies.append(copy)
            prepared.append(copy)
        run(plan, prepared)
    finally:
        for copy in copies:
            copy.release()
