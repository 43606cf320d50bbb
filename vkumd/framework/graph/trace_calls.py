"""The ``vkumd.ops`` calls a tracer records as something other than the builder method of
the same name: the views ``flatten``, ``squeeze`` and ``unsqueeze`` (reshape nodes: a graph
has one view op), ``split`` by a piece size (a split into the sizes it makes) and ``slice``
(whose ``vkumd.ops`` form takes a window over several axes; the builder's, one axis); and,
for every registered op, attributes its eager function takes by position
(:func:`attributes_by_name`).

Each function takes the op's ``vkumd.ops`` arguments, with a
:class:`~vkumd.framework.graph.proxy.TracedTensor` as ``x``, and records its nodes. Errors
are :class:`~vkumd.framework.graph.trace_errors.TraceError` naming the user's line; a
traced ``squeeze(dim)`` of a dimension that is not 1 is refused (eagerly it is a no-op, as in
PyTorch), so a graph never depends on a size it cannot see.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vkumd.framework.graph.dims import Dim
from vkumd.framework.graph.proxy import TracedTensor
from vkumd.framework.graph.trace_errors import SymbolicDimError, TraceError, at_site


def _int(value: Any, what: str, call: str) -> int:
    if isinstance(value, Dim):
        raise SymbolicDimError(f"{call}: {what} is the symbolic dimension {value}{at_site()}; it "
                               "needs an int")
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TraceError(f"{call}: {what} must be an int, not {type(value).__name__} "
                         f"{value!r}{at_site()}")
    return int(value)


def _axis(x: TracedTensor, value: Any, call: str, what: str, extra: int = 0) -> int:
    """``value`` as an axis of ``x`` (``extra`` = 1: one past the end is allowed too)."""
    axis = _int(value, what, call)
    ndim = x.ndim + extra
    if not -ndim <= axis < ndim:
        raise TraceError(f"{call}: {what} {axis} is out of range for {x!r}{at_site()}")
    return axis + ndim if axis < 0 else axis


def flatten(x: TracedTensor, start_dim: int = 0, end_dim: int = -1) -> TracedTensor:
    """``vkumd.ops.flatten``: dimensions ``start_dim..end_dim`` merged, as a reshape."""
    lo, hi = (_axis(x, d, "flatten", "dim") for d in (start_dim, end_dim))
    if lo > hi:
        raise TraceError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}"
                         f"{at_site()}")
    dims = x.value.shape
    merged: int | Dim = 1
    for d in dims[lo:hi + 1]:
        merged = merged * d
    return x.tracer.call("reshape", x, (*dims[:lo], merged, *dims[hi + 1:]))


def unsqueeze(x: TracedTensor, dim: int) -> TracedTensor:
    """``vkumd.ops.unsqueeze``: a new dimension of size 1 at ``dim`` (-1: the end)."""
    at = _axis(x, dim, "unsqueeze", "dim", extra=1)
    dims = x.value.shape
    return x.tracer.call("reshape", x, (*dims[:at], 1, *dims[at:]))


def squeeze(x: TracedTensor, dim: int | None = None) -> TracedTensor:
    """``vkumd.ops.squeeze``: the size-1 dimensions dropped (or ``dim``, which must be 1)."""
    dims = x.value.shape
    if dim is None:
        keep = [d for d in dims if d != 1]
    else:
        axis = _axis(x, dim, "squeeze", "dim")
        if dims[axis] != 1:
            raise TraceError(f"squeeze: dimension {dim} of {x!r} has size {dims[axis]}, not 1"
                             f"{at_site()}")
        keep = [d for i, d in enumerate(dims) if i != axis]
    return x.tracer.call("reshape", x, tuple(keep))


def split(x: TracedTensor, sizes_or_sections: Any, axis: int = 0) -> Any:
    """``vkumd.ops.split``: a list of sizes as given; an int as pieces of that size (the
    last one shorter), which needs the axis' size to be an int."""
    if isinstance(sizes_or_sections, (list, tuple)):
        return x.tracer.call("split", x, sizes_or_sections, axis)
    size = _int(sizes_or_sections, "sizes_or_sections", "split")
    at = _axis(x, axis, "split", "axis")
    n = x.value.shape[at]
    if isinstance(n, Dim):
        raise SymbolicDimError(f"split: axis {axis} is the symbolic dimension {n}{at_site()}; "
                               "split by a piece size needs its size: give the sizes as a list")
    if size < 1:
        raise TraceError(f"split: a piece size of {size}{at_site()}; give at least 1")
    sizes = [size] * (n // size) + ([n % size] if n % size else [])
    return x.tracer.call("split", x, sizes, at)


def _int_list(value: Any, what: str) -> list[Any]:
    return list(value) if isinstance(value, (list, tuple)) else [_int(value, what, "slice")]


def slice_(x: TracedTensor, starts: Any, stops: Any, axes: Any = None) -> TracedTensor:
    """``vkumd.ops.slice``: one window of ``starts[i]:stops[i]`` along each of ``axes``
    (default the first ``len(starts)``), as one slice node per axis."""
    first, last = _int_list(starts, "starts"), _int_list(stops, "stops")
    where = list(range(len(first))) if axes is None else _int_list(axes, "axes")
    if not len(first) == len(last) == len(where):
        raise TraceError(f"slice: starts, stops and axes need one of each per axis, got "
                         f"{len(first)}, {len(last)} and {len(where)}{at_site()}")
    out = x
    for start, stop, axis in zip(first, last, where, strict=True):
        out = x.tracer.call("slice", out, axis, start, stop)
    return out


def _reduction(name: str) -> Callable[..., Any]:
    """``vkumd.ops.<name>`` of a reduction: its eager signature (``dim``, ``keepdim`` by
    position, numpy's ``keepdims``, ``correction`` for var/std) as the builder's attributes."""
    def record(x: TracedTensor, dim: Any = -1, keepdim: Any = False, *, keepdims: Any = None,
               **correction: Any) -> TracedTensor:
        keep = keepdim if keepdims is None else keepdims
        return x.tracer.call(name, x, dim=tuple(dim) if isinstance(dim, list) else dim,
                             keepdims=keep, **correction)
    return record


# The reductions of opset/reductions.py (named here: the graph layer imports no opset).
_REDUCTIONS = ("sum", "mean", "max", "min", "prod", "sum_square", "l1_norm", "l2_norm",
               "logsumexp", "log_sum", "var", "std", "any", "all")
CALLS: Mapping[str, Callable[..., Any]] = {"flatten": flatten, "squeeze": squeeze,
                                           "unsqueeze": unsqueeze, "split": split,
                                           "slice": slice_,
                                           **{n: _reduction(n) for n in _REDUCTIONS}}


def attributes_by_name(record: Any, args: Sequence[Any], kwargs: Mapping[str, Any]
                       ) -> tuple[list[Any], dict[str, Any]]:
    """A registered op's eager-call arguments in the builder's form: the builder takes a
    registered op's inputs by position and its attributes by name, while an eager function
    may take an attribute by position (``max_pool2d(x, kernel)``). Positional arguments in
    the place of an attribute of ``record`` (per its ``vkumd.ops`` signature) move to
    ``kwargs`` under the attribute's name; the rest stay. (The call has already bound to
    the eager signature, which refuses an argument given both ways.)
    """
    if record.eager is None:
        return list(args), dict(kwargs)
    positional = []
    for p in inspect.signature(record.eager).parameters.values():
        if p.kind is inspect.Parameter.VAR_POSITIONAL:
            break
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            positional.append(p.name)
    inputs, named = [], dict(kwargs)
    for i, value in enumerate(args):
        slot = positional[i] if i < len(positional) else None
        if slot is None or slot not in record.attrs:
            inputs.append(value)
            continue
        named[slot] = value
    return inputs, named


def record_call(name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
    """Record ``vkumd.ops.<name>(*args, **kwargs)`` for a name of :data:`CALLS`.

    Raises:
        TraceError: arguments the op's signature refuses, or ``x`` not a traced tensor.
    """
    fn = CALLS[name]
    try:
        x, *rest = args
    except ValueError:
        x, rest = dict(kwargs).pop("x", None), []
        kwargs = {k: v for k, v in kwargs.items() if k != "x"}
    if not isinstance(x, TracedTensor):
        raise TraceError(f"vkumd.ops.{name}: x must be the traced tensor, not "
                         f"{type(x).__name__}{at_site()}")
    try:
        inspect.signature(fn).bind(x, *rest, **kwargs)
    except TypeError as exc:
        raise TraceError(f"{name}: {exc}{at_site()}") from None
    return fn(x, *rest, **kwargs)
