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

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from vkumd.framework import dtypes
from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.methods import (
    TensorMethods,
    install_op_methods,
    no_attribute,
    unary_methods,
)
from vkumd.framework.graph.trace_dims import SymbolicDim
from vkumd.framework.graph.trace_errors import (
    DataDependentError,
    SymbolicDimError,
    TraceError,
    at_site,
)

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Value
    from vkumd.framework.graph.trace import Tracer


class _Recorder:
    """``TracedTensor._ops``: ``_ops.add(x, y)`` records ``vkumd.ops.add(x, y)`` as graph nodes
    (through :func:`~vkumd.framework.graph.trace.record_op`), so the shared methods record
    what they would run eagerly."""

    def __getattr__(self, name: str) -> Callable[..., Any]:
        if name.startswith("_"):
            raise AttributeError(name)
        # Imported here: the tracer imports this module.
        from vkumd.framework.graph.trace import record_op

        def record(*args: Any, **kwargs: Any) -> Any:
            return record_op(name, args, kwargs)

        record.__name__ = record.__qualname__ = name
        setattr(self, name, record)  # made once per op
        return record


class TracedTensor(TensorMethods):
    """A tensor being traced: an IR value plus the tracer that records ops on it.

    Its operators and methods are the eager :class:`~vkumd.Tensor`'s
    (:class:`~vkumd.framework.graph.methods.TensorMethods`), recording each ``vkumd.ops``
    call they make instead of running it; ``==``/``!=``, indexing and the host reads (which
    refuse) are its own.

    Attributes:
        value: the IR value this tensor stands for.
        tracer: the tracer recording the graph.
    """

    __slots__ = ("value", "tracer")
    # numpy defers to our reflected operators (np_array + traced) instead of looping.
    __array_ufunc__ = None
    _ops = _Recorder()
    _value_error = TraceError
    _type_error = TraceError

    def __getattr__(self, name: str) -> Any:
        # Reached only for names the class lacks: an op declared since the methods were
        # installed becomes one now; anything else is refused with what a tensor offers.
        if name in install_op_methods():
            return getattr(self, name)
        raise no_attribute(self, name)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *unary_methods()})

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

    def __setitem__(self, key: Any, value: Any) -> None:
        raise TraceError(f"assignment into {self!r}{at_site()}: a traced function cannot write "
                         "into a tensor in place; build a new one (e.g. with ops.concat)")

    # -- recorded comparisons: a graph has no use for identity ------------------------------

    def __eq__(self, other: Any) -> TracedTensor:  # type: ignore[override]
        return self._ops.eq(self, other)

    def __ne__(self, other: Any) -> TracedTensor:  # type: ignore[override]
        return self._ops.ne(self, other)

    __hash__ = object.__hash__  # identity, as __eq__ records a node

    def __getitem__(self, key: Any) -> TracedTensor:
        """``t[key]`` for ints, slices (any nonzero step), None and ``...``, as slice and reshape
        nodes (see :func:`~vkumd.framework.graph.trace.index`)."""
        from vkumd.framework.graph.trace import index

        return index(self, key)


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

