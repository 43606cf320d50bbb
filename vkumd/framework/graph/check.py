"""Graph validation: the invariants every pass keeps and every frontend must produce."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.registry import OPS, infer

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Graph, Value


def _check_values(graph: Graph) -> dict[int, Value]:
    """Every value once, with the kind its origin implies; returns them by id."""
    from vkumd.framework.graph.ir import ValueKind

    seen: dict[int, Value] = {}
    returned = {v.id for v in graph.outputs}
    for kind, values in ((ValueKind.INPUT, graph.inputs), (ValueKind.WEIGHT, graph.weights)):
        for v in values:
            if v.id in seen:
                raise GraphError(f"value %{v.id} is declared twice")
            if v.kind is not kind or v.producer is not None:
                raise GraphError(f"{kind.value} %{v.id} ({v.name}) has kind {v.kind.value}"
                                 f"{' and a producer' if v.producer is not None else ''}")
            if kind is ValueKind.WEIGHT and (v.data is None or v.data.shape != v.shape):
                raise GraphError(f"weight %{v.id} ({v.name}) has no data of shape {v.shape}")
            seen[v.id] = v
    for node in graph.nodes:
        for v in node.outputs:
            if v.id in seen:
                raise GraphError(f"value %{v.id} is written twice", node.describe())
            if v.producer is not node:
                raise GraphError(f"output %{v.id} does not name this node as its producer",
                                 node.describe())
            want = ValueKind.OUTPUT if v.id in returned else ValueKind.INTERMEDIATE
            if v.kind is not want:
                raise GraphError(f"%{v.id} has kind {v.kind.value}, expected {want.value}",
                                 node.describe())
            seen[v.id] = v
    return seen


def check_graph(graph: Graph) -> None:
    """Check that ``graph`` is well formed.

    Every node's inputs are defined (inputs, weights, or outputs of earlier nodes) and
    recorded as used by it; every node's output types are what shape inference gives for its
    inputs and attributes; the outputs are defined values and there is at least one. An
    input a node updates in place (``OpDef.updates``: ``kv_write``'s cache) is no weight, no
    graph output, and read by no node after that one (which would see the update where the
    graph means the old value).

    Raises:
        GraphError: the first violation, naming the node (``node %5 = matmul``) or value.
        GraphTypeError, UnsupportedOpError: a node's op or dtypes, as shape inference says.
    """
    values = _check_values(graph)
    defined = {v.id for v in (*graph.inputs, *graph.weights)}
    for node in graph.nodes:
        where = node.describe()
        for i, v in enumerate(node.inputs):
            if v is None:
                continue
            if values.get(v.id) is not v:
                raise GraphError(f"input {i} (%{v.id}) is not a value of this graph", where)
            if v.id not in defined:
                raise GraphError(f"input {i} (%{v.id}) is used before it is defined; the node "
                                 "list is not in topological order", where)
            if node not in v.users:
                raise GraphError(f"input %{v.id} does not list this node among its users",
                                 where)
        types = infer(node.op, [v.type if v is not None else None for v in node.inputs],
                      node.attrs, graph.dims, where)
        if len(types) != len(node.outputs):
            raise GraphError(f"has {len(node.outputs)} outputs; its op gives {len(types)}",
                             where)
        for v, want in zip(node.outputs, types, strict=True):
            same = (v.dtype is want.dtype and graph.dims.same_shape(v.shape, want.shape))
            if not same:
                raise GraphError(f"output %{v.id} is recorded as {v.type} but its inputs give "
                                 f"{want}", where)
        defined.update(v.id for v in node.outputs)
    if not graph.outputs:
        raise GraphError(f"graph {graph.name} has no outputs; call GraphBuilder.output()")
    for v in graph.outputs:
        if values.get(v.id) is not v:
            raise GraphError(f"output %{v.id} is not a value of this graph (unreachable)")
    present = {id(n) for n in graph.nodes}
    for v in values.values():
        for user in v.users:
            if id(user) not in present:
                raise GraphError(f"%{v.id} lists a user that is not in the graph: "
                                 f"{user.describe()}")
    _check_updates(graph)


def _check_updates(graph: Graph) -> None:
    """Refuse reads of a value after a node updated it in place, and updated weights."""
    from vkumd.framework.graph.ir import ValueKind

    step = {node.id: i for i, node in enumerate(graph.nodes)}
    returned = {v.id for v in graph.outputs}
    for i, node in enumerate(graph.nodes):
        record = OPS.get(node.op)
        index = record.updated_input() if record is not None else None
        if index is None or index >= len(node.inputs) or node.inputs[index] is None:
            continue
        v = node.inputs[index]
        name = record.inputs[index] if record is not None else "input"
        where = node.describe()
        if v.kind is ValueKind.WEIGHT:
            raise GraphError(f"{node.op} updates its {name} in place, and %{v.id} is a weight "
                             "(a constant); pass it as a graph input instead", where)
        if v.id in returned:
            raise GraphError(f"{node.op} updates %{v.id} in place, which is also a graph "
                             f"output; return {node.op}'s result instead", where)
        later = [u for u in v.users
                 if step.get(u.id, -1) > i or (u is node and
                                               sum(x is v for x in node.inputs) > 1)]
        if later:
            raise GraphError(f"{node.op} updates %{v.id} in place, and "
                             f"{later[0].describe()} reads it afterwards; read "
                             f"{node.op}'s result instead (or read %{v.id} before)", where)
