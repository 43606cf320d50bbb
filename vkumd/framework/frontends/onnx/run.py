"""Running an IR graph on a context: the seam between the importer and the executor.

:func:`run_graph` uses the graph executor's ``CompiledGraph`` (``vkumd.framework.execute``)
when it is importable and lowers every node; otherwise it interprets the graph node by node
with the eager ops of :mod:`vkumd.framework.ops` (one launch or more per node, no replay).
IR ops vkumd has no kernel for raise :class:`~vkumd.framework.frontends.onnx.errors.NoDeviceKernel`.
"""

from __future__ import annotations

import importlib
import weakref
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from vkumd.framework import ops as F
from vkumd.framework.execute.lower import LOWERINGS
from vkumd.framework.frontends.onnx.errors import NoDeviceKernel
from vkumd.framework.graph import Graph, Node
from vkumd.framework.graph.reference import bindings_for
from vkumd.framework.graph.shapes import OPS
from vkumd.framework.tensor import Tensor

Kernel = Callable[[list[Any], dict[str, Any], list[tuple[int, ...]]], list[Tensor]]
ELEMENTWISE_TYPES = ("float32", "float16", "bfloat16", "int32")
FLOAT_TYPES = ("float32", "float16", "bfloat16")
# IR ops with a shape rule and a reference but no device kernel yet.
NO_KERNEL: tuple[str, ...] = ()

_COMPARE = {"eq": F.eq, "ne": F.ne, "lt": F.lt, "le": F.le, "gt": F.gt, "ge": F.ge}
# Ops whose kernels take the float types only.
_FLOAT_ONLY = ("relu", "gelu", "gelu_tanh", "silu", "sum", "mean", "max", "softmax",
               "layer_norm", "rms_norm", "add_layer_norm", "exp", "sqrt", "tanh", "erf",
               "sigmoid")


def check_device(graph: Graph) -> None:
    """Refuse, before anything is uploaded, a graph with a node no kernel runs.

    Raises:
        NoDeviceKernel: naming the first such node (its op, or its op on that dtype).
    """
    for node in graph.nodes:
        op = node.op
        first = node.inputs[0] if node.inputs else None
        if op in NO_KERNEL:
            raise NoDeviceKernel(f"{op} has no device kernel yet ({node.describe()})")
        if op == "slice" and node.attrs.get("step", 1) != 1:
            raise NoDeviceKernel(f"slice with step {node.attrs['step']} has no device kernel "
                                 f"({node.describe()})")
        if op == "where":  # the generated select stores floats; its condition may be bool
            if node.outputs[0].dtype.name not in FLOAT_TYPES:
                raise NoDeviceKernel(f"where has no device kernel for "
                                     f"{node.outputs[0].dtype.name} ({node.describe()})")
            continue
        allowed = FLOAT_TYPES if op in _FLOAT_ONLY else ELEMENTWISE_TYPES
        if op not in ("embedding", "matmul", "attention", "reshape", "fused_elementwise") \
                and first is not None \
                and first.dtype.name not in allowed:
            raise NoDeviceKernel(f"{op} has no device kernel for {first.dtype.name} "
                                 f"({node.describe()})")


def _kernel(node: Node, args: list[Any], attrs: dict[str, Any], shapes: list[tuple[int, ...]]
            ) -> list[Tensor]:
    op = node.op
    first = args[0] if args else None
    lowering = LOWERINGS.get(op)
    if lowering is not None:  # the same vkumd.ops call a compiled graph records
        ctx = next(a for a in args if a is not None).context
        outs = [ctx.empty(shape, out.dtype) for shape, out in zip(shapes, node.outputs,
                                                                   strict=True)]
        lowering(node, args, outs)
        return outs
    if op in _COMPARE:
        return [_COMPARE[op](args[0], args[1])]
    if op == "reshape":
        return [F.reshape(first, shapes[0])]
    if op == "concat":
        return [F.concat(args, attrs["axis"])]
    if op == "split":
        return list(F.split(first, [s[attrs["axis"]] for s in shapes], attrs["axis"]))
    if op == "slice":
        return [_slice(node, first, attrs, shapes[0])]
    raise NoDeviceKernel(f"{op} has no device kernel ({node.describe()})")


def _slice(node: Node, x: Tensor, attrs: dict[str, Any], shape: tuple[int, ...]) -> Tensor:
    axis = attrs["axis"] % len(x.shape)
    start = range(x.shape[axis])[slice(attrs["start"], attrs["stop"])].start \
        if x.shape[axis] else 0
    return F.slice(x, [start], [start + shape[axis]], [axis])


def interpret(graph: Graph, ctx: Any, inputs: Mapping[str, np.ndarray]) -> list[Tensor]:
    """Run ``graph`` node by node with the eager ops.

    Args:
        graph: the graph (after passes).
        ctx: the :class:`~vkumd.Context`.
        inputs: an array per input name, already of the inputs' dtypes.

    Returns:
        The output tensors, in order.

    Raises:
        NoDeviceKernel: a node whose op (or dtype) has no kernel.
        VkumdValueError: a missing input or one of the wrong shape.
    """
    check_device(graph)
    env = bindings_for(graph, {n: np.shape(a) for n, a in inputs.items()})
    values: dict[int, Tensor] = {}
    for v in graph.inputs:
        values[v.id] = ctx.tensor(np.asarray(inputs[v.name]), v.dtype)
    for v in graph.weights:
        values[v.id] = ctx.tensor(v.data, v.dtype)
    for node in graph.nodes:
        args = [values[v.id] if v is not None else None for v in node.inputs]
        shapes = [tuple(graph.dims.bind(o.shape, env)) for o in node.outputs]
        attrs = OPS[node.op].full_attrs(node.attrs)
        for out, result in zip(node.outputs, _kernel(node, args, attrs, shapes), strict=True):
            values[out.id] = result
    return [values[v.id] for v in graph.outputs]


# The executor's home: vkumd.framework.execute on main, graph.compiled in the first plan.
_EXECUTORS = ("vkumd.framework.execute", "vkumd.framework.graph.compiled")
_compiled: weakref.WeakKeyDictionary[Graph, tuple[Any, Any]] = weakref.WeakKeyDictionary()


def _executor(graph: Graph) -> Any:
    """The executor's ``CompiledGraph`` class when it is installed and lowers every node of
    ``graph``; None otherwise (the interpreter then runs it)."""
    for path in _EXECUTORS:
        try:
            module = importlib.import_module(path)
        except ImportError:
            continue
        compiled = getattr(module, "CompiledGraph", None)
        lowerings = getattr(module, "LOWERINGS", None)
        views = getattr(module, "VIEW_OPS", ())
        if compiled is None:
            continue
        # The executor copies inputs and outputs with the elementwise copy kernel.
        if any(v.dtype.name not in ELEMENTWISE_TYPES for v in (*graph.inputs, *graph.outputs)):
            return None
        if lowerings is not None and any(n.op not in lowerings and n.op not in views
                                         for n in graph.nodes):
            return None  # e.g. concat or slice, which the interpreter runs
        return compiled
    return None


def run_graph(graph: Graph, ctx: Any, inputs: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``ctx`` and read its outputs back.

    The executor's compiled graph (recorded once per shape bucket, then replayed) is kept per
    graph and context; graphs it cannot lower run through :func:`interpret`.

    Args:
        graph: the graph (after passes).
        ctx: the :class:`~vkumd.Context`.
        inputs: an array per input name, of the inputs' dtypes.

    Returns:
        The outputs as numpy arrays, keyed ``output_0``, ``output_1``... in the graph's order.

    Raises:
        NoDeviceKernel: the graph needs a kernel vkumd lacks.
    """
    check_device(graph)
    compiled = _executor(graph)
    if compiled is None:
        tensors = interpret(graph, ctx, inputs)
    else:
        cached = _compiled.get(graph)
        if cached is None or cached[0] is not ctx:
            cached = (ctx, compiled(graph, ctx))
            _compiled[graph] = cached
        result = cached[1](**inputs)
        tensors = list(result.values()) if isinstance(result, dict) else (
            [result] if isinstance(result, Tensor) else list(result))
    return {f"output_{i}": t.numpy() for i, t in enumerate(tensors)}
