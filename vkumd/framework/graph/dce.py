"""Dead-code elimination: drop nodes no output depends on, and unused constants."""

from __future__ import annotations

from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.registry import OPS


def eliminate_dead_code(graph: Graph) -> Graph:
    """A copy of ``graph`` without nodes whose outputs reach no graph output, and without
    weights nothing reads. Inputs stay, even unused: they are the graph's signature. A node
    that updates an input in place (``OpDef.updates``: ``kv_write``) stays too: its effect is
    on the caller's tensor.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    live = {v.id for v in g.outputs}
    kept = []
    for node in reversed(g.nodes):
        record = OPS.get(node.op)
        if any(v.id in live for v in node.outputs) or (record is not None
                                                       and record.updates is not None):
            kept.append(node)
            live.update(v.id for v in node.inputs if v is not None)
    keep_ids = {n.id for n in kept}
    for node in reversed(list(g.nodes)):
        if node.id not in keep_ids:
            # Reverse order: a dead node's dead readers are already gone.
            g.remove_node(node)
    for w in list(g.weights):
        if not w.users and all(v is not w for v in g.outputs):
            g.remove_weight(w)
    return g
