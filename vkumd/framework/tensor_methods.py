"""The eager side of the tensor methods: :class:`EagerMethods`, mixed into
:class:`~vkumd.framework.tensor.Tensor`.

The operators and methods themselves are :class:`~vkumd.framework.graph.methods.TensorMethods`,
shared with the tracer's tensor; here they are bound to :mod:`vkumd.framework.ops` (so each
runs eagerly on the tensor's context, like the ops), and the eager-only parts live: basic
indexing (:func:`parse_index`) and the refusal of item assignment.

Decisions a PyTorch user should know:

- ``==`` and ``!=`` keep Python's identity comparison, and tensors stay hashable by identity.
  Python calls ``==`` behind ``x in (a, b)``, ``list.index``, ``list.remove`` and the
  ``__eq__`` of dataclasses and tuples holding tensors, all of which expect a bool; an
  elementwise ``==`` would break them. Elementwise equality is :meth:`eq` and :meth:`ne`.
  ``<``, ``<=``, ``>``, ``>=`` are elementwise.
- Comparisons give 1/0 in the operands' dtype (no bool tensors), which multiply straight
  into arithmetic: ``x * (x > 0)``.
- ``reshape``/``view``/``flatten``/``squeeze``/``unsqueeze`` are views sharing memory; every
  vkumd tensor is contiguous, so ``transpose``/``permute``/``.T`` and every slice ``t[…]``
  are copies (PyTorch makes views of those).
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

from vkumd.errors import VkumdIndexError, VkumdTypeError, VkumdValueError
from vkumd.framework.graph.methods import TensorMethods

if TYPE_CHECKING:
    from vkumd.framework.tensor import Tensor


def _is_index(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def parse_index(shape: tuple[int, ...], key: Any
                ) -> tuple[list[int], list[int], tuple[int, ...]]:
    """Basic indexing of a ``shape`` tensor: ints, step-1 slices, one ``...`` and ``None``.

    Args:
        shape: the indexed tensor's shape.
        key: what ``t[key]`` received.

    Returns:
        ``(starts, stops, result_shape)``: the window to copy along every dimension, and the
        shape after dropping the int-indexed dimensions and inserting ``None``'s.

    Raises:
        VkumdTypeError: fancy indexing (lists, arrays, tensors, bools) or non-int bounds.
        VkumdValueError: a step other than 1, or two ellipses.
        VkumdIndexError: an int out of range, or more indices than dimensions.
    """
    items = key if isinstance(key, tuple) else (key,)
    for k in items:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or _is_index(k)):
            raise VkumdTypeError(f"Tensor[...]: index {k!r} is not supported; vkumd takes "
                                 "ints, slices with step 1, ... and None (no fancy or boolean "
                                 "indexing: index on the host with t.numpy()[...])")
    if sum(k is Ellipsis for k in items) > 1:
        raise VkumdValueError("Tensor[...]: an index may hold one ... only")
    used = sum(k is not None and k is not Ellipsis for k in items)
    if used > len(shape):
        raise VkumdIndexError(f"Tensor[...]: {used} indices for a {len(shape)}-d tensor of "
                              f"shape {shape}")
    fill = [slice(None)] * (len(shape) - used)
    at = next((i for i, k in enumerate(items) if k is Ellipsis), None)
    if at is not None:
        items = (*items[:at], *fill, *items[at + 1:])
    else:
        items = (*items, *fill)
    starts: list[int] = []
    stops: list[int] = []
    result: list[int] = []
    d = 0
    for k in items:
        if k is None:
            result.append(1)
            continue
        n = shape[d]
        if isinstance(k, slice):
            if k.step is not None and k.step != 1:
                raise VkumdValueError(f"Tensor[...]: slice step {k.step!r}; vkumd slices take "
                                      "step 1 only (take other steps on the host with "
                                      "t.numpy()[...])")
            try:
                lo, hi, _ = k.indices(n)
            except TypeError:
                raise VkumdTypeError(f"Tensor[...]: slice bounds must be ints or None, not "
                                     f"{k!r}") from None
            hi = max(lo, hi)
            result.append(hi - lo)
        else:
            lo = int(k) + n if k < 0 else int(k)
            if not 0 <= lo < n:
                raise VkumdIndexError(f"Tensor[...]: index {k} is out of range for dimension "
                                      f"{d} of size {n} (shape {shape})")
            hi = lo + 1
        starts.append(lo)
        stops.append(hi)
        d += 1
    return starts, stops, tuple(result)


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
    and eager basic indexing.

    See the module notes for ``==``, views and copies. Each method's errors are those of the
    op it calls.
    """

    __slots__ = ()
    _ops = _OpsModule()  # type: ignore[assignment]
    _value_error = VkumdValueError
    _type_error = VkumdTypeError

    def __getitem__(self, key: Any) -> Tensor:
        """Basic indexing, copied into a new tensor: ``t[i]``, ``t[a:b]``, ``t[:, a:b]``,
        ``t[..., i]``, ``t[None]`` (a slice is :func:`vkumd.ops.slice`, then the dropped
        dimensions are a view).

        Returns:
            A new contiguous tensor (slices never alias ``t``).

        Raises:
            As :func:`parse_index`: fancy indexing, steps other than 1, indices out of range.
        """
        starts, stops, shape = parse_index(self.shape, key)
        ops = self._ops
        window = ops.slice(self, starts, stops, tuple(range(len(starts))))
        return window if window.shape == shape else ops.reshape(window, shape)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise VkumdTypeError("Tensor[...] = value is not supported: slices are copies. Build "
                             "the tensor from pieces with vkumd.ops.concat, or write the whole "
                             "tensor with t.write(array)")
