"""Converters of ONNX's control flow: If, Scan and Loop, by inlining their subgraphs at
import time.

The graph IR has no control flow, so a subgraph becomes ordinary nodes of the importing
graph: its nodes are copied with their local names made unique (a fresh prefix per copy) and
converted like the main graph's, reading outer names directly. So:

- **If** folds: its condition must be known at import time (a constant, or computed from
  shapes); the branch taken is inlined.
- **Scan** unrolls over its scan inputs' length, which must be a concrete size: iteration
  ``t`` reads a slice of each scan input, the state flows from one copy of the body to the
  next, and the per-iteration scan outputs are stacked.
- **Loop** unrolls: its trip count and condition must be known at import time, and the
  condition the body computes must fold too (a condition computed from data on the device
  is refused).

A condition or trip count fed as a graph input is not a refusal of the model: the importer
names the input, and :class:`~.model.OnnxModel` specializes the model on its value per call
(the same import-time specialization as a Reshape's shape input). Unrolling is bounded by
:data:`MAX_UNROLLED_NODES`.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.frontends.onnx.schema import undeclared_attributes
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Dim, Value

# The most subgraph nodes one control-flow node may unroll into (iterations x body nodes):
# past it the model is refused rather than grown without bound.
MAX_UNROLLED_NODES = 20000

_copies = itertools.count()


def _rename_graph(graph: onnx.GraphProto, names: dict[str, str]) -> None:
    """Rename, in place, every use of ``names`` in ``graph``'s nodes, nested subgraphs and
    outputs (ONNX names are unique across scopes, so no nested name shadows one of them)."""
    for node in graph.node:
        _rename_node(node, names)
    for vi in graph.output:
        vi.name = names.get(vi.name, vi.name)


def _rename_node(node: onnx.NodeProto, names: dict[str, str]) -> None:
    for i, n in enumerate(node.input):
        node.input[i] = names.get(n, n)
    for i, n in enumerate(node.output):
        node.output[i] = names.get(n, n)
    for attr in node.attribute:
        if attr.type == onnx.AttributeProto.GRAPH:
            _rename_graph(attr.g, names)
        elif attr.type == onnx.AttributeProto.GRAPHS:
            for g in attr.graphs:
                _rename_graph(g, names)


def inline(st: State, graph: onnx.GraphProto, inputs: list[Bound], what: str
           ) -> list[Bound]:
    """Convert one copy of ``graph`` into the importing graph, its inputs bound to
    ``inputs``; returns what its outputs are bound to (values or known arrays).

    Raises:
        Unsupported: a node of the subgraph is refused (the first refusal is quoted);
            :class:`NeedsConstant` when every refusal only lacked an outer input's value.
    """
    if st.convert_node is None:  # pragma: no cover -- the importer always sets it
        raise Unsupported("subgraphs are inlined only inside an import")
    if len(inputs) != len(graph.input):
        raise Unsupported(f"its {what} takes {len(graph.input)} inputs, given {len(inputs)}")
    prefix = f"{what}#{next(_copies)}/"
    local = [vi.name for vi in graph.input] + [t.name for t in graph.initializer]
    local += [n for node in graph.node for n in node.output if n]
    names = {n: prefix + n for n in local}
    body = copy.deepcopy(graph)
    _rename_graph(body, names)
    for vi, bound in zip(graph.input, inputs, strict=True):
        st.bind(names[vi.name], bound)
    for t in graph.initializer:
        st.bind(names[t.name], numpy_helper.to_array(t))
    refused: list[Any] = []
    poisoned: set[str] = set()
    for node in body.node:
        why = undeclared_attributes(node, st.opset) if node.domain in ("", "ai.onnx") else None
        if why is not None:
            raise Unsupported(f"its {what}'s {node.op_type} node: {why}")
        st.convert_node(node, refused, poisoned)
    if refused:
        first = refused[0]
        message = f"its {what}'s {first}"
        outer = [r.needs for r in refused if r.needs and not r.needs.startswith(prefix)]
        if len(outer) == len(refused):
            raise NeedsConstant(message, outer[0])
        raise Unsupported(message)
    outputs = []
    for vi in body.output:
        if vi.name not in st.env:
            raise Unsupported(f"its {what} output {vi.name!r} is not computed")
        outputs.append(st.env[vi.name])
    return outputs


def _check_unroll(iterations: int, body: onnx.GraphProto, op: str) -> None:
    nodes = iterations * max(len(body.node), 1)
    if nodes > MAX_UNROLLED_NODES:
        raise Unsupported(f"{op} of {iterations} iterations would unroll into {nodes} nodes; "
                          f"vkumd unrolls at most {MAX_UNROLLED_NODES} (control flow is "
                          "inlined at import time)")


def _known_flag(st: State, name: str, what: str) -> bool:
    """A known boolean scalar input."""
    array = st.known(name)
    if array is None:
        raise NeedsConstant(f"{what} must be known at import time (vkumd inlines control "
                            "flow; it is computed at run time)", name)
    if array.size != 1 or array.dtype == object:
        raise Unsupported(f"{what} must be a single value, got shape {array.shape}")
    return bool(array.reshape(-1)[0])


@converter("If", attrs=("then_branch", "else_branch"))
def if_(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The branch the import-time condition selects, inlined."""
    taken = _known_flag(st, node.input[0], "If's condition")
    branch = attrs["then_branch" if taken else "else_branch"]
    outputs = inline(st, branch, [], "then_branch" if taken else "else_branch")
    if len(outputs) != len(node.output):
        raise Unsupported(f"the branch has {len(outputs)} outputs; the node {len(node.output)}")
    return list(outputs)


def _take(st: State, name: str, axis: int, index: int) -> Bound:
    """``name``'s slice ``index`` along ``axis``, the axis dropped."""
    array = st.known(name)
    if array is not None:
        return np.take(array, index, axis=axis)
    x = st.value(name)
    part = st.b.slice(x, axis=axis, start=index, stop=index + 1)
    return st.b.reshape(part, tuple(d for i, d in enumerate(x.shape) if i != axis))


def _stack(st: State, parts: list[Bound], axis: int) -> Bound:
    """Per-iteration results stacked along a new ``axis``."""
    if all(isinstance(p, np.ndarray) for p in parts):
        return np.stack(parts, axis=axis)  # type: ignore[arg-type]
    values = [p if isinstance(p, Value) else st.value(_as_name(st, p)) for p in parts]
    grown = [st.b.reshape(v, (*v.shape[:axis], 1, *v.shape[axis:])) for v in values]
    return grown[0] if len(grown) == 1 else st.b.concat(grown, axis=axis)


def _length(st: State, name: str, axis: int) -> int:
    shape = st.shape(name)
    if not -len(shape) <= axis < len(shape):
        raise Unsupported(f"scan axis {axis} is out of range for a rank-{len(shape)} input")
    size = shape[axis]
    if isinstance(size, Dim):
        raise Unsupported(f"the scan length is symbolic ({size}); vkumd unrolls Scan over a "
                          "concrete length (bind the size)")
    return int(size)


@converter("Scan", attrs=("body", "num_scan_inputs", "scan_input_axes",
                          "scan_input_directions", "scan_output_axes",
                          "scan_output_directions", "directions"))
def scan(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Scan unrolled over its scan inputs' concrete length (opset 8: per batch entry)."""
    body: onnx.GraphProto = attrs["body"]
    m = int(attrs["num_scan_inputs"])
    names = list(node.input)
    if st.opset < 9:
        if names[0]:
            raise Unsupported("sequence_lens (opset 8) is not supported: every sequence "
                              "runs the full length")
        names = names[1:]
    n = len(names) - m
    if n < 0 or len(body.output) < n:
        raise Unsupported(f"num_scan_inputs={m} does not fit {len(names)} inputs")
    k = len(body.output) - n
    directions = [int(d) for d in attrs.get("scan_input_directions",
                                            attrs.get("directions", [0] * m))]
    in_axes = [int(a) for a in attrs.get("scan_input_axes", [0] * m)]
    out_axes = [int(a) for a in attrs.get("scan_output_axes", [0] * k)]
    out_dirs = [int(d) for d in attrs.get("scan_output_directions", [0] * k)]
    if st.opset < 9:  # a batch axis 0 first, the sequence axis 1
        batches = {_length(st, name, 0) for name in names}
        if len(batches) != 1:
            raise Unsupported(f"the inputs' batch sizes differ: {sorted(batches)}")
        per_batch = [_scan_once(st, body, [_take(st, nm, 0, b) for nm in names], n, m,
                                directions, [0] * m, out_axes, out_dirs)
                     for b in range(batches.pop())]
        return [_stack(st, [r[i] for r in per_batch], 0) for i in range(n + k)]
    return _scan_once(st, body, [st.env[nm] for nm in names], n, m, directions, in_axes,
                      out_axes, out_dirs)


def _scan_once(st: State, body: onnx.GraphProto, inputs: list[Bound], n: int, m: int,
               directions: list[int], in_axes: list[int], out_axes: list[int],
               out_dirs: list[int]) -> list[Bound | None]:
    names = [_as_name(st, b) for b in inputs]
    ranks = [len(st.shape(nm)) for nm in names[n:]]
    axes = [a % r if r else a for a, r in zip(in_axes, ranks, strict=True)]
    lengths = {_length(st, nm, a) for nm, a in zip(names[n:], axes, strict=True)}
    if len(lengths) != 1:
        raise Unsupported(f"the scan inputs' lengths differ: {sorted(lengths)}")
    steps = lengths.pop()
    if steps == 0:
        raise Unsupported("a scan of length 0 (its outputs' shapes are not defined here)")
    _check_unroll(steps, body, "Scan")
    states: list[Bound] = [st.env[nm] for nm in names[:n]]
    collected: list[list[Bound]] = []
    for t in range(steps):
        slices = [_take(st, nm, a, steps - 1 - t if d else t)
                  for nm, a, d in zip(names[n:], axes, directions, strict=True)]
        outputs = inline(st, body, states + slices, "body")
        states = outputs[:n]
        collected.append(outputs[n:])
    results: list[Bound | None] = list(states)
    for j, (axis, d) in enumerate(zip(out_axes, out_dirs, strict=True)):
        parts = [c[j] for c in collected]
        if d:
            parts.reverse()
        rank = len(parts[0].shape) + 1
        results.append(_stack(st, parts, axis % rank))
    return results


def _as_name(st: State, bound: Bound) -> str:
    """A name ``bound`` is bound to (a fresh one)."""
    name = f"control#{next(_copies)}"
    st.bind(name, bound)
    return name


@converter("Loop", attrs=("body",))
def loop(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Loop unrolled: trip count and condition known at import time, and the condition the
    body computes folding each iteration."""
    body: onnx.GraphProto = attrs["body"]
    # The condition first: a model feeding both as graph inputs is then specialized on both
    # (a refusal names one input; an integer trip count is specialized on anyway).
    going = _known_flag(st, node.input[1], "Loop's condition") if st.present(node, 1) else True
    limit = None
    if st.present(node, 0):
        trips = st.ints(node.input[0], "Loop's trip count")
        limit = trips[0] if len(trips) == 1 else None
        if limit is None:
            raise Unsupported(f"the trip count holds {len(trips)} values; it takes one")
    carried = [st.env[nm] for nm in node.input[2:]]
    n = len(carried)
    k = len(body.output) - 1 - n
    if k < 0:
        raise Unsupported(f"the body has {len(body.output)} outputs for {n} carried values")
    collected: list[list[Bound]] = []
    i = 0
    while going and (limit is None or i < limit):
        _check_unroll(i + 1, body, "Loop")
        outputs = inline(st, body, [np.array(i, np.int64), np.array(going), *carried], "body")
        cond = outputs[0]
        if not isinstance(cond, np.ndarray):
            raise Unsupported("the body computes its condition on the device at run time; "
                              "vkumd unrolls loops whose condition is known at import time")
        going = bool(np.asarray(cond).reshape(-1)[0])
        carried = list(outputs[1:1 + n])
        collected.append(outputs[1 + n:])
        i += 1
    if k and not collected:
        raise Unsupported("a loop of 0 iterations with scan outputs (their shapes are not "
                          "defined here)")
    return [*carried, *(_stack(st, [c[j] for c in collected], 0) for j in range(k))]
