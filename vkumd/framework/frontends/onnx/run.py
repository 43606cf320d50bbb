"""Running an imported graph on a context: recorded and replayed where it can be, else node by
node through the one interpreter -- on the device only.

Where each node runs is :func:`~vkumd.framework.execute.lower.device_reason`'s decision, as
for ``vkumd.compile``; the ONNX runner refuses host fallbacks (:class:`NoDeviceKernel`), so a
result it returns is always the device's. (A node whose output size depends on the data is
no node of these graphs: the model runs in segments around it, :mod:`.segments`.)
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.execute.lower import NoDeviceKernel, device_reason
from vkumd.framework.graph import Graph, UnsupportedOpError
from vkumd.framework.interpret import run_graph as interpret
from vkumd.framework.tensor import Tensor

# The graph's recording, kept on the graph itself: a CompiledGraph holds its graph, so in a
# dict keyed weakly by the graph the entry would keep its own key (and the recording's
# device memory) alive for the context's life. On the graph the two form a cycle the
# collector frees with the model.
_RECORDING = "_onnx_recording"
# Threads making a model's first calls together record its graph once, not once each.
_compiled_lock = threading.Lock()


def check_device(graph: Graph) -> None:
    """Refuse, before anything is uploaded, a graph with a node no kernel runs.

    Raises:
        NoDeviceKernel: naming the first such node (its op, or its op on that dtype).
    """
    for node in graph.nodes:
        reason = device_reason(node)
        if reason is not None:
            raise NoDeviceKernel(f"{reason} ({node.describe()})")


def recording(graph: Graph) -> Any:
    """The :class:`CompiledGraph` that :func:`run_graph` recorded for ``graph``, or None
    (not run yet, or run through the interpreter)."""
    cached = getattr(graph, _RECORDING, None)
    return None if cached is None else cached[1]


def _recorded(graph: Graph, ctx: Any) -> Any:
    """The graph's :class:`CompiledGraph` on ``ctx`` (kept per graph), or None when it cannot
    be recorded (its inputs or outputs of a type the executor does not copy)."""
    with _compiled_lock:
        cached = getattr(graph, _RECORDING, None)
        if cached is not None and cached[0] is ctx:
            return cached[1]
        try:
            compiled = CompiledGraph(graph, ctx)
        except UnsupportedOpError:
            return None
        setattr(graph, _RECORDING, (ctx, compiled))
        return compiled


def run_graph(graph: Graph, ctx: Any, inputs: Mapping[str, np.ndarray]
              ) -> dict[str, np.ndarray]:
    """Run ``graph`` on ``ctx`` and read its outputs back.

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
    compiled = _recorded(graph, ctx)
    if compiled is None:
        tensors = interpret(graph, ctx, {v.name: ctx.tensor(dtypes.host_array(
            inputs[v.name], expected=v.dtype, what=f"input {v.name!r}")[0], v.dtype)
                                         for v in graph.inputs}, host=False)
    else:
        result = compiled(**inputs)
        tensors = list(result.values()) if isinstance(result, dict) else (
            [result] if isinstance(result, Tensor) else list(result))
    return {f"output_{i}": t.numpy() for i, t in enumerate(tensors)}
