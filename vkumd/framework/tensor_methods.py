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
- Comparisons give 1/0 in the operands' dtype (a traced graph's give bool), which multiply
  straight into arithmetic: ``x * (x > 0)``; ``ops.gt(x, 0, out=bool_tensor)`` gives bool.
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

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.methods import TensorMethods
from vkumd.framework.strided import index_view

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

    # Host steps, eager only (a traced value has no data to size them by): each reads the
    # tensor back to the host, a synchronisation and a transfer (vkumd.framework.opset.
    # host_steps).
    def nonzero(self, *, as_tuple: bool = False) -> Any:
        """The indices of the nonzero entries (``vkumd.ops.nonzero``, a host step)."""
        return self._ops.nonzero(self, as_tuple=as_tuple)

    def unique(self, sorted: bool = True, return_inverse: bool = False,
               return_counts: bool = False, dim: int | None = None) -> Any:
        """The distinct values (``vkumd.ops.unique``, a host step)."""
        return self._ops.unique(self, sorted=sorted, return_inverse=return_inverse,
                                return_counts=return_counts, dim=dim)

    def masked_select(self, mask: Any) -> Any:
        """The entries where ``mask`` is nonzero, 1-D (``vkumd.ops.masked_select``, a host
        step)."""
        return self._ops.masked_select(self, mask)
