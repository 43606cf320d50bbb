"""The eager side of the tensor methods: :class:`EagerMethods`, mixed into
:class:`~vkumd.framework.tensor.Tensor`.

The operators and methods themselves are :class:`~vkumd.framework.graph.methods.TensorMethods`,
shared with the tracer's tensor; here they are bound to :mod:`vkumd.framework.ops` (so each
runs eagerly on the tensor's context, like the ops), and the eager-only parts live: the views
(indexing, ``transpose``/``permute``/``.T``, ``expand``, ``diagonal``) and item assignment.

Decisions a PyTorch user should know:

- ``==`` and ``!=`` keep Python's identity comparison, and tensors stay hashable by identity.
  Python calls ``==`` behind ``x in (a, b)``, ``list.index``, ``list.remove`` and the
  ``__eq__`` of dataclasses and tuples holding tensors, all of which expect a bool; an
  elementwise ``==`` would break them. Elementwise equality is :meth:`eq` and :meth:`ne`.
  ``<``, ``<=``, ``>``, ``>=`` are elementwise.
- Comparisons give 1/0 in the operands' dtype (no bool tensors), which multiply straight
  into arithmetic: ``x * (x > 0)``.
- Views share memory with their base and cost no launch, as in PyTorch: ``transpose``,
  ``permute``, ``.T``, ``expand``/``broadcast_to``/``expand_as``, basic indexing ``t[...]``
  (ints, slices with any nonzero step, ``...``, ``None``), ``narrow``, ``diagonal``,
  ``squeeze``/``unsqueeze``, and ``reshape``/``view``/``flatten`` of contiguous data (of a
  strided view they copy, as ``torch.reshape``). A view has ``stride()``,
  ``storage_offset()``, ``is_contiguous()`` and ``contiguous()``; an op that reads a view
  which is not contiguous from its memory's start copies it first with one strided-copy
  launch (:mod:`vkumd.framework.strided`). Writes through views: ``t[1:3] = x``,
  ``t[:, ::2] = 0.5``, ``view.copy_(x)``, ``view += x``.
- Arithmetic never changes a dtype: ``int_tensor * 2.5`` is refused (cast first), and two
  tensors must share a dtype.
- Reductions, ``softmax`` and ``layer_norm`` work over the last dimension only.
- ``**`` is refused (there is no power op); ``+t`` is ``t`` itself.
- ``t += x``, ``-=``, ``*=``, ``/=`` and ``//=`` update ``t`` in place, as PyTorch does
  (methods of :class:`~vkumd.framework.tensor.Tensor` itself): the op writes its result into
  ``t``'s memory (``ops.add(t, x, out=t)``), ``t`` stays the same object, and every view of
  ``t`` sees the new values. As in PyTorch, an update that would change ``t``'s shape (``x``
  broadcasting ``t`` larger) or dtype (``int_t += 0.5``) is refused, and ``t @= x`` is
  refused (write ``t = t @ x``). In a traced function (``vkumd.compile``) ``t += x`` rebinds
  ``t`` to a new value: a graph never writes into its inputs.
"""

from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.methods import TensorMethods
from vkumd.framework.strided import copy_into, expanded, index_view

if TYPE_CHECKING:
    from vkumd.framework.tensor import Tensor


class _OpsModule:
    """``EagerMethods._ops`` until first read, then :mod:`vkumd.framework.ops` itself.

    The ops import the Tensor class, which is built on this module, so the ops module cannot
    be imported when the class is made; the first method call imports it and puts the module
    in this descriptor's place, where every later call finds it as a plain class attribute.
    """

    def __get__(self, instance: Any, owner: type) -> ModuleType:
        from vkumd.framework import ops

        EagerMethods._ops = ops  # type: ignore[assignment]
        return ops


class EagerMethods(TensorMethods):
    """The shared operators and methods, run eagerly through :mod:`vkumd.framework.ops`,
    and the eager views and item assignment.

    See the module notes for ``==``, views and copies. Each method's errors are those of the
    op it calls.
    """

    __slots__ = ()
    _ops = _OpsModule()  # type: ignore[assignment]
    _value_error = VkumdValueError
    _type_error = VkumdTypeError

    def __getitem__(self, key: Any) -> Tensor:
        """Basic indexing as a view sharing memory, as PyTorch: ``t[i]``, ``t[a:b]``,
        ``t[:, ::2]``, ``t[::-1]`` (negative steps too, as numpy), ``t[..., i]``, ``t[None]``.

        Returns:
            A view (no launch): writes through ``t`` are seen through it and the reverse.

        Raises:
            As :func:`~vkumd.framework.strided.index_view`: fancy indexing, a step of 0,
            indices out of range.
        """
        self._live_allocation("Tensor[...]")
        shape, strides, offset = index_view(self.shape, self.element_strides,
                                            self.element_offset, key)
        return self.as_strided(shape, strides, offset)

    def __setitem__(self, key: Any, value: Any) -> None:
        """``t[key] = value``: write a tensor, array or number (broadcast to the indexed
        shape) into ``t``'s memory through the view ``t[key]`` (one strided-copy launch).

        Raises:
            VkumdValueError: ``value`` does not broadcast to the indexed shape; as
                :meth:`__getitem__` for the key.
        """
        self[key].copy_(value)

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
        if isinstance(value, EagerMethods):  # a vkumd Tensor
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

    # -- views, as PyTorch (the traced tensor records permute nodes for these) -------------
    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A view with ``dim0`` and ``dim1`` swapped (no launch), as PyTorch.

        Raises:
            VkumdTypeError: a dim that is not an int.
            VkumdValueError: a dim out of range.
        """
        i, j = self._dim("transpose", dim0), self._dim("transpose", dim1)
        if self.ndim == 0:
            return self.as_strided((), (), self.element_offset)
        order = list(range(self.ndim))
        order[i], order[j] = order[j], order[i]
        return self._permuted(order)

    def permute(self, *dims: Any) -> Tensor:
        """A view with the dimensions reordered (no launch), as PyTorch.

        Args:
            dims: a permutation of the dimensions: ``permute(1, 0)`` or ``permute((1, 0))``.

        Raises:
            VkumdValueError: not a permutation.
        """
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        order = [self._dim("permute", d) for d in dims]
        if sorted(order) != list(range(self.ndim)):
            raise VkumdValueError(f"Tensor.permute: {tuple(dims)} is not a permutation of the "
                                  f"{self.ndim} dimensions of a tensor of shape {self.shape}")
        return self._permuted(order)

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's and PyTorch's name
        """A view with every dimension reversed (numpy's ``.T``), no launch."""
        return self._permuted(list(range(self.ndim - 1, -1, -1)))

    def _permuted(self, order: list[int]) -> Tensor:
        return self.as_strided(tuple(self.shape[d] for d in order),
                               tuple(self.element_strides[d] for d in order),
                               self.element_offset)

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
