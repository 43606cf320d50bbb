"""Attention layout folding: swaps of the heads and sequence axes around an ``attention`` node
become its ``layout`` and ``out_layout`` attributes.

Models keep activations as ``[batch, seq, hidden]``; a multi-head attention block reshapes
them to ``[batch, seq, heads, head_dim]`` and permutes them to ``[batch, heads, seq,
head_dim]`` for the attention, then permutes and reshapes the result back. The attention
kernel reads and writes ``[batch, seq, heads, head_dim]`` directly (``layout="bshd"``), so
those permutes (each a full copy, four per layer in BERT) need not run:

* inputs: when q, k and v are all produced by such a swap (``permute`` by ``[0, 2, 1, 3]``
  or ``transpose`` of axes 1 and 2), read by nothing but this node, the node reads the
  swaps' operands and its ``layout`` flips. One of the three unswapped would need its own
  layout, which the kernel does not take, so then the inputs stay as they are.
* output: when the node's only reader is such a swap, the swap's readers read the node,
  whose ``out_layout`` flips.

The mask keeps its ``[batch, heads, q_len, k_len]`` meaning in every layout, so it is left
alone. Swaps that other nodes read, or that are graph outputs, stay; so do other
permutations. The pass runs after attention fusion, which makes the nodes it looks at.
"""

from __future__ import annotations

from typing import Any

from vkumd.compiler.kernels.limits import ATTENTION_LAYOUTS
from vkumd.errors import VkumdValueError
from vkumd.framework.graph.fusion_rewrite import replace_group, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind

LAYOUT_AXES = {"bhsd": "[batch, heads, seq, head_dim]", "bshd": "[batch, seq, heads, head_dim]"}
"""What each layout's four axes are."""


def swap_heads_seq(shape: tuple[Any, ...], layout: str) -> tuple[Any, ...]:
    """An attention operand's ``shape`` in ``layout`` as [batch, heads, seq, head_dim], or
    a [b, h, s, d] shape as ``layout`` has it (the swap is its own inverse)."""
    if layout == "bshd":
        return (shape[0], shape[2], shape[1], shape[3])
    return tuple(shape)


def attention_layouts(attrs: dict[str, Any]) -> tuple[str, str]:
    """An attention node's input and output layouts (``out_layout`` None: the input's).

    Raises:
        VkumdValueError: a layout not in :data:`ATTENTION_LAYOUTS`.
    """
    layout, out_layout = attrs.get("layout", "bhsd"), attrs.get("out_layout")
    out_layout = layout if out_layout is None else out_layout
    for name, value in (("layout", layout), ("out_layout", out_layout)):
        if not isinstance(value, str) or value not in ATTENTION_LAYOUTS:
            meanings = ", ".join(f"{k!r}: {v}" for k, v in LAYOUT_AXES.items())
            raise VkumdValueError(f"attention: unknown {name} {value!r}; choose one of "
                                  f"{list(ATTENTION_LAYOUTS)} ({meanings})")
    return layout, out_layout

_FLIP = {"bhsd": "bshd", "bshd": "bhsd"}


def _swaps_heads_seq(node: Node | None) -> bool:
    """Whether ``node`` swaps axes 1 and 2 of a 4-D tensor and nothing else."""
    if node is None or node.inputs[0] is None or node.inputs[0].type.ndim != 4:
        return False
    if node.op == "permute":
        return tuple(d % 4 for d in node.attrs["dims"]) == (0, 2, 1, 3)
    if node.op == "transpose":
        return {node.attrs["dim0"] % 4, node.attrs["dim1"] % 4} == {1, 2}
    return False


def _only_read_by(value: Value, node: Node) -> bool:
    return (value.kind is not ValueKind.OUTPUT and bool(value.users)
            and all(user is node for user in value.users))


def _input_swaps(node: Node) -> list[Node] | None:
    """The swaps producing q, k and v (once each), if all three are foldable."""
    swaps: list[Node] = []
    for value in node.inputs[:3]:
        assert value is not None
        producer = value.producer
        if not _swaps_heads_seq(producer) or not _only_read_by(value, node):
            return None
        assert producer is not None
        if producer not in swaps:
            swaps.append(producer)
    return swaps


def fold_attention_layouts(graph: Graph) -> Graph:
    """A copy of ``graph`` whose attention nodes read and write through their layout
    attributes instead of through heads/sequence swaps (see the module docstring).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for node in list(g.nodes):
        if node.op != "attention":
            continue
        layout, out_layout = attention_layouts(node.attrs)
        inputs = list(node.inputs)
        members = [node]
        swaps = _input_swaps(node)
        if swaps is not None:
            inputs[:3] = [v.producer.inputs[0] for v in node.inputs[:3]]  # type: ignore[union-attr]
            members = [*swaps, node]
            layout = _FLIP[layout]
        root = node
        user = sole_user(g, node.outputs[0])
        if _swaps_heads_seq(user):
            assert user is not None
            root = user
            members.append(user)
            out_layout = _FLIP[out_layout]
        if root is node and swaps is None:
            continue
        attrs = {**node.attrs, "layout": layout, "out_layout": out_layout}
        replace_group(g, root, members, "attention", inputs, attrs)
    return g
