"""The operators and methods of :class:`~vkumd.framework.tensor.Tensor`, as PyTorch users expect.

Every method is a thin call into :mod:`vkumd.framework.ops`, looked up there at call time,
so whatever wraps those functions (a tracer building a graph) sees every method too. All of
them run eagerly on the tensor's context, like the ops.

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
"""

from __future__ import annotations

from collections.abc import Iterator
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from vkumd.errors import VkumdIndexError, VkumdTypeError, VkumdValueError

if TYPE_CHECKING:
    from vkumd.framework.tensor import Tensor


def _ops() -> ModuleType:
    # Imported when first called: the ops import the Tensor class, which is built on this
    # module, and a tracer may swap functions in that namespace.
    from vkumd.framework import ops

    return ops


def _is_index(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _last_dim(op: str, t: Tensor, dim: Any) -> None:
    """Refuse any ``dim`` but the last: the row kernels reduce over the last dimension."""
    if not _is_index(dim):
        raise VkumdTypeError(f"Tensor.{op}: dim must be an int, not {dim!r}")
    last = max(t.ndim - 1, 0)
    if dim not in (-1, last):
        raise VkumdValueError(f"Tensor.{op}: dim={dim}, but vkumd's {op} works over the last "
                              f"dimension only (dim=-1 or dim={last}); move the dimension "
                              "last with permute() first")


def _shape_args(shape: tuple[Any, ...]) -> Any:
    """``reshape(2, 3)`` and ``reshape((2, 3))`` both mean the shape ``(2, 3)``."""
    if len(shape) == 1 and not _is_index(shape[0]):
        return shape[0]
    return shape


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


class TensorMethods:
    """Operators and PyTorch-style methods; mixed into :class:`~vkumd.framework.tensor.Tensor`.

    See the module notes for ``==``, views and copies. Each method's errors are those of the
    op it calls.
    """

    __slots__ = ()
    shape: tuple[int, ...]  # set by Tensor

    # -- arithmetic (numpy broadcasting; a real number on either side) ------------------
    def __add__(self, other: Any) -> Tensor:
        return _ops().add(self, other)

    def __radd__(self, other: Any) -> Tensor:
        return _ops().add(other, self)

    def __sub__(self, other: Any) -> Tensor:
        return _ops().sub(self, other)

    def __rsub__(self, other: Any) -> Tensor:
        return _ops().sub(other, self)

    def __mul__(self, other: Any) -> Tensor:
        return _ops().mul(self, other)

    def __rmul__(self, other: Any) -> Tensor:
        return _ops().mul(other, self)

    def __truediv__(self, other: Any) -> Tensor:
        return _ops().div(self, other)

    def __rtruediv__(self, other: Any) -> Tensor:
        return _ops().div(other, self)

    def __floordiv__(self, other: Any) -> Tensor:
        return _ops().div(self, other, rounding="floor")

    def __rfloordiv__(self, other: Any) -> Tensor:
        return _ops().div(other, self, rounding="floor")

    def __neg__(self) -> Tensor:
        return _ops().scale(self, -1)

    def __matmul__(self, other: Any) -> Tensor:
        return _ops().matmul(self, other)

    # -- comparisons: 1/0 in the operands' dtype ----------------------------------------
    def __lt__(self, other: Any) -> Tensor:
        return _ops().lt(self, other)

    def __le__(self, other: Any) -> Tensor:
        return _ops().le(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return _ops().gt(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return _ops().ge(self, other)

    def eq(self, other: Any) -> Tensor:
        """Elementwise ``self == other`` as 1/0 (``==`` itself is identity; see the module)."""
        return _ops().eq(self, other)

    def ne(self, other: Any) -> Tensor:
        """Elementwise ``self != other`` as 1/0 (``!=`` itself is identity)."""
        return _ops().ne(self, other)

    # -- shapes: views over the same memory ---------------------------------------------
    def reshape(self, *shape: Any) -> Tensor:
        """A view with another shape of as many elements (never a copy: every vkumd tensor
        is contiguous), as :func:`vkumd.ops.reshape`.

        Args:
            shape: ints, or one sequence of them (``reshape(2, 3)`` is ``reshape((2, 3))``);
                one entry may be -1.

        Returns:
            A tensor over this tensor's memory.

        Raises:
            VkumdValueError: the element counts differ, or -1 cannot be inferred.
            VkumdTypeError: entries that are not ints.
        """
        return _ops().reshape(self, _shape_args(shape))

    def view(self, *shape: Any) -> Tensor:
        """The same as :meth:`reshape` (always a view)."""
        return _ops().reshape(self, _shape_args(shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Tensor:
        """A view with dimensions ``start_dim`` to ``end_dim`` (inclusive) merged.

        Raises:
            VkumdValueError: a dim out of range, or ``start_dim`` after ``end_dim``.
        """
        return _ops().flatten(self, start_dim, end_dim)

    def squeeze(self, dim: int | None = None) -> Tensor:
        """A view without size-1 dimensions (all, or ``dim`` if it is 1)."""
        return _ops().squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Tensor:
        """A view with a size-1 dimension inserted at ``dim``."""
        return _ops().unsqueeze(self, dim)

    # -- copies -------------------------------------------------------------------------
    def transpose(self, dim0: int, dim1: int) -> Tensor:
        """A contiguous copy with ``dim0`` and ``dim1`` swapped (PyTorch gives a view).

        Raises:
            VkumdValueError: a dim out of range, or a 0-d tensor.
        """
        return _ops().transpose(self, dim0, dim1)

    def permute(self, *dims: Any) -> Tensor:
        """A contiguous copy with dimensions reordered (PyTorch gives a view).

        Args:
            dims: a permutation of the dimensions: ``permute(1, 0)`` or ``permute((1, 0))``.

        Raises:
            VkumdValueError: not a permutation.
        """
        return _ops().permute(self, _shape_args(dims))

    @property
    def T(self) -> Tensor:  # noqa: N802 - numpy's and PyTorch's name
        """A contiguous copy with every dimension reversed (numpy's ``.T``)."""
        return _ops().permute(self, tuple(range(len(self.shape) - 1, -1, -1)))

    def astype(self, dtype: Any) -> Tensor:
        """A copy converted to ``dtype``, as :func:`vkumd.ops.cast`.

        Args:
            dtype: float32, float16, bfloat16 or int32 (a name, numpy dtype or vkumd DType).

        Raises:
            VkumdTypeError: another dtype.
        """
        return _ops().cast(self, dtype)

    def to(self, dtype: Any) -> Tensor:
        """A copy converted to ``dtype`` (vkumd tensors do not move between devices)."""
        return _ops().cast(self, dtype)

    def copy(self) -> Tensor:
        """A copy in new memory."""
        return _ops().copy(self)

    def clone(self) -> Tensor:
        """A copy in new memory (PyTorch's name)."""
        return _ops().copy(self)

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
        ops = _ops()
        window = ops.slice(self, starts, stops, tuple(range(len(starts))))
        return window if window.shape == shape else ops.reshape(window, shape)

    def __setitem__(self, key: Any, value: Any) -> None:
        raise VkumdTypeError("Tensor[...] = value is not supported: slices are copies. Build "
                             "the tensor from pieces with vkumd.ops.concat, or write the whole "
                             "tensor with t.write(array)")

    def __iter__(self) -> Iterator[Tensor]:
        # Defined so iteration stops at the end (a copy of each row) and refuses 0-d tensors.
        if not self.shape:
            raise VkumdTypeError("iteration over a 0-d tensor")
        for i in range(self.shape[0]):
            yield self[i]

    def split(self, sizes_or_sections: Any, dim: int = 0) -> list[Tensor]:
        """Pieces along ``dim``, each a copy, as :func:`vkumd.ops.split`.

        Args:
            sizes_or_sections: an int is each piece's size (the last may be shorter), as
                ``torch.split``; a list gives every size and must add up to the dimension.
            dim: the dimension cut.

        Returns:
            The pieces, in order.

        Raises:
            VkumdValueError: sizes that do not add up, a size below 1, a 0-d tensor.
        """
        return _ops().split(self, sizes_or_sections, dim)

    # -- reductions and activations (the last dimension) --------------------------------
    def sum(self, dim: int = -1, keepdim: bool = False) -> Tensor:
        """The sum over the last dimension, as :func:`vkumd.ops.sum`.

        Args:
            dim: -1 or ``ndim - 1``: the row kernels reduce the last dimension only.
            keepdim: keep it, as 1.

        Raises:
            VkumdValueError: another ``dim`` (permute that dimension last first).
            VkumdTypeError: a non-float tensor.
        """
        _last_dim("sum", self, dim)
        return _ops().sum(self, keepdims=keepdim)

    def mean(self, dim: int = -1, keepdim: bool = False) -> Tensor:
        """The mean over the last dimension; arguments and errors as :meth:`sum`."""
        _last_dim("mean", self, dim)
        return _ops().mean(self, keepdims=keepdim)

    def max(self, dim: int = -1, keepdim: bool = False) -> Tensor:
        """The maximum over the last dimension (values only, unlike PyTorch's
        ``(values, indices)``); arguments and errors as :meth:`sum`."""
        _last_dim("max", self, dim)
        return _ops().max(self, keepdims=keepdim)

    def softmax(self, dim: int = -1) -> Tensor:
        """Softmax over the last dimension, as :func:`vkumd.ops.softmax`.

        Raises:
            VkumdValueError: a ``dim`` other than the last.
        """
        _last_dim("softmax", self, dim)
        return _ops().softmax(self)

    def relu(self) -> Tensor:
        """``max(x, 0)``."""
        return _ops().relu(self)

    def gelu(self, approximate: str = "none") -> Tensor:
        """GELU: ``approximate="none"`` (erf) or ``"tanh"``, as ``torch.nn.functional.gelu``."""
        if approximate not in ("none", "tanh"):
            raise VkumdValueError(f"Tensor.gelu: approximate={approximate!r}; use 'none' "
                                  "(erf) or 'tanh'")
        return _ops().gelu(self) if approximate == "none" else _ops().gelu_tanh(self)

    def silu(self) -> Tensor:
        """``x * sigmoid(x)``."""
        return _ops().silu(self)

    def layer_norm(self, weight: Tensor | None = None, bias: Tensor | None = None,
                   eps: float = 1e-5) -> Tensor:
        """Layer normalisation over the last dimension, as :func:`vkumd.ops.layer_norm`."""
        return _ops().layer_norm(self, weight, bias, eps=eps)

    def rms_norm(self, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
        """RMS normalisation over the last dimension, as :func:`vkumd.ops.rms_norm`."""
        return _ops().rms_norm(self, weight, eps=eps)
