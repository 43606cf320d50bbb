"""Input-affine folding: ``conv2d(x * a + b)`` with one-value constants ``a`` and ``b``, and
no padding, becomes ``conv2d(x)`` with weights ``w * a`` and bias ``bias + b * sum(w)``.

PP-OCRv4's learnable affine blocks write ``act(y) * a + b`` after each activation; the
activation joins the convolution before it (:mod:`fusion_conv_epilogue`), and the affine
would stay a kernel of its own between the two convolutions. Without padding every tap of
every window reads the input, so the affine distributes over the sum exactly:
``sum(w * (a x + b)) = a * sum(w x) + b * sum(w)`` per output channel (over its group's
input channels and the kernel window). A padded convolution reads zeros at its border
where the affine would give ``b``, so it keeps its affine.

The affine is any chain of ``scale``, ``mul`` by a one-value float constant and ``add`` of
one, each read only by the next (the last only by the convolution, once as its input); the
convolution's weights and bias must be constants (its bias may be absent). ``x`` may have
other readers.
"""

from __future__ import annotations

import numpy as np

from vkumd.framework.graph.fusion_rewrite import replace_group, scalar_weight, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.registry import OPS


def _affine_step(node: Node, value: Value) -> tuple[float, float] | None:
    """``(a, b)`` when ``node`` computes ``value * a + b`` with a one-value constant, else
    None."""
    if node.op == "scale":
        return float(OPS["scale"].full_attrs(node.attrs)["alpha"]), 0.0
    if node.op not in ("mul", "add"):
        return None
    a, b = node.inputs[0], node.inputs[1]
    other = b if a is value else a
    if other is value:
        return None
    number = scalar_weight(other)
    if number is None:
        return None
    return (number, 0.0) if node.op == "mul" else (1.0, number)


def _foldable_conv(conv: Node) -> bool:
    """An unpadded float ``conv2d`` with constant weights and bias and no residual."""
    attrs = OPS["conv2d"].full_attrs(conv.attrs)
    w, bias = conv.inputs[1], conv.inputs[2]
    if any(int(p) != 0 for p in attrs["pads"]):
        return False
    if len(conv.inputs) > 3 and conv.inputs[3] is not None:
        return False
    if w is None or w.kind is not ValueKind.WEIGHT or w.data is None:
        return False
    return bias is None or (bias.kind is ValueKind.WEIGHT and bias.data is not None)


def _chain_into(graph: Graph, conv: Node) -> tuple[Value, list[Node], float, float] | None:
    """``(x, nodes, a, b)``: the affine chain ``x * a + b`` feeding ``conv``'s input, made
    of ``nodes``, or None when there is none."""
    value = conv.inputs[0]
    nodes: list[Node] = []
    a, b = 1.0, 0.0
    while value is not None and value.producer is not None:
        node = value.producer
        if sole_user(graph, value) is not (conv if not nodes else nodes[0]):
            break
        x = node.inputs[0]
        src = x if x is not None and x.kind is not ValueKind.WEIGHT else node.inputs[1]
        if src is None or node.outputs[0].dtype is not src.dtype:
            break
        if not graph.dims.same_shape(src.shape, value.shape):
            break
        step = _affine_step(node, src)
        if step is None:
            break
        # value = src * step_a + step_b; the chain so far maps value to value * a + b.
        a, b = a * step[0], a * step[1] + b
        nodes.insert(0, node)
        value = src
    if not nodes or value is None:
        return None
    return value, nodes, a, b


def fold_input_affine_into_conv(graph: Graph) -> Graph:
    """A copy of ``graph`` where each unpadded convolution reading ``x * a + b`` reads ``x``
    with its weights and bias adjusted (see the module docstring).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for conv in list(g.nodes):
        if conv.op != "conv2d" or not conv.outputs[0].dtype.is_float or not _foldable_conv(conv):
            continue
        found = _chain_into(g, conv)
        if found is None:
            continue
        x, nodes, a, b = found
        w, bias = conv.inputs[1], conv.inputs[2]
        assert w is not None and w.data is not None
        weights = np.asarray(w.data, np.float64)
        base = (np.zeros(weights.shape[0]) if bias is None or bias.data is None
                else np.asarray(bias.data, np.float64))
        name = conv.name or f"conv{conv.id}"
        new_w = g.add_weight(g.unique_name(f"{name}_w_in"), weights * a, w.dtype)
        new_b = g.add_weight(g.unique_name(f"{name}_bias_in"),
                             base + b * weights.reshape(weights.shape[0], -1).sum(axis=1),
                             w.dtype)
        replace_group(g, conv, [*nodes, conv], "conv2d", [x, new_w, new_b, *conv.inputs[3:]],
                      conv.attrs)
    return g
