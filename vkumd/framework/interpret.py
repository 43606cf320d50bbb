"""Run a graph eagerly, node by node, through ``vkumd.ops``: the reference executor.

:class:`~vkumd.framework.compile.CompiledFunction` falls back to it while no compiled
executor exists, and "eager vs compiled" comparisons use it as the device-side reference
(the float64 one is :func:`vkumd.framework.graph.reference.evaluate`). Each node is one eager
op call with the node's attributes, through the executor's lowering table
(:data:`vkumd.framework.execute.lower.LOWERINGS`). Ops it has no lowering for (the lone
comparisons) and nodes whose lowering refuses them (a slice with a step, a ``where`` on
integers: :func:`~vkumd.framework.execute.lower.unsupported_reason`) go through the host in
numpy, which is slow but exact (they only move or compare stored values).
"""

from __future__ import annotations

import operator
from collections import ChainMap
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vkumd import errors
from vkumd.framework import dtypes
from vkumd.framework.execute.lower import LOWERINGS, unsupported_reason
from vkumd.framework.graph import Graph, GraphError, Node, op_info
from vkumd.framework.graph.reference import bindings_for
from vkumd.framework.tensor import Tensor

Args = list[Any]
EagerFn = Callable[[Any, Args, dict[str, Any], list[tuple[int, ...]]], Any]

_COMPARE = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "le": operator.le,
            "gt": operator.gt, "ge": operator.ge}


def _host(ctx: Any, like: dtypes.DType, array: np.ndarray) -> Tensor:
    return ctx.tensor(np.ascontiguousarray(array), dtype=like)


def _reshape(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
    x = xs[0]
    if hasattr(x, "reshape"):  # the eager Tensor's own view, once it has one
        return x.reshape(shapes[0])
    return _host(ctx, x.dtype, x.numpy().reshape(shapes[0]))


def _slice(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
    x = xs[0]
    index = [slice(None)] * x.ndim
    index[attrs["axis"]] = slice(attrs["start"] or 0, attrs["stop"], attrs["step"])
    return _host(ctx, x.dtype, x.numpy()[tuple(index)])


def _concat(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
    return _host(ctx, xs[0].dtype, np.concatenate([x.numpy() for x in xs], attrs["axis"]))


def _split(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
    axis = attrs["axis"] % xs[0].ndim
    cuts = np.cumsum([s[axis] for s in shapes])[:-1]
    return [_host(ctx, xs[0].dtype, part) for part in np.split(xs[0].numpy(), cuts, axis)]


def _compare(op: str) -> EagerFn:
    def run(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
        result = _COMPARE[op](xs[0].numpy(), xs[1].numpy())
        return _host(ctx, dtypes.uint8, result.astype(np.uint8))

    return run


def _where(ctx: Any, xs: Args, attrs: dict[str, Any], shapes: list[tuple[int, ...]]) -> Any:
    cond, a, b = (x.numpy() for x in xs)
    return _host(ctx, xs[1].dtype, np.where(cond != 0, a, b))


# Ops (or nodes, see unsupported_reason) the executor cannot record, run on the host; every
# other node runs through the executor's lowering, the same vkumd.ops call a compiled graph
# records.
HOST: dict[str, EagerFn] = {
    "reshape": _reshape, "slice": _slice, "concat": _concat, "split": _split,
    "where": _where, **{op: _compare(op) for op in _COMPARE},
}


# Every op the interpreter runs, whichever way (a live view: lowerings registered later count).
EAGER = ChainMap(LOWERINGS, HOST)


def run_node(ctx: Any, node: Node, args: Args, shapes: list[tuple[int, ...]]) -> list[Tensor]:
    """``node``'s outputs from eager tensors ``args``; ``shapes`` are the outputs' sizes.

    Raises:
        GraphError: no eager form of the op, or a result of the wrong shape.
    """
    lowering = LOWERINGS.get(node.op)
    if lowering is not None and (node.op not in HOST or unsupported_reason(node) is None):
        outs = [ctx.empty(shape, out.dtype) for shape, out in zip(shapes, node.outputs,
                                                                   strict=True)]
        lowering(node, args, outs)
        return outs
    fn = HOST.get(node.op)
    if fn is None:
        known = sorted({*LOWERINGS, *HOST})
        raise GraphError(f"op {node.op} has no eager implementation; the ops that have one "
                         f"are {', '.join(known)}", node.describe())
    result = fn(ctx, args, op_info(node.op).full_attrs(node.attrs), shapes)
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    for out, want in zip(outs, shapes, strict=True):
        if tuple(out.shape) != want:
            raise GraphError(f"the eager op gave shape {tuple(out.shape)}, expected {want}",
                             node.describe())
    return outs


def run_graph(graph: Graph, ctx: Any, inputs: Mapping[str, Tensor],
              constants: dict[int, Tensor] | None = None) -> list[Tensor]:
    """Run ``graph`` on ``ctx`` one eager op per node.

    Args:
        graph: the graph.
        ctx: the :class:`~vkumd.Context` the tensors live in.
        inputs: a tensor per input name, of the input's dtype.
        constants: a cache of the weights' tensors by value id (filled on first use), so
            repeated calls upload the weights once.

    Returns:
        The output tensors, in the graph's order.

    Raises:
        VkumdValueError: a missing input or one whose shape contradicts the graph.
        VkumdTypeError: an input of another dtype.
        GraphError: a node without an eager implementation.
    """
    env = bindings_for(graph, {name: tuple(t.shape) for name, t in inputs.items()})
    values: dict[int, Tensor] = {}
    for v in graph.inputs:
        t = inputs[v.name]
        if t.dtype is not v.dtype:
            raise errors.VkumdTypeError(f"input {v.name!r} is {t.dtype.name}; the graph "
                                        f"takes {v.dtype.name}")
        values[v.id] = t
    cache = constants if constants is not None else {}
    for v in graph.weights:
        if v.id not in cache:
            cache[v.id] = ctx.tensor(v.data, dtype=v.dtype)
        values[v.id] = cache[v.id]
    # The last node that reads each value: its tensor can go back to the pool after it.
    last_use = {v.id: i for i, node in enumerate(graph.nodes) for v in node.inputs
                if v is not None}
    keep = {v.id for v in (*graph.inputs, *graph.weights, *graph.outputs)}
    for i, node in enumerate(graph.nodes):
        args = [values[v.id] if v is not None else None for v in node.inputs]
        shapes = [graph.dims.bind(o.shape, env) for o in node.outputs]
        for out, result in zip(node.outputs, run_node(ctx, node, args, shapes), strict=True):
            values[out.id] = result
        for v in node.inputs:
            if v is not None and last_use.get(v.id) == i and v.id not in keep:
                values.pop(v.id, None)
    return [values[v.id] for v in graph.outputs]
