"""The graph's text form (one line per node) and its Graphviz DOT export.

Text form::

    graph encoder(%0: float32[batch, seq, 384] "x")
      weight %1: float32[384, 384] "w"
      %2 = matmul(%0, %1) {trans_b=True} : float32[batch, seq, 384]
      return %2

An absent optional input is written ``_``; trailing absent ones are left out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vkumd.framework.graph.dims import Dim

if TYPE_CHECKING:
    from vkumd.framework.graph.ir import Graph, Node, Value


def format_attr(value: Any) -> str:
    """An attribute value as the text form writes it."""
    if isinstance(value, (tuple, list)):
        inner = ", ".join(format_attr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    if isinstance(value, Dim):
        return str(value)
    return repr(value)


def _inputs(node: Node) -> str:
    inputs = list(node.inputs)
    while inputs and inputs[-1] is None:
        inputs.pop()
    return ", ".join("_" if v is None else f"%{v.id}" for v in inputs)


def _attrs(node: Node) -> str:
    if not node.attrs:
        return ""
    body = ", ".join(f"{k}={format_attr(v)}" for k, v in sorted(node.attrs.items()))
    return " {" + body + "}"


def format_node(node: Node) -> str:
    """``%3 = matmul(%1, %2) {trans_b=True} : float32[batch, seq, 384]``."""
    outs = ", ".join(f"%{v.id}" for v in node.outputs)
    types = ", ".join(str(v.type) for v in node.outputs)
    label = f"  # {node.name}" if node.name else ""
    return f"{outs} = {node.op}({_inputs(node)}){_attrs(node)} : {types}{label}"


def _declare(v: Value) -> str:
    return f"%{v.id}: {v.type} \"{v.name}\""


def format_graph(graph: Graph) -> str:
    """The whole graph, one line per input list, weight, equality, node and the return."""
    lines = [f"graph {graph.name}({', '.join(_declare(v) for v in graph.inputs)})"]
    lines += [f"  weight {_declare(v)}" for v in graph.weights]
    lines += [f"  dim {a} = {b}" for a, b in graph.dims.pairs()]
    lines += [f"  {format_node(n)}" for n in graph.nodes]
    lines.append("  return " + ", ".join(f"%{v.id}" for v in graph.outputs))
    return "\n".join(lines)


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _source(v: Value) -> str:
    return f"n{v.producer.id}" if v.producer is not None else f"v{v.id}"


def to_dot(graph: Graph) -> str:
    """The graph in Graphviz DOT: a box per node, an ellipse per input, a note per weight,
    one ``a -> b`` line per edge (labelled with the value) and a sink for the outputs.

    Returns:
        The DOT source (``dot -Tsvg`` renders it).
    """
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;",
             '  node [shape=box, fontname="monospace"];']
    for shape, values in (("ellipse", graph.inputs), ("note", graph.weights)):
        for v in values:
            label = _quote(f"%{v.id} {v.name}\n{v.type}")
            lines.append(f"  v{v.id} [shape={shape}, label={label}];")
    for node in graph.nodes:
        outs = ", ".join(f"%{v.id}" for v in node.outputs)
        types = "\n".join(str(v.type) for v in node.outputs)
        label = f"{outs} = {node.op}{_attrs(node)}\n{types}"
        lines.append(f"  n{node.id} [label={_quote(label)}];")
    for node in graph.nodes:
        for v in node.inputs:
            if v is not None:
                lines.append(f'  {_source(v)} -> n{node.id} [label="%{v.id}"];')
    lines.append('  outputs [shape=plaintext, label="outputs"];')
    for v in graph.outputs:
        lines.append(f'  {_source(v)} -> outputs [label="%{v.id}"];')
    lines.append("}")
    return "\n".join(lines)
