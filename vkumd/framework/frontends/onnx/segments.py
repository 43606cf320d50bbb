"""Running an ONNX model in segments around a host step.

A node whose output size depends on its input values (NonZero, Unique, Compress: their
converters raise :class:`~.errors.HostStep`) cannot be part of a graph whose sizes are fixed
before it runs. :class:`~.model.OnnxModel` then runs the model as three parts, each its own
model:

1. the *prefix*: the nodes the host step's inputs come from (none when they are graph inputs
   or initializers), run on the device as any model; its outputs are read back;
2. the *host step*: the node computed in numpy by its registry op's ``host_step``;
3. the *rest*: every node the graph's outputs need past the step, with the step's outputs as
   graph inputs of their now known sizes. It is imported once per distinct shape of those
   outputs (kept, as a Range bound specializes a model per value) and may itself hold
   another host step, which splits it again.

The cost of each host step is a synchronisation with the device, a read-back of its inputs
and an upload of its outputs; a node both segments need (one that feeds the step and a later
node) runs in each.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from vkumd.framework.frontends.onnx.errors import HostStepCall, Refusal, UnsupportedModelError

Factory = Callable[[onnx.ModelProto, str], Any]
"""``(model, name) -> OnnxModel``: how a segment becomes a model (given by model.py)."""
# Rest segments kept per model (one per distinct shape of the host step's outputs).
MAX_SHAPES = 16


def first_host_step(exc: UnsupportedModelError) -> HostStepCall | None:
    """The first host step among an import's refusals, when segmenting can help: every other
    refusal only lacks a value (the segments specialize themselves on it)."""
    steps = [r.host_step for r in exc.refusals if r.host_step is not None]
    if not steps or not all(r.host_step is not None or r.needs for r in exc.refusals):
        return None
    return steps[0]


def _reads(node: onnx.NodeProto) -> set[str]:
    """The names ``node`` reads, those its subgraphs (If, Loop, Scan bodies) read included."""
    names = {n for n in node.input if n}
    for attr in node.attribute:
        graphs = list(attr.graphs) + ([attr.g] if attr.HasField("g") else [])
        for g in graphs:
            for inner in g.node:
                names |= _reads(inner)
    return names


def _closure(nodes: list[onnx.NodeProto], targets: Iterable[str], stop: set[str]
             ) -> list[onnx.NodeProto]:
    """The nodes ``targets`` are computed from (not through names in ``stop``), in order."""
    producer = {out: node for node in nodes for out in node.output if out}
    keep: set[int] = set()
    todo = [t for t in targets if t not in stop]
    while todo:
        node = producer.get(todo.pop())
        if node is None or id(node) in keep:
            continue
        keep.add(id(node))
        todo.extend(n for n in _reads(node) if n not in stop)
    return [node for node in nodes if id(node) in keep]


class Segmented:
    """A model that runs in segments around its first host step (see the module notes).

    Args:
        source: the whole model.
        call: its first host step.
        make: how a segment becomes a model.
        name: how errors name the model.

    Raises:
        UnsupportedModelError: the type of a value the host step reads cannot be inferred
            (the prefix must declare it as an output).
    """

    def __init__(self, source: onnx.ModelProto, call: HostStepCall, make: Factory,
                 name: str) -> None:
        self._source, self.call, self._make, self._name = source, call, make, name
        self._lock = threading.Lock()
        self._rests: dict[tuple[Any, ...], Any] = {}
        g = source.graph
        self._inputs = {vi.name: vi for vi in g.input}
        self._initializers = {t.name: t for t in g.initializer}
        self.output_names = [vi.name for vi in g.output]
        computed = [n for n in call.inputs if n and n not in self._inputs
                    and n not in self._initializers]
        self.prefix = (make(self._submodel(_closure(list(g.node), computed, set()), [],
                                           self._typed(computed)), f"{name} (before "
                            f"{call.op})") if computed else None)

    def _typed(self, names: list[str]) -> list[onnx.ValueInfoProto]:
        """Value infos of ``names`` with the element types ONNX's shape inference gives."""
        inferred = onnx.shape_inference.infer_shapes(self._source)
        known = {vi.name: vi for vi in (*inferred.graph.value_info, *inferred.graph.output)}
        out = []
        for n in names:
            vi = known.get(n)
            elem = vi.type.tensor_type.elem_type if vi is not None else 0
            if not elem:
                raise UnsupportedModelError([Refusal(n, self.call.op, "the element type of "
                                                     "this input of a host step cannot be "
                                                     "inferred; declare it in value_info")],
                                            self._name)
            out.append(helper.make_tensor_value_info(n, elem, None))
        return out

    def _submodel(self, nodes: list[onnx.NodeProto], extra: list[onnx.ValueInfoProto],
                  outputs: list[onnx.ValueInfoProto]) -> onnx.ModelProto:
        """A model of ``nodes`` (the graph inputs and initializers they read, plus
        ``extra`` inputs) computing ``outputs``."""
        read = set().union(*(_reads(n) for n in nodes)) if nodes else set()
        read |= {vi.name for vi in outputs}
        inputs = [vi for name, vi in self._inputs.items()
                  if name in read and name not in self._initializers] + extra
        graph = helper.make_graph(nodes, self._source.graph.name or "segment", inputs, outputs,
                                  [t for n, t in self._initializers.items() if n in read])
        model = helper.make_model(graph, opset_imports=self._source.opset_import,
                                  ir_version=self._source.ir_version)
        model.functions.extend(self._source.functions)
        return model

    def _rest(self, produced: dict[str, np.ndarray]) -> Any:
        """The rest segment for host-step outputs of these shapes and types (kept), or None
        when the outputs need no node past the step."""
        key = tuple((n, a.shape, a.dtype.str) for n, a in produced.items())
        with self._lock:
            if key in self._rests:
                return self._rests[key]
        stop = set(produced)
        nodes = _closure([n for n in self._source.graph.node
                          if not set(n.output) & stop], self.output_names, stop)
        model = None
        if nodes:
            made = {out for node in nodes for out in node.output}
            outputs = [vi for vi in self._source.graph.output if vi.name in made]
            read = set().union(*(_reads(n) for n in nodes))
            extra = [helper.make_tensor_value_info(
                n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
                for n, a in produced.items() if n in read]
            model = self._make(self._submodel(nodes, extra, outputs),
                               f"{self._name} (after {self.call.op})")
        with self._lock:
            if len(self._rests) >= MAX_SHAPES:
                self._rests.pop(next(iter(self._rests)))
            self._rests[key] = model
        return model

    def run(self, inputs: dict[str, Any], how: str, prepare: Callable[[Any], None]
            ) -> tuple[dict[str, np.ndarray], list[Any]]:
        """The outputs by ONNX name, and the segments that ran (the prefix and the rest,
        where present).

        Args:
            inputs: an array per ONNX input name (checked by the segments).
            how: ``"__call__"`` (on the device) or ``"evaluate"`` (the IR in float64).
            prepare: called on each segment before it runs (hands it the context).
        """
        env: dict[str, Any] = dict(inputs)
        ran = []
        if self.prefix is not None:
            prepare(self.prefix)
            env.update(getattr(self.prefix, how)(
                **{n: inputs[n] for n in self.prefix.input_names if n in inputs}))
            ran.append(self.prefix)
        args = [self._array(env, n) if n else None for n in self.call.inputs]
        results = self.call.run(args)
        produced = {n: np.asarray(r) for n, r in zip(self.call.outputs, results, strict=False)
                    if n}
        env.update(produced)
        rest = self._rest(produced)
        if rest is not None:
            prepare(rest)
            env.update(getattr(rest, how)(**{n: env[n] for n in rest.input_names}))
            ran.append(rest)
        return {n: self._array(env, n) for n in self.output_names}, ran

    def _array(self, env: dict[str, Any], name: str) -> np.ndarray:
        if name in env:
            return np.asarray(env[name])
        return numpy_helper.to_array(self._initializers[name])
