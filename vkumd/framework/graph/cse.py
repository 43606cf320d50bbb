"""Common-subexpression elimination: one node (and one constant) per distinct computation."""

from __future__ import annotations

import hashlib
from collections.abc import Hashable

from vkumd.framework.graph.ir import Graph, Node

# a op b == b op a: their inputs are compared as a set.
COMMUTATIVE = frozenset({"add", "mul", "eq", "ne"})


def _key(node: Node) -> Hashable:
    ids = [v.id if v is not None else None for v in node.inputs]
    if node.op in COMMUTATIVE:
        ids = sorted(ids, key=lambda i: -1 if i is None else i)
    return node.op, tuple(ids), tuple(sorted(node.attrs.items()))


def eliminate_common_subexpressions(graph: Graph) -> Graph:
    """A copy of ``graph`` where equal constants are one weight, and nodes with the same op,
    inputs and attributes are one node (every op is pure).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    constants: dict[Hashable, list] = {}
    for w in list(g.weights):
        assert w.data is not None
        digest = hashlib.sha256(w.data.tobytes()).digest()
        key = (w.dtype.name, w.shape, digest)
        same = next((c for c in constants.get(key, ()) if c.data.tobytes() == w.data.tobytes()),
                    None)
        if same is None:
            constants.setdefault(key, []).append(w)
            continue
        g.replace_uses(w, same)
        g.remove_weight(w)
    seen: dict[Hashable, Node] = {}
    for node in list(g.nodes):
        key = _key(node)
        earlier = seen.get(key)
        if earlier is None:
            seen[key] = node
            continue
        for mine, theirs in zip(node.outputs, earlier.outputs, strict=True):
            g.replace_uses(mine, theirs)
        g.remove_node(node)
    return g
