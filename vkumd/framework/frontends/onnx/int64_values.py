"""Which of a graph's INT64 values carry data (computed in int64) rather than indices or
shapes (narrowed to int32, range-checked, as before).

ONNX writes indices, shapes, axes and counts as INT64, and the index kernels take int32, so
vkumd narrows INT64 to int32 by default. A value is kept int64 when everything it meets is
arithmetic vkumd computes on int64 (Add, Mul, comparisons, Cast, ...): then values past
int32 are computed exactly instead of refused. The rule, over the graph before conversion:

- candidates: INT64 graph inputs, INT64 initializers and Constant outputs, Cast/CastLike
  outputs to INT64, and the outputs of an arithmetic data op all of whose inputs are
  candidates;
- a data op ties its candidate operands (and an arithmetic op's outputs) together: they
  share one dtype, so they are kept or narrowed together;
- a candidate read by any other op (Gather, Reshape, Slice, Range, control flow, ...), or by
  a data op with a non-candidate operand, is narrowed -- and with it its whole tie.

Standard library and onnx only; the importer asks :func:`int64_data_values`.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import onnx

# Ops whose result has their operands' type and which vkumd computes on int64.
ARITHMETIC = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "BitShift",
                        "BitwiseAnd", "BitwiseOr", "BitwiseXor", "Identity"})
# Ops that read int64 operands as data and give another type (bool).
COMPARISONS = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"})
CASTS = frozenset({"Cast", "CastLike"})
_INT64 = onnx.TensorProto.INT64


def int64_data_values(graph: onnx.GraphProto) -> frozenset[str]:
    """The names of ``graph``'s INT64 values that are computed as int64 (the rule above)."""
    candidates = {vi.name for vi in graph.input if vi.type.tensor_type.elem_type == _INT64}
    candidates |= {t.name for t in graph.initializer if t.data_type == _INT64}
    for node in graph.node:
        if node.op_type == "Constant" and _constant_type(node) == _INT64:
            candidates.update(node.output)
        elif node.op_type == "Cast" and _attr(node, "to") == _INT64:
            candidates.update(node.output)
    changed = True
    while changed:  # arithmetic on candidates alone gives candidates
        changed = False
        for node in graph.node:
            if node.op_type in ARITHMETIC and _inputs(node) and all(
                    name in candidates for name in _inputs(node)):
                new = set(node.output) - candidates
                if new:
                    candidates |= new
                    changed = True
    narrowed = set(_subgraph_names(graph.node))
    ties: list[set[str]] = []
    for node in graph.node:
        operands = _inputs(node)
        if node.op_type in ARITHMETIC | COMPARISONS:
            tie = {n for n in operands if n in candidates}
            if node.op_type in ARITHMETIC:
                tie |= {n for n in node.output if n in candidates}
            if any(n not in candidates for n in operands):
                narrowed |= tie
            ties.append(tie)
        elif node.op_type in CASTS:
            if node.op_type == "CastLike" and len(operands) > 1:
                narrowed.add(operands[1])  # its type is read, not its values
        else:
            narrowed.update(n for n in operands if n in candidates)
    changed = True
    while changed:
        changed = False
        for tie in ties:
            if tie & narrowed and not tie <= narrowed:
                narrowed |= tie
                changed = True
    return frozenset(candidates - narrowed)


def _inputs(node: onnx.NodeProto) -> list[str]:
    return [name for name in node.input if name]


def _attr(node: onnx.NodeProto, name: str) -> int | None:
    for a in node.attribute:
        if a.name == name:
            return a.i
    return None


def _constant_type(node: onnx.NodeProto) -> int | None:
    for a in node.attribute:
        if a.name == "value":
            return a.t.data_type
        if a.name in ("value_int", "value_ints"):
            return _INT64
    return None


def _subgraph_names(nodes: Iterable[onnx.NodeProto]) -> Iterator[str]:
    """Every name read inside control flow's bodies (outer values they use are narrowed:
    the bodies are converted as the importer always has)."""
    for node in nodes:
        for a in node.attribute:
            for body in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                for inner in body.node:
                    yield from inner.input
                yield from _subgraph_names(body.node)
