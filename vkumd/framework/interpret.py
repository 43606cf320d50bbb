"""Run a graph node by node: the one interpreter, used wherever a graph is not (or cannot be)
recorded and replayed.

Each node goes where :func:`~vkumd.framework.execute.lower.device_reason` sends it: onto the
device through its op's lowering (the same ``vkumd.ops`` call a compiled graph records, into
fresh output tensors; a view op is a view), or, when the device cannot run it, through its
op's host fallback in numpy, which is exact because fallbacks only move or compare stored
values. A caller that must stay on the device (the ONNX runner, whose conformance counts
device results only) passes ``host=False`` and gets :class:`NoDeviceKernel` instead.
:class:`~vkumd.framework.compile.CompiledFunction` runs graphs it cannot record here, and
"eager vs compiled" comparisons use it as the device-side reference (the float64 one is
:func:`vkumd.framework.graph.reference.evaluate`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vkumd import errors
from vkumd.framework.execute.lower import NoDeviceKernel, device_reason
from vkumd.framework.graph import Graph, GraphError, Node
from vkumd.framework.graph.reference import bindings_for
from vkumd.framework.graph.registry import OPS
from vkumd.framework.tensor import Tensor


def run_node(ctx: Any, node: Node, args: list[Any], shapes: list[tuple[int, ...]], *,
             host: bool = True) -> list[Tensor]:
    """``node``'s outputs from tensors ``args``; ``shapes`` are the outputs' sizes.

    Raises:
        NoDeviceKernel: the device cannot run the node and ``host`` is False.
        GraphError: neither the device nor the host can run it, or a host result of the
            wrong shape.
    """
    record = OPS[node.op]
    reason = device_reason(node)
    if reason is None and not record.view:
        updated = record.updated_input()
        if updated is not None:  # kv_write: the output is the updated input's tensor
            outs = [args[updated]]
        else:
            outs = [ctx.empty(shape, out.dtype)
                    for shape, out in zip(shapes, node.outputs, strict=True)]
        record.lower(node, args, outs)  # type: ignore[misc]  (device_reason: it has one)
        return outs
    if reason is not None and not host:
        raise NoDeviceKernel(f"{reason} ({node.describe()})")
    if record.host is None:
        raise GraphError(f"{reason}, and the op has no host implementation",
                         node.describe())
    result = record.host(ctx, args, record.full_attrs(node.attrs), shapes)
    outs = list(result) if isinstance(result, (list, tuple)) else [result]
    for out, want in zip(outs, shapes, strict=True):
        if tuple(out.shape) != want:
            raise GraphError(f"the host step gave shape {tuple(out.shape)}, expected {want}",
                             node.describe())
    return outs


def run_graph(graph: Graph, ctx: Any, inputs: Mapping[str, Tensor],
              constants: dict[int, Tensor] | None = None, *, host: bool = True
              ) -> list[Tensor]:
    """Run ``graph`` on ``ctx`` one node at a time.

    Args:
        graph: the graph.
        ctx: the :class:`~vkumd.Context` the tensors live in.
        inputs: a tensor per input name, of the input's dtype.
        constants: a cache of the weights' tensors by value id (filled on first use), so
            repeated calls upload the weights once.
        host: whether nodes the device cannot run may run on the host.

    Returns:
        The output tensors, in the graph's order.

    Raises:
        VkumdValueError: a missing input or one whose shape contradicts the graph.
        VkumdTypeError: an input of another dtype.
        NoDeviceKernel: with ``host=False``, a node the device cannot run.
        GraphError: a node neither the device nor the host can run.
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
        for out, result in zip(node.outputs, run_node(ctx, node, args, shapes, host=host),
                               strict=True):
            values[out.id] = result
        for v in node.inputs:
            if v is not None and last_use.get(v.id) == i and v.id not in keep:
                values.pop(v.id, None)
    return [values[v.id] for v in graph.outputs]
