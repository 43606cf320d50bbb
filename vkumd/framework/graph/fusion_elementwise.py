"""Elementwise fusion: trees of elementwise ops become one ``fused_elementwise`` node.

A group grows from a root (visited from the graph's end, so the largest groups form first)
up through the producers of its inputs, as XLA's and Inductor's elementwise fusion do, and
takes a producer when

* its op is elementwise and its operands are floats (``where``'s condition may be any
  integer type; ``cast`` only to a float type) -- integer arithmetic wraps in int32, which the
  generated kernel's float32 arithmetic would not reproduce;
* every reader of its output is already in the group and the output is no graph output.

A value read outside the group is therefore computed once, by its own node or group, and
read from memory by the others: no work is duplicated. Recomputing cheap producers instead
would save a store and a load per element, but it can multiply transcendental work (a
``gelu`` read by four consumers) and makes the group boundary depend on cost guesses; the
one-reader rule keeps the result predictable and never slower than the eager chain.

The root must give a float result (a comparison alone is left as it is). One-element float
constants become ``("const", value)`` operands when they do not widen the output's rank;
other values become the node's inputs, at most
:data:`~vkumd.compiler.kernels.limits.FUSED_MAX_INPUTS` (a producer that would need more is
left outside). Groups of one node are left alone: the eager kernel is as fast.
"""

from __future__ import annotations

from vkumd.compiler.kernels.limits import ELEMENTWISE_MAX_DIMS, FUSED_MAX_INPUTS
from vkumd.framework.graph.fused_program import OP, step
from vkumd.framework.graph.fusion_rewrite import replace_group, scalar_weight
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.operands import FLOATS
from vkumd.framework.graph.registry import OPS


def _is_float(v: Value | None) -> bool:
    return v is not None and v.dtype.name in FLOATS


def fusible(node: Node) -> bool:
    """Whether ``node`` can be a member of an elementwise group: its op has an elementwise
    trait (:attr:`OpDef.elementwise`) and the operands it needs as floats are floats."""
    trait = OPS[node.op].elementwise
    if trait is None or len(node.outputs) != 1 or node.outputs[0].type.ndim > ELEMENTWISE_MAX_DIMS:
        return False
    if not all(_is_float(v) for i, v in enumerate(node.inputs) if i not in trait.any_type):
        return False
    # A cast step rounds to a float type; to an integer the kernel's float math would differ.
    return node.op != "cast" or node.attrs["dtype"] in FLOATS


class _Group:
    """A growing group: its members and the values it reads from outside."""

    def __init__(self, root: Node) -> None:
        self.root = root
        self.members = [root]
        self.ids = {root.id}

    def outside(self, extra: Node | None = None) -> list[Value]:
        """The distinct values members (and ``extra``) read that no member writes."""
        nodes = self.members + ([extra] if extra is not None else [])
        written = {v.id for n in nodes for v in n.outputs}
        seen: dict[int, Value] = {}
        for n in nodes:
            for v in n.inputs:
                if v is not None and v.id not in written:
                    seen.setdefault(v.id, v)
        return list(seen.values())

    def may_take(self, value: Value) -> bool:
        producer = value.producer
        if producer is None or producer.id in self.ids or not fusible(producer):
            return False
        if value.kind is ValueKind.OUTPUT or any(u.id not in self.ids for u in value.users):
            return False
        return len(_split(self.outside(producer))[0]) <= FUSED_MAX_INPUTS

    def grow(self) -> None:
        """Take producers until none qualifies (a diamond's top joins once both arms did)."""
        changed = True
        while changed:
            changed = False
            for member in list(self.members):
                for v in member.inputs:
                    if v is not None and self.may_take(v):
                        self.members.append(v.producer)  # type: ignore[arg-type]
                        self.ids.add(v.producer.id)  # type: ignore[union-attr]
                        changed = True


def _split(values: list[Value]) -> tuple[list[Value], dict[int, float]]:
    """``values`` as node inputs and inlined constants (by value id)."""
    tensors = [v for v in values if scalar_weight(v) is None]
    rank = max((v.type.ndim for v in tensors), default=-1)
    inputs, consts = [], {}
    for v in values:
        number = scalar_weight(v)
        if number is not None and v.type.ndim <= rank:
            consts[v.id] = number  # a one-element constant that widens nothing
        elif number is None or rank < 0 or v.type.ndim > rank:
            inputs.append(v)
    return inputs, consts


def _program(group: _Group, order: dict[int, int]) -> tuple[list[Value], tuple]:
    # Node order, so inputs are numbered as the program first reads them.
    group.members.sort(key=lambda n: order[n.id])
    members = group.members
    inputs, consts = _split(group.outside())
    number = {v.id: i for i, v in enumerate(inputs)}
    steps = []
    for node in members:
        refs: list[object] = [number[v.id] if v.id in number else ("const", consts[v.id])
                              for v in node.inputs if v is not None]
        steps.append(step(node.op, refs, node.attrs))
        number[node.outputs[0].id] = len(inputs) + len(steps) - 1
    return inputs, tuple(steps)


def fuse_elementwise(graph: Graph) -> Graph:
    """A copy of ``graph`` with each elementwise group of two or more nodes replaced by a
    ``fused_elementwise`` node (see the module's docstring for the rules).

    Args:
        graph: the graph (not modified).

    Returns:
        The new graph.
    """
    g = graph.copy()
    gone: set[int] = set()
    for root in reversed(list(g.nodes)):
        if root.id in gone or not fusible(root) or not _is_float(root.outputs[0]):
            continue
        group = _Group(root)
        group.grow()
        if len(group.members) < 2:
            continue
        order = {n.id: i for i, n in enumerate(g.nodes)}
        inputs, program = _program(group, order)
        if not inputs:
            continue  # constants only: constant folding's work
        replace_group(g, root, group.members, OP, inputs,
                      {"program": program, "dtype": root.outputs[0].dtype.name})
        gone.update(group.ids)
    return g
