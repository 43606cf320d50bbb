"""Hard-swish rewriting: the forms exporters write hard swish in become the ``hardswish`` op,
one node that :mod:`~vkumd.framework.graph.fusion_conv_epilogue` can fold into the
convolution before it (written out, the convolution's output has two readers and stays).

The forms matched, with ``x`` any float value and every intermediate read once (and no
graph output):

* ``x * clip(x + 3, 0, 6) / 6`` (PaddlePaddle's and ONNX exporters' ``relu6(x + 3) / 6``):
  ``add(x, 3)``, ``clip`` to ``[0, 6]`` (or ``relu6``-style ``clip(min=0, max=6)``), then
  the product with ``x`` and the division by 6 in either order, the division written as
  ``div`` by 6, ``mul`` by 1/6 or ``scale`` by 1/6;
* ``x * hard_sigmoid(x)`` with ``alpha`` 1/6 and ``beta`` 1/2 (torch's export before
  opset 14; ONNX's default ``alpha`` of 0.2 is another function and stays).

Constants match to float32's rounding of 1/6, the precision exporters store them in.
"""

from __future__ import annotations

from vkumd.framework.graph.fusion_rewrite import replace_group, scalar_weight, sole_user
from vkumd.framework.graph.ir import Graph, Node, Value
from vkumd.framework.graph.registry import OPS

_SIXTH = 1.0 / 6.0
# float32 holds 1/6 to 3e-8 relative; an exporter's constant differs from 1/6 by no more.
_TOLERANCE = 1e-6


def _near(value: float | None, want: float) -> bool:
    return value is not None and abs(value - want) <= _TOLERANCE * abs(want)


def _other(node: Node, value: Value) -> Value | None:
    """The input of binary ``node`` that is not ``value`` (None when both are it)."""
    a, b = node.inputs[0], node.inputs[1]
    if a is value and b is value:
        return None
    return b if a is value else a


def _is_sixth(node: Node, value: Value) -> bool:
    """``node`` computes ``value / 6``: ``scale`` by 1/6, ``mul`` by 1/6 or ``div`` by 6."""
    if node.op == "scale":
        return _near(float(OPS["scale"].full_attrs(node.attrs)["alpha"]), _SIXTH)
    if node.op == "mul":
        return _near(scalar_weight(_other(node, value)), _SIXTH)
    if node.op == "div":
        attrs = OPS["div"].full_attrs(node.attrs)
        return (node.inputs[0] is value and attrs["rounding"] is None
                and _near(scalar_weight(node.inputs[1]), 6.0))
    return False


def _times_x(node: Node, value: Value, x: Value) -> bool:
    """``node`` computes ``value * x``."""
    return node.op == "mul" and _other(node, value) is x


def _chain_end(graph: Graph, gate: Node, x: Value, divided: bool) -> list[Node] | None:
    """The nodes after ``gate`` (which computes ``clip(x + 3, 0, 6)``, or ``x``'s hard
    sigmoid when ``divided``) that complete the hard swish, in order, or None."""
    members: list[Node] = []
    value = gate.outputs[0]
    need_sixth, need_x = not divided, True
    while need_sixth or need_x:
        user = sole_user(graph, value)
        if user is None or user.outputs[0].dtype is not value.dtype:
            return None
        if need_x and _times_x(user, value, x):
            need_x = False
        elif need_sixth and _is_sixth(user, value):
            need_sixth = False
        else:
            return None
        members.append(user)
        value = user.outputs[0]
    return members


def _match(graph: Graph, gate: Node) -> tuple[Value, list[Node]] | None:
    """``(x, nodes)`` when ``gate`` starts a hard swish of ``x`` made of ``nodes``."""
    attrs = OPS[gate.op].full_attrs(gate.attrs)
    if gate.op == "hard_sigmoid":
        x = gate.inputs[0]
        if x is None or not (_near(attrs["alpha"], _SIXTH) and _near(attrs["beta"], 0.5)):
            return None
        tail = _chain_end(graph, gate, x, divided=True)
        return None if tail is None else (x, [gate, *tail])
    if float(attrs["min"]) != 0.0 or float(attrs["max"]) != 6.0:
        return None
    shifted = gate.inputs[0]
    if shifted is None or shifted.producer is None or sole_user(graph, shifted) is not gate:
        return None
    add = shifted.producer
    if add.op != "add":
        return None
    for x, three in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        if x is None or three is None or scalar_weight(three) != 3.0:
            continue
        if x.dtype is not shifted.dtype or not graph.dims.same_shape(x.shape, shifted.shape):
            continue
        tail = _chain_end(graph, gate, x, divided=False)
        if tail is not None:
            return x, [add, gate, *tail]
    return None


def rewrite_hardswish(graph: Graph) -> Graph:
    """A copy of ``graph`` where each written-out hard swish (see the module docstring) is
    one ``hardswish`` node.

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    for gate in list(g.nodes):
        if gate not in g.nodes or gate.op not in ("clip", "hard_sigmoid"):
            continue
        if not gate.outputs[0].dtype.is_float:
            continue
        found = _match(g, gate)
        if found is None:
            continue
        x, members = found
        replace_group(g, members[-1], members, "hardswish", [x], {})
    return g
