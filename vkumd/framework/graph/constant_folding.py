"""Constant folding: compute, once, every node whose inputs are all constants."""

from __future__ import annotations

import math

from vkumd.framework.graph.ir import Graph, ValueKind
from vkumd.framework.graph.reference import run_node
from vkumd.settings import fold_limit

# The reference computes in float64: a folded element costs 8 bytes on the host whatever the
# result's dtype.
_HOST_ITEMSIZE = 8


def fold_constants(graph: Graph) -> Graph:
    """A copy of ``graph`` where each node reading only constants is replaced by constants.

    The values are computed in float64 by the reference implementation of the op, then
    stored in the output's dtype (one rounding, as a kernel accumulating in float32 and
    storing once would be within). Folding runs in node order, so chains of constant nodes
    (a weight transposed, then scaled) fold completely. The folded nodes' inputs may become
    unused; dead-code elimination removes them. A node whose results would take more than
    :func:`~vkumd.settings.fold_limit` bytes in float64 (``VKUMD_FOLD_LIMIT``) is left to the
    device: folding must not let a small graph claim gigabytes of host memory.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    limit = fold_limit()
    for node in list(g.nodes):
        present = [v for v in node.inputs if v is not None]
        if not present or any(v.kind is not ValueKind.WEIGHT for v in present):
            continue
        if any(not isinstance(d, int) for v in node.outputs for d in v.shape):
            continue  # a symbolic result (a reshape to "batch") has no size to compute
        if sum(math.prod(v.shape) for v in node.outputs) * _HOST_ITEMSIZE > limit:
            continue
        args = [v.data if v is not None else None for v in node.inputs]
        shapes = [tuple(int(d) for d in v.shape) for v in node.outputs]
        results = run_node(node, args, shapes)
        for out, result in zip(node.outputs, results, strict=True):
            folded = g.add_weight(g.unique_name(f"folded_{out.id}"), result, out.dtype)
            g.replace_uses(out, folded)
        g.remove_node(node)
    return g
