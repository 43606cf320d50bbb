"""The one method set of tensors: operators and methods shared by the eager
:class:`~vkumd.Tensor` and the tracer's :class:`~vkumd.framework.graph.proxy.TracedTensor`.

Every method is written once, here, as a call of a ``vkumd.ops`` function through the
class's ``_ops`` namespace: ``x + y`` is ``self._ops.add(self, y)``. The two classes differ
only in that namespace (and in the few methods listed below):

- ``Tensor._ops`` is :mod:`vkumd.framework.ops` itself, so an eager method runs the op at
  once, with no frame between the operator and the op's function (``a + b`` costs what
  ``vkumd.ops.add(a, b)`` costs, plus one attribute lookup).
- ``TracedTensor._ops`` records: ``_ops.add(x, y)`` is
  :func:`~vkumd.framework.graph.trace.record_op` ``("add", (x, y), {})``, which maps
  ``vkumd.ops``' signatures onto graph nodes (the views ``flatten``/``squeeze``/``unsqueeze``
  become ``reshape`` nodes there).

A namespace rather than a ``_op(name, ...)`` hook method keeps the eager hot path at one
frame; this package stays device-free because it never imports ``vkumd.framework.ops``.

Decisions:

- Both spellings are taken where PyTorch and numpy differ: ``sum(dim=-1, keepdim=False)``
  and ``sum(axis=-1, keepdims=False)``; ``softmax(dim)``/``softmax(axis)``;
  ``gelu(approximate="tanh")`` and ``gelu_tanh()``.
- Every one-input elementwise op of the registry without attributes (``relu``, ``silu``,
  ``exp``, ``sqrt``, ``tanh``, ``erf``, ``sigmoid``, ``hardswish``, ...) is a method of both
  classes, made from its record when the op families are declared (:func:`install_op_methods`),
  so a new op is a method without a line here.
- ``clamp``/``clip`` take numbers (torch's tensor bounds are not taken); the one-input ops
  with parameters (``leaky_relu``, ``elu``, ...) are ``vkumd.ops`` functions only.
- ``x.T`` of a 2-D tensor is ``transpose(0, 1)`` (which a compiled graph folds into a
  following matmul), of any other rank ``permute`` of the reversed dimensions. On eager
  tensors ``transpose``/``permute``/``.T`` are views (:class:`~vkumd.framework.
  tensor_methods.EagerMethods` overrides them); traced, they record permute nodes.
- Reductions, ``softmax`` and the norms work over the last dimension only; another ``dim``
  is refused with a message that says to permute it last.
- ``**`` is refused: there is no power op (write ``x * x``).
- Not shared, by design: ``==``/``!=`` (identity on eager tensors, so containers and ``in``
  work; a recorded ``eq``/``ne`` node on traced ones, whose values only exist later; both
  classes have :meth:`~TensorMethods.eq` and :meth:`~TensorMethods.ne`), indexing ``t[...]``
  (eager indexing makes views sharing memory, with any nonzero step; the tracer records
  slice nodes, with positive steps and symbolic dimensions), item assignment (eager only),
  and everything that reads data on the host (``numpy()``, ``item()``, ``bool()``,
  ``len()``, ...).

Errors: each class names the exception types its argument checks raise (``_value_error``,
``_type_error``): ``VkumdValueError``/``VkumdTypeError`` for eager tensors, ``TraceError``
for traced ones; a symbolic dimension where an int is needed is a ``SymbolicDimError`` in
both. Every other error is the op's.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.registry import OPS, OpDef
from vkumd.framework.graph.trace_errors import SymbolicDimError, at_site

# The default dim of the row-wise methods; compared by identity to tell "not given" apart.
_LAST = -1


def _is_index(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _shape_args(shape: tuple[Any, ...]) -> Any:
    """``reshape(2, 3)`` and ``reshape((2, 3))`` both mean the shape ``(2, 3)``."""
    if len(shape) == 1 and not _is_index(shape[0]) and not isinstance(shape[0], Dim):
        return shape[0]
    return shape


def is_unary_method(op: OpDef) -> bool:
    """Whether registry op ``op`` is a method of every tensor: one input, no attributes, and
    a step of generated elementwise kernels of its own (``scale`` and ``cast`` need an
    argument and are methods of their own)."""
    return (op.inputs == ("x",) and not op.attrs and op.elementwise is not None
            and op.elementwise.rewrite is None)


def unary_methods() -> list[str]:
    """The registry ops every tensor has as a method (see :func:`is_unary_method`), sorted."""
    return sorted(name for name, op in OPS.items() if is_unary_method(op))


def _unary_method(name: str) -> Any:
    def method(self: Any) -> Any:
        return getattr(self._ops, name)(self)

    eager = OPS[name].eager
    summary = (eager.__doc__ or "").strip().split("\n")[0] if eager is not None else ""
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"{summary or name} (``vkumd.ops.{name}``)."
    return method


def install_op_methods() -> list[str]:
    """Make every one-input registry op (:func:`is_unary_method`) a method of
    :class:`TensorMethods` that has none yet; ``vkumd.framework.ops`` calls this once the op
    families are declared.

    Real methods, not a ``__getattr__`` fallback: a class with ``__getattr__`` pays a slower
    path on every attribute read of its instances (about 15 ns each, 0.2 us per eager op).

    Returns:
        The names of the methods added.
    """
    added = [name for name in unary_methods() if not hasattr(TensorMethods, name)]
    for name in added:
        setattr(TensorMethods, name, _unary_method(name))
    return added


def no_attribute(obj: Any, name: str) -> AttributeError:
    """The error for a name a tensor lacks, listing what a tensor offers."""
    if name.startswith("_"):
        return AttributeError(name)
    return AttributeError(
        f"{type(obj).__name__} has no attribute {name!r}{at_site()}; a tensor "
        "offers + - * / // @ and comparisons, reshape/view/flatten/(un)squeeze, "
        "transpose/permute/.T, slicing, split, astype/to, copy/clone, "
        "sum/mean/max/softmax/gelu/layer_norm/rms_norm, the one-input ops "
        f"{'/'.join(unary_methods())}; every other op is a function of vkumd.ops")


class TensorMethods:
    """The operators and methods of every vkumd tensor, eager or traced.

    A subclass provides ``shape``, ``ndim``, ``_ops`` (the namespace of ``vkumd.ops``
    functions the methods call), ``_value_error`` and ``_type_error`` (the exception types of
    the argument checks here) and ``__getitem__``. See the module notes for what is shared
    and what is not.
    """

    __slots__ = ()
    _ops: Any
    _value_error: type[Exception]
    _type_error: type[Exception]
    shape: tuple[Any, ...]
    ndim: int

    # -- arithmetic (numpy broadcasting; a real number on either side) ------------------
    def __add__(self, other: Any) -> Any:
        return self._ops.add(self, other)

    def __radd__(self, other: Any) -> Any:
        return self._ops.add(other, self)

    def __sub__(self, other: Any) -> Any:
        return self._ops.sub(self, other)

    def __rsub__(self, other: Any) -> Any:
        return self._ops.sub(other, self)

    def __mul__(self, other: Any) -> Any:
        return self._ops.mul(self, other)

    def __rmul__(self, other: Any) -> Any:
        return self._ops.mul(other, self)

    def __truediv__(self, other: Any) -> Any:
        return self._ops.div(self, other)

    def __rtruediv__(self, other: Any) -> Any:
        return self._ops.div(other, self)

    def __floordiv__(self, other: Any) -> Any:
        return self._ops.div(self, other, rounding="floor")

    def __rfloordiv__(self, other: Any) -> Any:
        return self._ops.div(other, self, rounding="floor")

    def __matmul__(self, other: Any) -> Any:
        return self._ops.matmul(self, other)

    def __rmatmul__(self, other: Any) -> Any:
        return self._ops.matmul(other, self)

    def __neg__(self) -> Any:
        return self._ops.scale(self, -1.0)

    def __pos__(self) -> Any:
        return self

    def __pow__(self, other: Any) -> Any:
        raise self._type_error(f"{self!r} ** {other!r}{at_site()}: vkumd has no power op; "
                               "write x * x, or use an op of vkumd.ops (sqrt, exp)")

    # -- comparisons: 1/0 (eager: in the operands' dtype; graph: bool) -------------------
    def __lt__(self, other: Any) -> Any:
        return self._ops.lt(self, other)

    def __le__(self, other: Any) -> Any:
        return self._ops.le(self, other)

    def __gt__(self, other: Any) -> Any:
        return self._ops.gt(self, other)

    def __ge__(self, other: Any) -> Any:
        return self._ops.ge(self, other)

    def eq(self, other: Any) -> Any:
        """Elementwise ``self == other`` as 1/0 (see the module notes on ``==``)."""
        return self._ops.eq(self, other)

    def ne(self, other: Any) -> Any:
        """Elementwise ``self != other`` as 1/0."""
        return self._ops.ne(self, other)

    # -- shapes: views (reshape moves no bytes) -----------------------------------------
    def reshape(self, *shape: Any) -> Any:
        """This tensor with another shape of as many elements (a view: no copy).

        Args:
            shape: ints (symbolic dimensions while tracing), or one sequence of them
                (``reshape(2, 3)`` is ``reshape((2, 3))``); one entry may be -1.

        Returns:
            The reshaped tensor.

        Raises:
            VkumdValueError: the element counts differ, or -1 cannot be inferred.
            VkumdTypeError: entries that are not ints.
        """
        return self._ops.reshape(self, _shape_args(shape))

    def view(self, *shape: Any) -> Any:
        """The same as :meth:`reshape`."""
        return self._ops.reshape(self, _shape_args(shape))

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> Any:
        """A view with dimensions ``start_dim`` to ``end_dim`` (inclusive) merged.

        Raises:
            VkumdValueError: a dim out of range, or ``start_dim`` after ``end_dim``.
        """
        return self._ops.flatten(self, start_dim, end_dim)

    def squeeze(self, dim: int | None = None) -> Any:
        """A view without size-1 dimensions (all of them, or ``dim``), as
        :func:`vkumd.ops.squeeze`."""
        return self._ops.squeeze(self, dim)

    def unsqueeze(self, dim: int) -> Any:
        """A view with a size-1 dimension inserted at ``dim`` (-1: the end)."""
        return self._ops.unsqueeze(self, dim)

    # -- views of eager tensors (PyTorch's); permute and slice nodes while tracing -------
    def transpose(self, dim0: int, dim1: int) -> Any:
        """``dim0`` and ``dim1`` swapped: a view of an eager tensor, a node while tracing.

        Raises:
            SymbolicDimError: a symbolic dimension as a dim.
            VkumdValueError: a dim out of range, or a 0-d tensor.
        """
        return self._ops.transpose(self, self._int_arg(dim0, "dim0", "transpose"),
                                   self._int_arg(dim1, "dim1", "transpose"))

    def permute(self, *dims: Any) -> Any:
        """Dimensions reordered: a view of an eager tensor, a node while tracing.

        Args:
            dims: a permutation of the dimensions: ``permute(1, 0)`` or ``permute((1, 0))``.

        Raises:
            VkumdValueError: not a permutation.
        """
        dims = _shape_args(dims)
        if isinstance(dims, (tuple, list)):
            dims = [self._int_arg(d, "dims", "permute") for d in dims]
        return self._ops.permute(self, dims)

    @property
    def T(self) -> Any:  # noqa: N802 - numpy's and PyTorch's name
        """Every dimension reversed (numpy's ``.T``; 2-D: ``transpose(0, 1)``): a view of an
        eager tensor, a node while tracing."""
        if self.ndim == 2:
            return self._ops.transpose(self, 0, 1)
        return self._ops.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    def narrow(self, dim: int, start: int, length: int) -> Any:
        """``length`` entries of ``dim`` from ``start``, as ``torch.narrow``: a view of an
        eager tensor, a slice node while tracing.

        Raises:
            VkumdValueError: ``dim`` out of range, or the window outside the dimension.
        """
        d = self._int_arg(dim, "dim", "narrow")
        first, count = self._int_arg(start, "start", "narrow"), self._int_arg(length, "length",
                                                                              "narrow")
        if not -self.ndim <= d < self.ndim:
            raise self._value_error(f"{type(self).__name__}.narrow: dim={dim} is out of range "
                                    f"for a {self.ndim}-d tensor{at_site()}")
        n = self.shape[d]
        first += n if first < 0 and not isinstance(n, Dim) else 0
        if not isinstance(n, Dim) and (first < 0 or count < 0 or first + count > n):
            raise self._value_error(f"{type(self).__name__}.narrow: start={start}, length="
                                    f"{length} is outside dimension {d} of size {n}{at_site()}")
        return self[(slice(None),) * (d % self.ndim) + (slice(first, first + count),)]

    def astype(self, dtype: Any) -> Any:
        """A copy converted to ``dtype``, as :func:`vkumd.ops.cast`.

        Args:
            dtype: float32, float16, bfloat16 or int32 (a name, numpy dtype or vkumd DType).

        Raises:
            VkumdTypeError: another dtype.
        """
        return self._ops.cast(self, dtype)

    def to(self, dtype: Any) -> Any:
        """The same as :meth:`astype` (vkumd tensors do not move between devices)."""
        return self._ops.cast(self, dtype)

    def copy(self) -> Any:
        """A copy in new memory (in a graph, the tensor itself: values are never shared)."""
        return self._ops.copy(self)

    def clone(self) -> Any:
        """The same as :meth:`copy` (PyTorch's name)."""
        return self._ops.copy(self)

    def split(self, sizes_or_sections: Any, dim: int = 0) -> Any:
        """Pieces along ``dim``, each a copy, as :func:`vkumd.ops.split`.

        Args:
            sizes_or_sections: an int is each piece's size (the last may be shorter), as
                ``torch.split``; a list gives every size and must add up to the dimension.
            dim: the dimension cut.

        Returns:
            The pieces, in order (a list; a tuple while tracing).

        Raises:
            VkumdValueError: sizes that do not add up, a size below 1, a 0-d tensor.
        """
        return self._ops.split(self, sizes_or_sections, dim)

    def __iter__(self) -> Iterator[Any]:
        # Rows, each a view of an eager tensor (``len`` refuses 0-d tensors and symbolic
        # first dimensions).
        for i in range(len(self)):  # type: ignore[arg-type]
            yield self[i]  # type: ignore[index]

    # -- reductions (any axes) and row-wise ops (the last dimension) --------------------
    def sum(self, dim: Any = _LAST, keepdim: bool = False, *, axis: Any = None,
            keepdims: bool | None = None) -> Any:
        """The sum over ``dim``, as :func:`vkumd.ops.sum`.

        Args:
            dim: an axis, a tuple of axes or None (every axis); default the last.
            keepdim: keep the reduced axes, as 1.
            axis: numpy's name of ``dim``.
            keepdims: numpy's name of ``keepdim``.

        Raises:
            VkumdTypeError: dim and axis (or keepdim and keepdims) both given; errors of
                :func:`vkumd.ops.sum` (a non-float tensor, a dim that is not an int).
            VkumdValueError: an axis out of range or named twice.
        """
        dim, _, keep = self._spelled("sum", dim, keepdim, axis, keepdims)
        return self._ops.sum(self, dim=dim, keepdims=keep)

    def mean(self, dim: Any = _LAST, keepdim: bool = False, *, axis: Any = None,
             keepdims: bool | None = None) -> Any:
        """The mean over ``dim``; arguments and errors as :meth:`sum`."""
        dim, _, keep = self._spelled("mean", dim, keepdim, axis, keepdims)
        return self._ops.mean(self, dim=dim, keepdims=keep)

    def max(self, dim: Any = _LAST, keepdim: bool = False, *, axis: Any = None,
            keepdims: bool | None = None) -> Any:
        """The maximum over ``dim`` (values only, unlike PyTorch's ``(values, indices)``);
        arguments and errors as :meth:`sum`."""
        dim, _, keep = self._spelled("max", dim, keepdim, axis, keepdims)
        return self._ops.max(self, dim=dim, keepdims=keep)

    def _spelled(self, op: str, dim: Any, keepdim: Any, axis: Any, keepdims: Any
                 ) -> tuple[Any, str, Any]:
        """``(dim, the word the caller used, keepdim)`` from PyTorch's or numpy's spelling."""
        word = "dim"
        if axis is not None:
            if dim is not _LAST:  # given twice (an explicit -1 is the same object: harmless)
                raise self._type_error(f"{type(self).__name__}.{op}: dim and axis both given"
                                       f"{at_site()}; give one")
            dim, word = axis, "axis"
        if keepdims is not None:
            if keepdim is not False:
                raise self._type_error(f"{type(self).__name__}.{op}: keepdim and keepdims "
                                       f"both given{at_site()}; give one")
            keepdim = keepdims
        return dim, word, keepdim

    def softmax(self, dim: int = _LAST, *, axis: int | None = None, scale: float | None = None,
                mask: Any = None) -> Any:
        """``softmax(x * scale + mask)`` over ``dim`` (default the last), as ``ops.softmax``.

        Args:
            dim: the axis (``axis`` is numpy's name for it).
            scale: multiplies x first (default 1).
            mask: added after the scale; x's dtype, broadcastable to x; last axis only.

        Raises:
            VkumdTypeError: dim and axis both given, or a dim that is not an int.
            VkumdValueError: a ``dim`` out of range, or a mask with another axis.
        """
        dim, word, _ = self._spelled("softmax", dim, False, axis, None)
        along = self._int_arg(dim, word, "softmax")
        return self._ops.softmax(self, scale=scale, mask=mask, axis=along)

    def clamp(self, min: float | None = None, max: float | None = None) -> Any:
        """Clip to ``[min, max]`` (None: that side open), as ``torch.clamp`` with numbers and
        :func:`vkumd.ops.clip`."""
        return self._ops.clip(self, min=-np.inf if min is None else min,
                              max=np.inf if max is None else max)

    clip = clamp

    def gelu(self, approximate: str = "none") -> Any:
        """GELU: ``approximate="none"`` (erf) or ``"tanh"`` (:meth:`gelu_tanh`), as
        ``torch.nn.functional.gelu``."""
        if approximate == "none":
            return self._ops.gelu(self)
        if approximate == "tanh":
            return self._ops.gelu_tanh(self)
        raise self._value_error(f"{type(self).__name__}.gelu: approximate={approximate!r}"
                                f"{at_site()}; use 'none' (erf) or 'tanh'")

    def layer_norm(self, weight: Any = None, bias: Any = None, eps: float = 1e-5) -> Any:
        """Layer normalisation over the last dimension, as :func:`vkumd.ops.layer_norm`."""
        return self._ops.layer_norm(self, weight, bias, eps=eps)

    def rms_norm(self, weight: Any = None, eps: float = 1e-6) -> Any:
        """RMS normalisation over the last dimension, as :func:`vkumd.ops.rms_norm`."""
        return self._ops.rms_norm(self, weight, eps=eps)

    # -- argument checks ---------------------------------------------------------------
    def _int_arg(self, value: Any, what: str, call: str) -> int:
        """``value`` as an int argument (a dim) of method ``call``."""
        if isinstance(value, Dim):
            raise SymbolicDimError(f"{type(self).__name__}.{call}: {what} is the symbolic "
                                   f"dimension {value}{at_site()}; it needs an int")
        if not _is_index(value):
            raise self._type_error(f"{type(self).__name__}.{call}: {what} must be an int, not "
                                   f"{type(value).__name__} {value!r}{at_site()}")
        return int(value)
