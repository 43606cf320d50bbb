"""TracedTensor: the stand-in a traced function sees in place of a vkumd Tensor.

:func:`vkumd.compile` calls the user's function once with :class:`TracedTensor` arguments.
Every operator, method and ``vkumd.ops`` call on them appends an IR node (through the
tracer, :class:`~vkumd.framework.graph.trace.Tracer`) instead of running a kernel, so the
function's Python runs once and what it did with tensors becomes a graph. Anything that
needs a tensor's *data* on the host (``float(t)``, ``if t > 0:``, ``t.numpy()``) cannot be
recorded and raises :class:`DataDependentError`, naming the user's line.

Symbolic dimensions appear in ``.shape`` as
:class:`~vkumd.framework.graph.trace_dims.SymbolicDim`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.trace_dims import SymbolicDim, plain_dim
from vkumd.framework.graph.trace_errors import (
    DataDependentError,
    SymbolicDimError,
    TraceError,
    at_site,
)

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Value
    from vkumd.framework.graph.trace import Tracer


def _int_arg(value: Any, what: str, call: str) -> int:
    """``value`` as an int argument of ``call`` (an axis, an index, a slice bound)."""
    if isinstance(value, Dim):
        raise SymbolicDimError(f"{call}: {what} is the symbolic dimension {value}{at_site()}; it "
                               "needs an int")
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TraceError(f"{call}: {what} must be an int, not {type(value).__name__} "
                         f"{value!r}{at_site()}")
    return int(value)


class TracedTensor:
    """A tensor being traced: an IR value plus the tracer that records ops on it.

    It offers the eager :class:`~vkumd.Tensor`'s surface (operators, layout methods,
    reductions, activations, ``shape``/``dtype``/``ndim``); each call appends one node.

    Attributes:
        value: the IR value this tensor stands for.
        tracer: the tracer recording the graph.
    """

    __slots__ = ("value", "tracer")
    # numpy defers to our reflected operators (np_array + traced) instead of looping.
    __array_ufunc__ = None

    def __init__(self, value: Value, tracer: Tracer) -> None:
        self.value = value
        self.tracer = tracer

    # -- metadata --------------------------------------------------------------------------

    @property
    def shape(self) -> tuple[int | SymbolicDim, ...]:
        """The dimensions: ints, and :class:`SymbolicDim` for the dynamic ones."""
        return tuple(SymbolicDim.of(d) for d in self.value.shape)

    @property
    def dtype(self) -> dtypes.DType:
        """The element type."""
        return self.value.dtype

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.value.shape)

    def __repr__(self) -> str:
        return f"TracedTensor(%{self.value.id}: {self.value.type})"

    def __getattr__(self, name: str) -> Any:
        # Only reached for names the class lacks: say what a traced tensor offers.
        raise AttributeError(
            f"TracedTensor has no attribute {name!r}{at_site()}; inside vkumd.compile a tensor "
            "offers + - * / @, reshape/view/flatten/(un)squeeze, transpose/permute/.T, "
            "slicing, astype, sum/mean/max/softmax/relu/gelu/silu/layer_norm and vkumd.ops")

    # -- host reads: not recordable --------------------------------------------------------

    def _host_read(self, what: str) -> DataDependentError:
        return DataDependentError(
            f"{what} of {self!r}{at_site()} reads tensor data on the host: data-dependent control "
            "flow is not supported; vkumd.compile records one graph for every input. Keep "
            "value-dependent Python outside the compiled function, or compute both branches")

    def numpy(self) -> Any:
        """Refused: a traced tensor has no values yet.

        Raises:
            DataDependentError: always, naming the user's line.
        """
        raise self._host_read(".numpy()")

    def item(self) -> Any:
        """Refused: a traced tensor has no values yet.

        Raises:
            DataDependentError: always, naming the user's line.
        """
        raise self._host_read(".item()")

    def tolist(self) -> Any:
        """Refused: a traced tensor has no values yet.

        Raises:
            DataDependentError: always, naming the user's line.
        """
        raise self._host_read(".tolist()")

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        raise self._host_read("np.asarray()")

    def __bool__(self) -> bool:
        raise self._host_read("bool() (an `if`/`while` on a tensor)")

    def __float__(self) -> float:
        raise self._host_read("float()")

    def __int__(self) -> int:
        raise self._host_read("int()")

    def __index__(self) -> int:
        raise self._host_read("use as an index")

    def __complex__(self) -> complex:
        raise self._host_read("complex()")

    def __len__(self) -> int:
        if not self.value.shape:
            raise TraceError(f"len() of 0-d {self!r}{at_site()}")
        first = self.value.shape[0]
        if isinstance(first, Dim):
            raise SymbolicDimError(f"len() of {self!r}{at_site()}: its first dimension is the "
                                   f"symbolic {first}, whose size is known only at run time; "
                                   "use .shape[0] in shapes instead")
        return first

    def __iter__(self) -> Iterator[TracedTensor]:
        for i in range(len(self)):
            yield self[i]

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TraceError(f"assignment into {self!r}{at_site()}: a traced function cannot write "
                         "into a tensor in place; build a new one (e.g. with ops.concat)")

    # -- operators -------------------------------------------------------------------------

    def _call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        return self.tracer.call(op, *args, **kwargs)

    def __add__(self, other: Any) -> TracedTensor:
        return self._call("add", self, other)

    def __radd__(self, other: Any) -> TracedTensor:
        return self._call("add", other, self)

    def __sub__(self, other: Any) -> TracedTensor:
        return self._call("sub", self, other)

    def __rsub__(self, other: Any) -> TracedTensor:
        return self._call("sub", other, self)

    def __mul__(self, other: Any) -> TracedTensor:
        return self._call("mul", self, other)

    def __rmul__(self, other: Any) -> TracedTensor:
        return self._call("mul", other, self)

    def __truediv__(self, other: Any) -> TracedTensor:
        return self._call("div", self, other)

    def __rtruediv__(self, other: Any) -> TracedTensor:
        return self._call("div", other, self)

    def __matmul__(self, other: Any) -> TracedTensor:
        return self._call("matmul", self, other)

    def __rmatmul__(self, other: Any) -> TracedTensor:
        return self._call("matmul", other, self)

    def __neg__(self) -> TracedTensor:
        return self._call("scale", self, -1.0)

    def __pos__(self) -> TracedTensor:
        return self

    def __pow__(self, other: Any) -> TracedTensor:
        raise TraceError(f"{self!r} ** {other!r}{at_site()}: the graph has no power op; write "
                         "x * x, or use an op of vkumd.ops")

    # Comparisons record uint8 nodes; using one in an `if` then fails in __bool__.
    def __lt__(self, other: Any) -> TracedTensor:
        return self._call("lt", self, other)

    def __le__(self, other: Any) -> TracedTensor:
        return self._call("le", self, other)

    def __gt__(self, other: Any) -> TracedTensor:
        return self._call("gt", self, other)

    def __ge__(self, other: Any) -> TracedTensor:
        return self._call("ge", self, other)

    def __eq__(self, other: Any) -> TracedTensor:  # type: ignore[override]
        return self._call("eq", self, other)

    def __ne__(self, other: Any) -> TracedTensor:  # type: ignore[override]
        return self._call("ne", self, other)

    __hash__ = object.__hash__  # identity, as __eq__ records a node

    # -- layout ----------------------------------------------------------------------------

    def reshape(self, *shape: Any) -> TracedTensor:
        """``x`` viewed as ``shape`` (ints, one ``-1``, symbolic dims); also ``reshape(a, b)``."""
        if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
            shape = tuple(shape[0])
        return self._call("reshape", self, tuple(plain_dim(d) for d in shape))

    view = reshape

    def flatten(self, start_dim: int = 0, end_dim: int = -1) -> TracedTensor:
        """Dimensions ``start_dim..end_dim`` (inclusive) merged into one."""
        lo, hi = (self._axis(d, "flatten", "dim") for d in (start_dim, end_dim))
        if lo > hi:
            raise TraceError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}"
                             f"{at_site()}")
        dims = self.value.shape
        merged: int | Dim = 1
        for d in dims[lo:hi + 1]:
            merged = merged * d
        return self._call("reshape", self, (*dims[:lo], merged, *dims[hi + 1:]))

    def unsqueeze(self, dim: int) -> TracedTensor:
        """``x`` with a new dimension of size 1 at ``dim`` (``-1``: the end)."""
        dim = _int_arg(dim, "dim", "unsqueeze")
        if not -self.ndim - 1 <= dim <= self.ndim:
            raise TraceError(f"unsqueeze: dim {dim} is out of range for {self!r}{at_site()}")
        dim = dim + self.ndim + 1 if dim < 0 else dim
        dims = self.value.shape
        return self._call("reshape", self, (*dims[:dim], 1, *dims[dim:]))

    def squeeze(self, dim: int | None = None) -> TracedTensor:
        """``x`` without its size-1 dimensions (or only ``dim``, which must have size 1)."""
        dims = self.value.shape
        if dim is None:
            keep = [d for d in dims if d != 1]
        else:
            axis = self._axis(dim, "squeeze", "dim")
            if dims[axis] != 1:
                raise TraceError(f"squeeze: dimension {dim} of {self!r} has size {dims[axis]}"
                                 f", not 1{at_site()}")
            keep = [d for i, d in enumerate(dims) if i != axis]
        return self._call("reshape", self, tuple(keep))

    def transpose(self, dim0: int, dim1: int) -> TracedTensor:
        """``x`` with dimensions ``dim0`` and ``dim1`` swapped."""
        return self._call("transpose", self, _int_arg(dim0, "dim0", "transpose"),
                          _int_arg(dim1, "dim1", "transpose"))

    def permute(self, *dims: Any) -> TracedTensor:
        """``x`` with its dimensions reordered; ``permute(1, 0)`` or ``permute((1, 0))``."""
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        return self._call("permute", self, [_int_arg(d, "dims", "permute") for d in dims])

    @property
    def T(self) -> TracedTensor:  # noqa: N802 - the name numpy and torch use
        """The dimensions reversed (a 2-D tensor's transpose)."""
        if self.ndim == 2:
            return self.transpose(0, 1)
        return self.permute(tuple(reversed(range(self.ndim))))

    def astype(self, dtype: Any) -> TracedTensor:
        """``x`` converted to ``dtype``."""
        return self._call("cast", self, dtype)

    def __getitem__(self, key: Any) -> TracedTensor:
        from vkumd.framework.graph.trace import index

        return index(self, key)

    def _axis(self, axis: Any, call: str, what: str = "axis") -> int:
        axis = _int_arg(axis, what, call)
        if not -self.ndim <= axis < self.ndim:
            raise TraceError(f"{call}: {what} {axis} is out of range for {self!r}{at_site()}")
        return axis + self.ndim if axis < 0 else axis

    # -- row-wise and elementwise methods ----------------------------------------------------

    def _last_axis(self, axis: Any, call: str) -> None:
        if self._axis(axis, call) != self.ndim - 1:
            raise TraceError(f"{call}: only the last axis is supported (axis=-1), not {axis}"
                             f"{at_site()}; permute the axis last first")

    def sum(self, axis: int = -1, keepdims: bool = False) -> TracedTensor:
        """The sum over the last axis."""
        self._last_axis(axis, "sum")
        return self._call("sum", self, keepdims=keepdims)

    def mean(self, axis: int = -1, keepdims: bool = False) -> TracedTensor:
        """The mean over the last axis."""
        self._last_axis(axis, "mean")
        return self._call("mean", self, keepdims=keepdims)

    def max(self, axis: int = -1, keepdims: bool = False) -> TracedTensor:
        """The maximum over the last axis."""
        self._last_axis(axis, "max")
        return self._call("max", self, keepdims=keepdims)

    def softmax(self, axis: int = -1, *, scale: float | None = None, mask: Any = None
                ) -> TracedTensor:
        """``softmax(x * scale + mask)`` over the last axis."""
        self._last_axis(axis, "softmax")
        return self._call("softmax", self, scale=scale, mask=mask)

    def relu(self) -> TracedTensor:
        """``max(x, 0)``."""
        return self._call("relu", self)

    def gelu(self) -> TracedTensor:
        """GELU (erf)."""
        return self._call("gelu", self)

    def gelu_tanh(self) -> TracedTensor:
        """GELU's tanh approximation."""
        return self._call("gelu_tanh", self)

    def silu(self) -> TracedTensor:
        """``x * sigmoid(x)``."""
        return self._call("silu", self)

    def layer_norm(self, weight: Any = None, bias: Any = None, *, eps: float = 1e-5
                   ) -> TracedTensor:
        """Layer normalisation over the last axis."""
        return self._call("layer_norm", self, weight, bias, eps=eps)

    def rms_norm(self, weight: Any = None, *, eps: float = 1e-6) -> TracedTensor:
        """RMS normalisation over the last axis."""
        return self._call("rms_norm", self, weight, eps=eps)


def find_traced(args: Sequence[Any], kwargs: dict[str, Any]) -> TracedTensor | None:
    """The first TracedTensor among ``args``/``kwargs`` (one level into lists), or None."""
    for a in (*args, *kwargs.values()):
        if isinstance(a, TracedTensor):
            return a
        if isinstance(a, (list, tuple)):
            for b in a:
                if isinstance(b, TracedTensor):
                    return b
    return None

