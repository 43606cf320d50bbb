"""The eager tensor's own view methods: :class:`ViewMethods`, mixed into
:class:`~vkumd.framework.tensor.Tensor`.

PyTorch's stride surface (``stride()``, ``storage_offset()``, ``is_contiguous()``,
``contiguous()``, ``copy_()``) and the views that have no graph op (``expand``,
``broadcast_to``, ``expand_as``, ``diagonal``): the traced tensor does not have them. The views
the two tensors share (``transpose``, ``permute``, ``.T``, ``narrow``, indexing) are
:class:`~vkumd.framework.graph.methods.TensorMethods` and the eager indexing of
:class:`~vkumd.framework.tensor_methods.EagerMethods`. The layout arithmetic is
:mod:`vkumd.framework.strided`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.strided import copy_into, expanded

if TYPE_CHECKING:
    from vkumd.framework.tensor import Tensor


class ViewMethods:
    """Strides, contiguity, writes into views, and the eager-only views (see the module
    notes); every view shares the tensor's memory and costs no launch."""

    __slots__ = ()

    # -- strides, as PyTorch ------------------------------------------------------------
    def stride(self, dim: int | None = None) -> Any:
        """Element strides (a tuple), or the stride of ``dim``, as ``torch.Tensor.stride``.

        Raises:
            VkumdValueError: ``dim`` out of range.
        """
        if dim is None:
            return self.element_strides
        return self.element_strides[self._dim("stride", dim)]

    def storage_offset(self) -> int:
        """The first element's index in the memory this tensor views, as PyTorch."""
        return self.element_offset

    def is_contiguous(self) -> bool:
        """Whether the elements lie in row-major order without gaps, as PyTorch (a view may
        be contiguous and start past its allocation's first element)."""
        return self._row_major

    def contiguous(self) -> Tensor:
        """This tensor when contiguous, else a contiguous copy in new memory (one
        strided-copy launch), as ``torch.Tensor.contiguous``."""
        self._live_allocation("Tensor.contiguous()")
        return self if self._row_major else self.copied()

    def copy_(self, src: Any) -> Tensor:
        """Write ``src`` into this tensor's elements (which may be any view: the base sees
        the change), as ``torch.Tensor.copy_``: one strided-copy launch.

        Args:
            src: a tensor of this context (broadcast to this shape; another dtype is cast
                first), a number, or an array (uploaded first).

        Returns:
            This tensor.

        Raises:
            VkumdValueError: ``src`` does not broadcast to this shape, or belongs to another
                context.
            VkumdTypeError: a value the dtype does not take (as :meth:`Context.tensor`).
        """
        self._live_allocation("Tensor.copy_()")
        source = self._source("Tensor.copy_()", src)
        copy_into("Tensor.copy_()", self, source)
        return self

    def _source(self, what: str, value: Any) -> Tensor:
        """``value`` as a tensor of this context and dtype, to be broadcast into this one."""
        if isinstance(value, ViewMethods):  # a vkumd Tensor
            value._live_allocation(what)
            if value.context is not self.context:
                raise VkumdValueError(f"{what}: the value belongs to another context; move it "
                                      "with ctx.tensor(value.numpy())")
            return value if value.dtype is self.dtype else self._ops.cast(value, self.dtype)
        if isinstance(value, (bool, int, float, np.number, np.bool_)):
            return self._ops.fill(self.context.empty((), self.dtype), value)
        return self.context.tensor(value, dtype=self.dtype)

    def _dim(self, what: str, dim: Any) -> int:
        """``dim`` as an index into this tensor's dimensions (negative counts from the end)."""
        ndim = max(self.ndim, 1)
        if isinstance(dim, (bool, np.bool_)) or not isinstance(dim, (int, np.integer)):
            raise VkumdTypeError(f"Tensor.{what}: dim must be an int, not {dim!r}")
        if not -ndim <= dim < ndim:
            raise VkumdValueError(f"Tensor.{what}: dim={dim} is out of range for a "
                                  f"{self.ndim}-d tensor (use {-ndim} to {ndim - 1})")
        return int(dim) % ndim

    # -- views without a graph op (eager only) -------------------------------------------
    def expand(self, *sizes: Any) -> Tensor:
        """A view broadcast to ``sizes`` (stride 0 where a size-1 dimension grows; -1 keeps
        a size), as ``torch.Tensor.expand``: no launch, no copy. Writing into an expanded
        view writes one element many times; copy it first (``.contiguous()``).

        Raises:
            VkumdValueError: a size that does not broadcast.
        """
        if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
            sizes = tuple(sizes[0])
        shape, strides = expanded("Tensor.expand", self.shape, self.element_strides, sizes)
        self._live_allocation("Tensor.expand()")
        return self.as_strided(shape, strides, self.element_offset)

    def broadcast_to(self, shape: Any) -> Tensor:
        """A view broadcast to ``shape``, as ``numpy.broadcast_to`` (see :meth:`expand`)."""
        return self.expand(tuple(shape))

    def expand_as(self, other: Any) -> Tensor:
        """A view broadcast to ``other.shape`` (see :meth:`expand`)."""
        return self.expand(tuple(other.shape))

    def diagonal(self, offset: int = 0, dim1: int = 0, dim2: int = 1) -> Tensor:
        """A view of the diagonal ``offset`` of dimensions ``dim1`` and ``dim2`` (moved last),
        as ``torch.diagonal``: no launch.

        Raises:
            VkumdValueError: dims out of range or equal, or a tensor under 2-D.
        """
        if self.ndim < 2:
            raise VkumdValueError(f"Tensor.diagonal: a {self.ndim}-d tensor has no diagonal; "
                                  "it needs 2 dimensions or more")
        i, j = self._dim("diagonal", dim1), self._dim("diagonal", dim2)
        if i == j:
            raise VkumdValueError(f"Tensor.diagonal: dim1 and dim2 are both dimension {i}; "
                                  "give two different dimensions")
        if isinstance(offset, (bool, np.bool_)) or not isinstance(offset, (int, np.integer)):
            raise VkumdTypeError(f"Tensor.diagonal: offset must be an int, not {offset!r}")
        start = self.element_offset
        rows, cols = self.shape[i], self.shape[j]
        if offset >= 0:
            length = max(0, min(rows, cols - offset))
            start += offset * self.element_strides[j] if length else 0
        else:
            length = max(0, min(rows + offset, cols))
            start += -offset * self.element_strides[i] if length else 0
        kept = [d for d in range(self.ndim) if d not in (i, j)]
        return self.as_strided(
            (*(self.shape[d] for d in kept), length),
            (*(self.element_strides[d] for d in kept),
             self.element_strides[i] + self.element_strides[j]), start)
