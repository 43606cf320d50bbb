"""Tracing: run a Python function once on TracedTensors and keep what it did as a graph.

:func:`trace` is the front half of :func:`vkumd.compile`: it makes one graph input per
example input (symbolic where ``dynamic=`` says), calls the function with
:class:`~vkumd.framework.graph.proxy.TracedTensor` arguments, and makes what it returns the
graph's outputs. Each node's label is the user's ``file.py:LINE`` that recorded it, so shape
errors and dumps point at the source.

Values the function closes over (eager tensors, numpy arrays) become graph constants.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.graph.builder import GraphBuilder
from vkumd.framework.graph.builder_ops import OpMethods
from vkumd.framework.graph.dims import Dim, as_dim, linear, solve
from vkumd.framework.graph.ir import Graph, Value
from vkumd.framework.graph.proxy import TracedTensor, find_traced
from vkumd.framework.graph.registry import OPS
from vkumd.framework.graph.trace_calls import CALLS, attributes_by_name, record_call
from vkumd.framework.graph.trace_dims import SymbolicDim, plain_dim
from vkumd.framework.graph.trace_errors import (
    DataDependentError,
    SymbolicDimError,
    TraceError,
    at_site,
    user_site,
)

__all__ = ["DataDependentError", "SymbolicDimError", "Trace", "TraceError", "TracedTensor",
           "Tracer", "index", "input_types", "record_op", "trace"]

# The builder's own op methods (vkumd.ops names, plus numpy-style ops); every registered op
# is a method too (OpMethods.__getattr__), so a tracer records those as well.
_OP_METHODS = frozenset(n for n, f in vars(OpMethods).items()
                        if callable(f) and not n.startswith("_") and n not in ("operand",))
# Ops whose number and array operands take the other operand's dtype (as in numpy).
_BINARY = frozenset({"add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "where"})


class Tracer(GraphBuilder):
    """A :class:`GraphBuilder` that labels each node with the user's source line and
    records calls on :class:`TracedTensor` values.

    Args:
        name: the graph's name.
    """

    def __init__(self, name: str = "graph") -> None:
        super().__init__(name)
        self.open = True
        # id(object) -> (object, its constant); the object is kept so its id stays unique.
        self._captured: dict[int, tuple[Any, Value]] = {}

    def _apply(self, op: str, inputs: Sequence[Value | None], attrs: dict[str, Any]) -> Any:
        return self.op(op, *inputs, label=user_site(), **attrs)

    def lift(self, x: Any, op: str) -> Any:
        """``x`` as the builder takes it: a traced tensor's value, an eager tensor or array
        as a constant; numbers and None unchanged.

        Raises:
            TraceError: a traced tensor of another (or a finished) trace.
        """
        if isinstance(x, TracedTensor):
            if x.tracer is not self or not self.open:
                raise TraceError(f"{op}: {x!r} belongs to another trace (a tensor kept from "
                                 f"an earlier vkumd.compile?){at_site()}")
            return x.value
        if isinstance(x, (list, tuple)):
            # Sizes in a list (split's) are stored as ordinary Dims; a lone SymbolicDim stays,
            # so float()/int() of it by the builder raise the clear error.
            return type(x)(plain_dim(v) if isinstance(v, SymbolicDim) else self.lift(v, op)
                           for v in x)
        if isinstance(x, np.generic):
            return x  # a numpy scalar is a number (np.float32(2) * x keeps x's dtype)
        if isinstance(x, np.ndarray) and op in _BINARY:
            return x  # the builder gives it the other operand's dtype
        if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "dtype")):
            return self._capture(x)
        return x

    def _capture(self, x: Any) -> Value:
        known = self._captured.get(id(x))
        if known is not None:
            return known[1]
        dtype = x.dtype if isinstance(x.dtype, dtypes.DType) else None
        value = self.constant(np.asarray(x), dtype, name="captured")
        self._captured[id(x)] = (x, value)
        return value

    def call(self, op: str, *args: Any, **kwargs: Any) -> Any:
        """Record builder op ``op`` on ``args`` (TracedTensors, constants, numbers).

        Returns:
            A TracedTensor, or a tuple of them for an op with several outputs.

        Raises:
            TraceError: an op with no graph form, or arguments its signature refuses.
            GraphError: as shape inference, naming the node and the user's line.
        """
        if not self.open:
            raise TraceError(f"{op}: this trace has finished; a TracedTensor cannot be used "
                             f"after vkumd.compile returned{at_site()}")
        if op not in _OP_METHODS and op not in OPS:
            raise TraceError(f"vkumd.ops.{op} has no graph form and cannot be traced{at_site()}; "
                             f"traceable ops: {', '.join(sorted(_OP_METHODS | set(OPS)))}")
        method = getattr(self, op)
        args = tuple(self.lift(a, op) for a in args)
        kwargs = {k: self.lift(v, op) for k, v in kwargs.items()}
        try:
            inspect.signature(method).bind(*args, **kwargs)
        except TypeError as exc:
            raise TraceError(f"{op}: {exc}{at_site()}") from None
        return self._wrap(method(*args, **kwargs))

    def _wrap(self, out: Any) -> Any:
        if isinstance(out, tuple):
            return tuple(TracedTensor(v, self) for v in out)
        return TracedTensor(out, self)


def record_op(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Record a ``vkumd.ops.<name>`` call that has a TracedTensor among its arguments.

    The eager signature is mapped to the builder's: ``out=`` cannot be honoured (a graph
    never writes into a caller's tensor), matmul's ``beta`` (which reads ``out``), its
    ``variant`` and qmatmul's ``path`` (kernel choices the compiled graph makes) are refused,
    ``copy`` is the identity and ``fill`` (in place) is refused. The calls with no builder
    method of their own (the views ``flatten``/``squeeze``/``unsqueeze``, ``split`` by a piece
    size) are :mod:`~vkumd.framework.graph.trace_calls`'.

    Raises:
        TraceError: the call cannot be recorded, naming it and the user's line.
    """
    traced = find_traced(args, dict(kwargs))
    if traced is None:
        raise TraceError(f"vkumd.ops.{name}: no TracedTensor among the arguments")
    kwargs = dict(kwargs)
    if kwargs.pop("out", None) is not None:
        raise TraceError(f"vkumd.ops.{name}(..., out=...){at_site()}: a traced function cannot "
                         "write into a tensor; use the returned tensor instead")
    if name == "matmul":
        if kwargs.pop("beta", 0.0):
            raise TraceError(f"vkumd.ops.matmul(..., beta=...){at_site()}: beta scales out=, "
                             "which tracing has not; add a residual= instead")
        if kwargs.pop("variant", None) is not None:
            raise TraceError(f"vkumd.ops.matmul(..., variant=...){at_site()}: the compiled graph "
                             "chooses kernels itself; drop variant=")
    if name == "qmatmul" and kwargs.pop("path", None) is not None:
        raise TraceError(f"vkumd.ops.qmatmul(..., path=...){at_site()}: the compiled graph "
                         "chooses kernels itself; drop path=")
    if name == "copy":
        return args[0] if args else kwargs["src"]
    if name == "fill":
        raise TraceError(f"vkumd.ops.fill{at_site()} writes into a tensor in place, which a "
                         "traced function cannot do; build the value from a constant")
    if name in CALLS:
        return record_call(name, args, kwargs)
    if name == "attention":
        lengths = kwargs.get("key_lengths")
        if lengths is not None and not isinstance(lengths, TracedTensor):
            value = traced.tracer.constant(np.asarray(lengths), "int32", name="key_lengths")
            kwargs["key_lengths"] = TracedTensor(value, traced.tracer)
    if name not in _OP_METHODS and name in OPS:
        args, kwargs = attributes_by_name(OPS[name], args, kwargs)
    return traced.tracer.call(name, *args, **kwargs)


# -- slicing -----------------------------------------------------------------------------


def _expand(key: Any, ndim: int) -> list[Any]:
    """``key`` as one entry per axis (None entries add axes), Ellipsis expanded."""
    items = list(key) if isinstance(key, tuple) else [key]
    for item in items:
        if isinstance(item, TracedTensor) or isinstance(item, (list, np.ndarray)):
            raise TraceError(f"indexing with {type(item).__name__}{at_site()}: only ints, slices, "
                             "None and ... are supported (no gather by tensor)")
    if sum(1 for i in items if i is Ellipsis) > 1:
        raise TraceError(f"an index can hold only one ...{at_site()}")
    used = sum(1 for i in items if i is not None and i is not Ellipsis)
    if used > ndim:
        raise TraceError(f"too many indices ({used}) for a {ndim}-D tensor{at_site()}")
    if any(i is Ellipsis for i in items):
        at = next(n for n, i in enumerate(items) if i is Ellipsis)
        items[at:at + 1] = [slice(None)] * (ndim - used)
    else:
        items += [slice(None)] * (ndim - used)
    return items


def _bound(v: Any, what: str) -> int | None:
    if v is None:
        return None
    if isinstance(v, Dim):
        raise SymbolicDimError(f"slice {what} is the symbolic dimension {v}{at_site()}; slices "
                               "take int bounds")
    if isinstance(v, bool) or not hasattr(v, "__index__"):
        raise TraceError(f"slice {what} must be an int or None, not {v!r}{at_site()}")
    return int(v)


def index(t: TracedTensor, key: Any) -> TracedTensor:
    """``t[key]`` for ints, slices (any nonzero step), None and Ellipsis, as slice and
    reshape nodes.

    Raises:
        TraceError: tensor or list indices, an int out of range, too many indices.
    """
    items = _expand(key, t.ndim)
    tracer, out = t.tracer, t
    shape: list[int | Dim | None] = []  # the final shape; None marks an axis an int removed
    axis = 0
    for item in items:
        if item is None:
            shape.append(1)
            continue
        size = out.value.shape[axis]
        if isinstance(item, slice):
            start, stop = _bound(item.start, "start"), _bound(item.stop, "stop")
            step = _bound(item.step, "step")
            if (start, stop, step) != (None, None, None):
                step = 1 if step is None else step
                out = tracer.call("slice", out, axis, start if step < 0 else start or 0, stop,
                                  step)
            shape.append(out.value.shape[axis])
        else:
            i = _bound(item, "index")
            assert i is not None
            if isinstance(size, int) and not -size <= i < size:
                raise TraceError(f"index {i} is out of range for axis {axis} of size {size}"
                                 f"{at_site()}")
            stop = i + 1 if i != -1 else None
            out = tracer.call("slice", out, axis, i, stop)
            shape.append(None)
        axis += 1
    final = tuple(plain_dim(d) for d in shape if d is not None)
    if final != tuple(out.value.shape):
        out = tracer.call("reshape", out, final)
    return out


# -- the trace ---------------------------------------------------------------------------


@dataclass
class Trace:
    """A traced function: its graph and how to map calls and results to it.

    Attributes:
        graph: the recorded graph (before any pass).
        input_names: the graph inputs' names in the function's parameter order.
        positional: the example inputs were a tuple (call the function positionally).
        output_keys: None for one returned tensor, ``int`` n for a tuple of n, or the keys
            of a returned dict.
    """

    graph: Graph
    input_names: list[str]
    positional: bool
    output_keys: None | int | tuple[str, ...]


def _example_type(name: str, example: Any) -> tuple[tuple[int, ...], dtypes.DType]:
    if isinstance(example, TracedTensor):
        raise TraceError(f"example input {name!r} is a TracedTensor; pass a vkumd Tensor or "
                         "a numpy array")
    if isinstance(getattr(example, "dtype", None), dtypes.DType):
        return tuple(example.shape), example.dtype
    array = np.asarray(example)
    return array.shape, dtypes.from_array(array, None)


def input_types(names: Sequence[str], examples: Sequence[Any],
                dynamic: Mapping[Any, Mapping[int, str | Dim]] | None
                ) -> list[tuple[tuple[int | Dim, ...], dtypes.DType]]:
    """Each input's shape (symbolic where ``dynamic`` marks an axis) and dtype.

    ``dynamic`` gives an axis a symbol (``"h"``) or a multiple of one (``"32*h"``,
    ``32 * sym("h")``: the size a strided convolution divides, see
    :func:`~vkumd.framework.opset.conv.window_size`); the examples' sizes solve the symbols.

    Raises:
        TraceError: a ``dynamic`` entry for an unknown input or axis, or one symbol given
            two different sizes by the examples.
        VkumdValueError: an example size that is no whole multiple its axis declares.
    """
    if dynamic is not None and not isinstance(dynamic, Mapping):
        raise TraceError(f"dynamic={dynamic!r}: give a dict of input -> {{axis: symbol}}, e.g. "
                         "{'x': {0: 'batch'}}")
    dynamic = dict(dynamic or {})
    for key in dynamic:
        if key not in names and not (isinstance(key, int) and 0 <= key < len(names)):
            raise TraceError(f"dynamic= names input {key!r}; the inputs are "
                             f"{', '.join(map(repr, names))}")
    seen: dict[str, tuple[int, str]] = {}
    out = []
    for pos, (name, example) in enumerate(zip(names, examples, strict=True)):
        shape, dtype = _example_type(name, example)
        axes = dynamic.get(name, dynamic.get(pos, {}))
        if not isinstance(axes, Mapping):
            raise TraceError(f"dynamic[{name!r}] must map axes to symbol names, e.g. "
                             f"{{0: 'batch'}}, not {axes!r}")
        dims: list[int | Dim] = list(shape)
        for axis, symbol in axes.items():
            if not isinstance(axis, int) or not -len(shape) <= axis < len(shape):
                raise TraceError(f"dynamic[{name!r}]: axis {axis!r} is out of range for "
                                 f"shape {shape}")
            if not isinstance(symbol, (str, Dim)):
                raise TraceError(f"dynamic[{name!r}][{axis}] = {symbol!r}: a symbol is a name "
                                 "or a multiple of one, e.g. {0: 'batch', 2: '32*h'}")
            dim = as_dim(symbol)
            if not isinstance(dim, Dim) or linear(dim) is None:
                raise TraceError(f"dynamic[{name!r}][{axis}] = {symbol!r}: give a symbol or a "
                                 "multiple of one (32*sym('h'))")
            key, size = solve(dim, shape[axis], f"dynamic[{name!r}][{axis}]: the example's "
                              f"axis {axis}")
            first = seen.setdefault(key, (size, name))
            if first[0] != size:
                raise TraceError(f"symbol {key!r} is {first[0]} in input {first[1]!r} but "
                                 f"{size} in {name!r}; one symbol is one size")
            dims[axis] = dim
        out.append((tuple(dims), dtype))
    return out


def _outputs(tracer: Tracer, result: Any) -> tuple[list[Value], None | int | tuple[str, ...]]:
    def value(x: Any, where: str) -> Value:
        if not isinstance(x, TracedTensor):
            raise TraceError(f"the traced function returned {type(x).__name__} {x!r}{where}; "
                             "return TracedTensors: one, a tuple or a dict of them")
        return tracer.lift(x, "output")

    if isinstance(result, Mapping):
        keys = tuple(result)
        return [value(result[k], f" under key {k!r}") for k in keys], keys
    if isinstance(result, (tuple, list)):
        return [value(x, f" at position {i}") for i, x in enumerate(result)], len(result)
    return [value(result, "")], None


def trace(fn: Callable[..., Any], example_inputs: Mapping[str, Any] | Sequence[Any], *,
          dynamic: Mapping[Any, Mapping[int, str | Dim]] | None = None, name: str | None = None
          ) -> Trace:
    """Trace ``fn`` once on TracedTensors shaped like ``example_inputs``.

    Args:
        fn: a function of tensors, called as ``fn(**inputs)`` for a dict of examples and
            ``fn(*inputs)`` for a tuple.
        example_inputs: name -> vkumd Tensor or numpy array, or a tuple of them (named after
            ``fn``'s parameters).
        dynamic: input name (or position) -> {axis: symbol}, a symbol being a name or a
            multiple of one (``"32*h"``, ``32 * sym("h")``); one symbol name across inputs
            is one dimension.
        name: the graph's name (default ``fn.__name__``).

    Returns:
        The :class:`Trace`.

    Raises:
        TraceError: bad examples or ``dynamic``, host reads of traced data, calls that
            cannot be recorded, results that are not traced tensors.
        GraphError: shape or dtype errors, naming the node and the user's line.
    """
    positional = not isinstance(example_inputs, Mapping)
    if positional and (isinstance(example_inputs, (str, bytes))
                       or not isinstance(example_inputs, Sequence)):
        raise TraceError(f"example_inputs is {type(example_inputs).__name__}; give a dict of "
                         "name -> tensor or array, or a tuple of them in the function's order")
    if positional:
        examples = list(example_inputs)
        names = _positional_names(fn, len(examples))
    else:
        names, examples = list(example_inputs), list(example_inputs.values())
    _check_binds(fn, names, positional)
    tracer = Tracer(name or getattr(fn, "__name__", "graph"))
    args = [TracedTensor(tracer.input(n, shape, dtype), tracer)
            for n, (shape, dtype) in zip(names, input_types(names, examples, dynamic),
                                         strict=True)]
    try:
        result = fn(*args) if positional else fn(**dict(zip(names, args, strict=True)))
        values, keys = _outputs(tracer, result)
    finally:
        tracer.open = False
    tracer.output(*values)
    return Trace(tracer.build(), names, positional, keys)


def _check_binds(fn: Callable[..., Any], names: list[str], positional: bool) -> None:
    """Refuse examples the function's parameters cannot take, before tracing it (its own
    TypeError would read as a bug in the function)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # no signature to check (a builtin): the call says
    try:
        if positional:
            signature.bind(*names)
        else:
            signature.bind(**dict.fromkeys(names))
    except TypeError as exc:
        given = ", ".join(map(repr, names)) or "none"
        raise TraceError(f"{getattr(fn, '__name__', 'the function')} cannot take the example "
                         f"inputs ({given}): {exc}") from None


def _positional_names(fn: Callable[..., Any], count: int) -> list[str]:
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params
             if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)][:count]
    taken = set(names)
    for i in range(len(names), count):
        names.append(f"arg{i}" if f"arg{i}" not in taken else f"arg{i}_")
    return names
