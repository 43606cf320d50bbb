"""Views: tensors over a byte range of another tensor's memory, and the arena they live in.

A compiled graph keeps every intermediate in one allocation (the arena) at the offsets the
memory planner chose; a reshape is the same bytes under another shape. Both are
:class:`TensorView` objects, made by :func:`view`: a view binds ``(buffer, base offset +
offset, nbytes)`` and has its own device address, so every op takes it like any tensor.
Releasing a view frees nothing; the base tensor owns the memory, and a view keeps the base
object alive. Host access to a view waits for the work that used the view's own range and
the base's.

Hazards are tracked by a range's start: work recorded on views that overlap (or on a view
and its base) is ordered only inside a capture that declared the ranges with
``Graph.track_overlaps`` (as :class:`~vkumd.framework.execute.CompiledGraph` does); outside
one, separate such work with ``synchronize()``. Host access to the base does not wait for
work recorded through its views.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable
from typing import Any

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor


class TensorView(Tensor):
    """A tensor over ``nbytes`` of ``base``'s memory from byte ``offset``; see :func:`view`.

    Attributes:
        base: the tensor that owns the memory.
        byte_offset: where the view starts in ``base``.
    """

    def __init__(self, base: Tensor, shape: tuple[int, ...], dtype: dtypes.DType,
                 offset: int) -> None:
        nbytes = dtype.nbytes(math.prod(shape))
        owner = base.allocation
        allocation = None
        if nbytes and owner is not None:
            # The same block and usage, a narrower range: binding, address, host reads and
            # writes all follow from the allocation's offset and size.
            allocation = dataclasses.replace(owner, offset=owner.offset + offset, size=nbytes)
        super().__init__(base.context, shape, dtype, allocation)
        self.base = base
        self.byte_offset = offset

    def numpy(self) -> Any:
        """Copy the view to a new numpy array (after the work on its base, too)."""
        self._wait_for_base("Tensor.numpy()")
        return super().numpy()

    def write(self, array: Any, *, stream: Any = None) -> None:
        """Overwrite the view's bytes (see :meth:`Tensor.write`)."""
        self._wait_for_base("Tensor.write()")
        super().write(array, stream=stream)

    def _wait_for_base(self, what: str) -> None:
        # Work that bound the whole base is keyed by the base's start, not the view's.
        if not self.base.released and self.base.allocation is not None:
            self.context.before_host_access(self.base, what)

    def _release(self) -> None:
        # The base owns the memory: a view only forgets its range.
        self.allocation = None

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<vkumd.TensorView shape={self.shape} dtype={self.dtype.name} "
                f"at +{self.byte_offset}{state}>")


def view(base: Tensor, shape: Iterable[int], dtype: Any = None, offset: int = 0) -> TensorView:
    """A tensor of ``shape`` and ``dtype`` over ``base``'s bytes from ``offset``.

    Args:
        base: a live tensor (or view: the new view then points into the same owner).
        shape: the view's dimensions.
        dtype: its element type; default ``base``'s.
        offset: bytes from ``base``'s start; a multiple of the device's storage-buffer
            offset alignment when kernels bind the view.

    Returns:
        The view.

    Raises:
        VkumdValueError: the range does not fit in ``base``, or ``base`` was released.
    """
    dims = tuple(int(d) for d in shape)
    dt = base.dtype if dtype is None else dtypes.dtype(dtype)
    nbytes = dt.nbytes(math.prod(dims))
    if base.released:
        raise VkumdValueError("view(): the base tensor was released")
    if offset < 0 or offset + nbytes > base.nbytes:
        raise VkumdValueError(f"view(): {nbytes} bytes at offset {offset} do not fit in a "
                              f"tensor of {base.nbytes} bytes")
    if isinstance(base, TensorView):
        return view(base.base, dims, dt, base.byte_offset + offset)
    return TensorView(base, dims, dt, offset)


class Arena:
    """One allocation of ``nbytes`` holding a graph's intermediates as views.

    Args:
        context: the owning context.
        nbytes: the arena's size (0: no memory; every view must then be empty).
    """

    def __init__(self, context: Any, nbytes: int) -> None:
        self.nbytes = nbytes
        self.base = context.empty((max(nbytes, 1),), dtypes.uint8)

    def release(self) -> None:
        """Free the arena; a live graph recorded over its views pins the memory until that
        graph is released."""
        self.base.release()
