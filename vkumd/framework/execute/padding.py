"""Which symbols a graph may pad: padding must never leak into the true part of a result.

A padded run evaluates the graph with each symbol at its bucket size over zero-padded
inputs; the true results are the leading part of each padded axis. That holds exactly when
no op mixes padded positions into true ones: elementwise ops, row-wise ops over another
axis, matmul over rows or columns, attention over padded keys masked by ``key_lengths``,
layout ops that move whole axes. It fails when an op reduces over a padded axis (softmax,
the norms and reductions over the last axis, matmul's inner dimension), when a reshape
merges a padded axis with others, or when concat, split or slice cut along one. For such a
symbol the compiled graph records exact sizes instead of buckets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from vkumd.framework.graph.dims import Dim, product
from vkumd.framework.graph.ir import Graph, Node, Value
from vkumd.framework.graph.shapes import op_info

# Ops that reduce over some axes of some inputs: node -> [(input index, axis)].
_REDUCED: dict[str, Callable[[Node], list[tuple[int, int]]]] = {
    "softmax": lambda n: [(0, -1)],
    "layer_norm": lambda n: [(0, -1)],
    "add_layer_norm": lambda n: [(0, -1), (1, -1)],
    "rms_norm": lambda n: [(0, -1)],
    "sum": lambda n: [(0, -1)], "mean": lambda n: [(0, -1)], "max": lambda n: [(0, -1)],
    "matmul": lambda n: [(0, -2 if n.attrs.get("trans_a") else -1),
                         (1, -1 if n.attrs.get("trans_b") else -2)],
    # Keys are masked by key_lengths (the executor passes the true length); head_dim is not.
    "attention": lambda n: [(0, -1), (1, -1), (2, -1)],
    "embedding": lambda n: [(1, 0), (1, 1)],
}
# Ops that move or combine values position by position (besides OpInfo.inplace ones).
_POSITIONAL = frozenset({"transpose", "permute", "eq", "ne", "lt", "le", "gt", "ge",
                         "fused_elementwise"})
_CUTTING = frozenset({"concat", "split", "slice"})


def _symbols(graph: Graph, d: int | Dim) -> frozenset[str]:
    r = graph.dims.resolve(d)
    return frozenset() if isinstance(r, int) else r.symbols


def _plain(graph: Graph, d: int | Dim) -> str | None:
    """The symbol ``d`` is, when it is exactly one symbol."""
    r = graph.dims.resolve(d)
    if isinstance(r, Dim) and len(r.symbols) == 1:
        name = next(iter(r.symbols))
        if r == Dim((((name,), 1),)):
            return name
    return None


def _axis_symbols(graph: Graph, v: Value, axis: int) -> frozenset[str]:
    return _symbols(graph, v.shape[axis]) if -len(v.shape) <= axis < len(v.shape) else frozenset()


def _reshape_ok(graph: Graph, src: Value, dst: Value, symbol: str) -> bool:
    """Whether a reshape keeps ``symbol``'s axis whole: in both shapes it is one plain axis
    with the same dims after it (so position ``i`` along it stays position ``i``)."""
    found = []
    for shape in (src.shape, dst.shape):
        axes = [i for i, d in enumerate(shape) if symbol in _symbols(graph, d)]
        if len(axes) != 1 or _plain(graph, shape[axes[0]]) != symbol:
            return False
        found.append(product(shape[axes[0] + 1:]))
    return graph.dims.same(found[0], found[1])


def _node_leaks(graph: Graph, node: Node) -> dict[str, str]:
    """Symbols whose padding this node would mix into true positions, with the reason."""
    leaks: dict[str, str] = {}
    where = node.describe()
    ins = [v for v in node.inputs if v is not None]
    carried = frozenset().union(*(_symbols(graph, d) for v in ins for d in v.shape))
    if node.op == "reshape":
        for s in carried:
            if not _reshape_ok(graph, node.inputs[0], node.outputs[0], s):
                leaks[s] = f"{where} merges or moves the {s} axis"
        return leaks
    if node.op in _CUTTING:
        axis = node.attrs.get("axis", 0)
        for v in ins:
            for s in _axis_symbols(graph, v, axis):
                leaks[s] = f"{where} cuts along the {s} axis"
        return leaks
    reduced = _REDUCED.get(node.op)
    if reduced is not None:
        for index, axis in reduced(node):
            v = node.inputs[index]
            if v is not None:
                for s in _axis_symbols(graph, v, axis):
                    leaks[s] = f"{where} reduces over the {s} axis"
        if node.op == "attention":
            leaks.update(_attention_leaks(graph, node))
        return leaks
    if op_info(node.op).inplace or node.op in _POSITIONAL:
        return leaks
    for s in carried:  # an op this analysis does not know: assume the worst
        leaks[s] = f"{where}: {node.op} is not known to keep padding apart"
    return leaks


def _attention_leaks(graph: Graph, node: Node) -> dict[str, str]:
    q, k = node.inputs[0], node.inputs[1]
    leaks: dict[str, str] = {}
    k_len = k.shape[2]
    k_syms = _symbols(graph, k_len)
    if k_syms and _plain(graph, k_len) is None:
        for s in k_syms:
            leaks[s] = f"{node.describe()}: the key length {k_len} is not one symbol"
    if node.attrs.get("causal") and not graph.dims.same(q.shape[2], k_len):
        # Bottom-right alignment shifts with the padded lengths.
        for s in k_syms | _symbols(graph, q.shape[2]):
            leaks[s] = f"{node.describe()}: causal with query and key lengths that differ"
    return leaks


def _boundary_leaks(graph: Graph, values: Iterable[Value], what: str) -> dict[str, str]:
    """Inputs are padded and outputs cut axis by axis: each padded axis must be one symbol."""
    leaks: dict[str, str] = {}
    for v in values:
        for d in v.shape:
            if _plain(graph, d) is None:
                for s in _symbols(graph, d):
                    leaks[s] = f"{what} %{v.id} has the axis {d}, not one symbol"
    return leaks


def leaky_symbols(graph: Graph) -> dict[str, str]:
    """Symbols (class representatives) that must not be padded, each with a reason.

    Args:
        graph: the graph to compile.

    Returns:
        ``{symbol: why}``; the executor gives these exact sizes.
    """
    leaks = _boundary_leaks(graph, graph.inputs, "input")
    leaks.update(_boundary_leaks(graph, graph.outputs, "output"))
    for node in graph.nodes:
        for s, why in _node_leaks(graph, node).items():
            leaks.setdefault(s, why)
    return leaks


def attention_key_symbol(graph: Graph, node: Node) -> str | None:
    """The symbol an attention node's key length is (it then needs ``key_lengths``)."""
    return _plain(graph, node.inputs[1].shape[2])
