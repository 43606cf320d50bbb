"""One bucket of a compiled graph: its tensors, its arena and its captured launches.

Built once per bucket (symbol sizes): inputs get tensors of the bucket's shapes,
intermediates become views into one arena at the offsets :func:`plan_memory` gives, reshapes
become views of their input, outputs get tensors of their own. The nodes are then lowered
inside ``ctx.capture()``, so every later call of the bucket is one ``replay()``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.framework import dtypes, ops
from vkumd.framework.execute.arena import Arena, TensorView, view
from vkumd.framework.execute.lower import VIEW_OPS, lowering_for
from vkumd.framework.execute.padding import attention_key_symbol
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.ir import Graph, Node, ValueKind
from vkumd.framework.graph.memory import MemoryPlan, plan_memory
from vkumd.framework.tensor import Tensor


def planning_graph(graph: Graph) -> Graph:
    """``graph`` with each reshape folded into its input, for the memory planner.

    A reshape's output is a view of its input's bytes, so the input must live as long as
    either is read: readers of the reshape read the input in the copy. A reshape that
    returns an input's or a weight's bytes stays (it is lowered as a copy, since outputs
    never alias what the caller owns).
    """
    g = graph.copy()
    for node in list(g.nodes):
        if node.op not in VIEW_OPS:
            continue
        src, out = node.inputs[0], node.outputs[0]
        returned = any(v is out for v in g.outputs)
        if returned and src is not None and src.producer is None:
            continue
        g.replace_uses(out, src)
        g.remove_node(node)
    return g


@dataclass(frozen=True)
class BucketStats:
    """What one recording holds and does.

    Attributes:
        bindings: the bucket's symbol sizes.
        nodes: nodes of the graph.
        launches: dispatches and copies recorded.
        barriers: barriers the hazard tracker put between them.
        arena_bytes: the arena's size.
        intermediate_bytes: the intermediates' sizes summed (memory without reuse).
        replays: calls served.
    """

    bindings: dict[str, int]
    nodes: int
    launches: int
    barriers: int
    arena_bytes: int
    intermediate_bytes: int
    replays: int


class Recording:
    """The tensors and the captured graph of one bucket.

    Args:
        context: the compiled graph's context.
        graph: the graph (its node list is the schedule).
        plan_graph: :func:`planning_graph` of it.
        weights: a device tensor per weight value id.
        env: the bucket's size for every symbol.
        padded: symbols that may be padded (attention over them gets ``key_lengths``).

    Raises:
        GraphError, UnsupportedOpError: a node cannot be lowered (naming it).
    """

    def __init__(self, context: Any, graph: Graph, plan_graph: Graph,
                 weights: Mapping[int, Tensor], env: Mapping[str, int],
                 padded: frozenset[str]) -> None:
        self.context = context
        self.graph = graph
        self.env = dict(env)
        self.plan: MemoryPlan = plan_memory(plan_graph, env)
        self.arena = Arena(context, self.plan.arena_bytes)
        self.inputs: dict[str, Tensor] = {}
        self.outputs: list[Tensor] = []
        self.lengths: dict[tuple[str, int], Tensor] = {}
        self.captured: Any = None
        self._owned: list[Tensor] = []
        self._kept = {n.id for n in plan_graph.nodes}
        self._kinds = {v.id: v.kind for v in plan_graph.values()}
        try:
            self.tensors = self._make_tensors(weights)
            self._capture(padded)
        except BaseException:
            self.release()
            raise

    def shape_of(self, value: Any) -> tuple[int, ...]:
        """A value's shape in this bucket."""
        return self.graph.dims.bind(value.shape, self.env)

    def _new(self, shape: tuple[int, ...], dtype: dtypes.DType) -> Tensor:
        made = self.context.empty(shape, dtype)
        self._owned.append(made)
        return made

    def _make_tensors(self, weights: Mapping[int, Tensor]) -> dict[int, Tensor]:
        tensors: dict[int, Tensor] = dict(weights)
        for v in self.graph.inputs:
            tensors[v.id] = self.inputs[v.name] = self._new(self.shape_of(v), v.dtype)
        for node in self.graph.nodes:
            for out in node.outputs:
                shape = self.shape_of(out)
                if node.id not in self._kept:  # a folded reshape: its input's bytes
                    tensors[out.id] = view(tensors[node.inputs[0].id], shape)
                elif self._kinds[out.id] is ValueKind.OUTPUT:
                    tensors[out.id] = self._new(shape, out.dtype)
                else:
                    offset = self.plan.allocations[out.id].offset
                    tensors[out.id] = self.arena.view(offset, shape, out.dtype)
        for v in self.graph.outputs:
            if v.producer is None:  # an input or weight returned: copied, never aliased
                self.outputs.append(self._new(self.shape_of(v), v.dtype))
            else:
                self.outputs.append(tensors[v.id])
        return tensors

    def _inputs_of(self, node: Node, padded: frozenset[str]) -> list[Any]:
        ins = [self.tensors[v.id] if v is not None else None for v in node.inputs]
        if node.op == "attention" and ins[3] is None:
            symbol = attention_key_symbol(self.graph, node)
            if symbol is not None and symbol in padded:
                # Padded keys are masked by the true length, written before each replay.
                batch = ins[0].shape[0]
                key = (symbol, batch)
                if key not in self.lengths:
                    self.lengths[key] = self._new((batch,), dtypes.int32)
                ins[3] = self.lengths[key]
        return ins

    def _capture(self, padded: frozenset[str]) -> None:
        with self.context.capture() as captured:
            self.captured = captured
            ranges = self.arena.ranges()
            if ranges:
                captured.track_overlaps(ranges)
            for node in self.graph.nodes:
                if node.id not in self._kept:
                    continue
                outs = [self.tensors[v.id] for v in node.outputs]
                try:
                    if node.op in VIEW_OPS:  # a reshape returning an input's bytes
                        src = self.tensors[node.inputs[0].id]
                        ops.copy(view(src, outs[0].shape), out=outs[0])
                    else:
                        lowering_for(node)(node, self._inputs_of(node, padded), outs)
                except GraphError:
                    raise
                except Exception as exc:
                    raise GraphError(f"lowering failed: {exc}", node.describe()) from exc
            for v, out in zip(self.graph.outputs, self.outputs, strict=True):
                if v.producer is None:
                    ops.copy(self.tensors[v.id], out=out)

    @property
    def launches(self) -> int:
        """Dispatches and copies captured."""
        return self.captured.dispatches + self.captured.copies

    def replay(self, true_env: Mapping[str, int]) -> None:
        """Write the true key lengths, then submit the captured work on the current stream."""
        for (symbol, batch), t in self.lengths.items():
            t.write(_full(batch, true_env.get(symbol, self.env[symbol])))
        if self.launches:
            self.captured.replay()

    def stats(self) -> BucketStats:
        """This recording's :class:`BucketStats`."""
        return BucketStats(dict(self.env), len(self.graph.nodes), self.launches,
                           self.captured.barriers, self.plan.arena_bytes,
                           self.plan.intermediate_bytes, self.captured.replays)

    def release(self) -> None:
        """Wait for replays in flight, then free the graph, the arena and the tensors made
        here (outputs the caller still holds stay valid). Safe to call twice."""
        if self.captured is not None:
            self.captured.release()
        self.arena.release()
        # Returned outputs (and the tensors returned views point into) belong to the caller.
        returned = {id(t.base if isinstance(t, TensorView) else t) for t in self.outputs}
        for t in self._owned:
            if id(t) not in returned:
                t.release()
        self._owned.clear()
        self.lengths.clear()


def _full(n: int, value: int) -> np.ndarray:
    return np.full((n,), value, dtype=np.int32)
