"""Transpose folding: a swap of the last two axes feeding a matmul becomes its ``trans_a`` or
``trans_b`` flag.

``q @ k.transpose(-2, -1)`` and ``q @ k.permute(0, 1, 3, 2)`` (the forms PyTorch and ONNX
exports write) are ``matmul(q, k, trans_b=True)``: the GEMM reads ``k`` transposed, so the
transpose's copy is not needed, and attention fusion, which matches the flag, sees its
pattern. A transpose is folded when it swaps exactly the last two axes (``transpose`` of
``-2, -1`` in any order or spelling, or a ``permute`` that keeps every other axis in place);
its node stays while anything else reads it and is dropped otherwise (at once, so a fusion
pass after this one sees the operand read only by the matmul). A folded operand that is
itself such a transpose flips the flag back, so chains of swaps cancel.
"""

from __future__ import annotations

from vkumd.framework.graph.fusion_rewrite import replace_group
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind


def _swaps_last_two(node: Node) -> bool:
    x = node.inputs[0]
    if x is None or x.type.ndim < 2:
        return False
    n = x.type.ndim
    if node.op == "transpose":
        return {node.attrs["dim0"] % n, node.attrs["dim1"] % n} == {n - 2, n - 1}
    if node.op == "permute":
        order = tuple(d % n for d in node.attrs["dims"])
        return order == (*range(n - 2), n - 1, n - 2)
    return False


def _untransposed(value: Value) -> tuple[Value, bool]:
    """The value a chain of last-two-axes swaps starts from, and whether the chain has an
    odd length (an odd chain is one transpose)."""
    flipped = False
    while value.producer is not None and _swaps_last_two(value.producer):
        source = value.producer.inputs[0]
        assert source is not None
        value, flipped = source, not flipped
    return value, flipped


def fold_transposes(graph: Graph) -> Graph:
    """A copy of ``graph`` whose matmuls read transposed operands through ``trans_a`` and
    ``trans_b`` instead of through a transpose or permute node.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for node in list(g.nodes):
        if node.op != "matmul":
            continue
        a, b = node.inputs[0], node.inputs[1]
        assert a is not None and b is not None
        (a2, flip_a), (b2, flip_b) = _untransposed(a), _untransposed(b)
        if a2 is a and b2 is b:
            continue
        attrs = dict(node.attrs)
        attrs["trans_a"] = bool(attrs.get("trans_a", False)) ^ flip_a
        attrs["trans_b"] = bool(attrs.get("trans_b", False)) ^ flip_b
        replace_group(g, node, [node], "matmul", [a2, b2, *node.inputs[2:]], attrs)
    for node in reversed(list(g.nodes)):  # consumers first, so a chain goes in one sweep
        out = node.outputs[0]
        if _swaps_last_two(node) and not out.users and out.kind is not ValueKind.OUTPUT:
            g.remove_node(node)
    return g
