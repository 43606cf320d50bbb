"""What every fusion pass shares: reading one-user chains and replacing a group by one node."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind


def sole_user(graph: Graph, value: Value) -> Node | None:
    """The one node reading ``value`` (once), or None: it has other readers, is read twice,
    or is a graph output (then its value must be kept, so it cannot vanish into a fusion)."""
    if len(value.users) != 1 or value.kind is ValueKind.OUTPUT:
        return None
    user = value.users[0]
    if sum(1 for v in user.inputs if v is value) != 1:
        return None
    return user


def scalar_weight(value: Value | None) -> float | None:
    """The number a one-element float constant holds, else None."""
    if value is None or value.kind is not ValueKind.WEIGHT or value.data is None:
        return None
    if value.data.size != 1 or not value.dtype.is_float:
        return None
    return float(value.data.reshape(-1)[0])


def replace_group(graph: Graph, root: Node, members: Iterable[Node], op: str,
                  inputs: Sequence[Value | None], attrs: Mapping[str, Any]) -> Node:
    """Replace ``members`` (which include ``root``) by one ``op`` node computing ``root``'s
    single output.

    The new node takes ``root``'s place in the node list: its inputs are defined before any
    member, hence before ``root``, and every reader of ``root`` comes after it, so the list
    stays a topological order. Members other than ``root`` must have no readers outside the
    group.

    Args:
        graph: the graph being rewritten (a pass's copy).
        root: the member whose output the group computes.
        members: every node of the group.
        op: the new node's op.
        inputs: its inputs.
        attrs: its attributes.

    Returns:
        The new node.

    Raises:
        GraphError: the new node's type differs from ``root``'s output, or a member's output
            is still read from outside the group.
    """
    node = graph.add_node(op, list(inputs), dict(attrs), root.name)
    old, new = root.outputs[0], node.outputs[0]
    if new.dtype is not old.dtype or not graph.dims.same_shape(new.shape, old.shape):
        raise GraphError(f"fusion gave {new.type} for {old.type}", root.describe())
    graph.nodes.remove(node)
    graph.nodes.insert(graph.nodes.index(root), node)
    graph.replace_uses(old, new)
    doomed = {m.id for m in members}
    for member in reversed(list(graph.nodes)):
        if member.id in doomed:
            graph.remove_node(member)
    return node
