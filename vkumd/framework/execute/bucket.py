"""One bucket of a compiled graph: the memory for every call whose sizes round up to it.

Allocated once per bucket (symbol sizes): input tensors of the bucket's shapes, arenas
holding every intermediate at the offsets :func:`plan_memory` gives for those sizes (one,
unless the intermediates pass what the device binds in one buffer), and a tensor per
output. Each distinct set of true sizes a call brings gets its own
:class:`~vkumd.framework.execute.recording.Recording` over that memory, kept in a bounded
least-recently-used cache: recording again costs the ops' host path, about 70 us a launch
(8 ms for MiniLM's 122 launches at batch 32, against 0.3 ms for a replay and 0.7 s of
device work; ``LP_NUM_THREADS=0``, thread CPU), so a workload cycling over many lengths
re-records instead of growing without bound.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from vkumd.framework.execute.arena import Arena
from vkumd.framework.execute.lower import VIEW_OPS
from vkumd.framework.execute.recording import Recording
from vkumd.framework.graph.ir import Graph, Node, Value, ValueKind
from vkumd.framework.graph.memory import MemoryPlan, plan_memory, updated_value
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
    """What one bucket holds and does.

    Attributes:
        bindings: the bucket's symbol sizes (what its memory is sized for).
        sizes: the true symbol sizes of each size-recording held, least recently used first.
        nodes: nodes of the graph.
        launches: dispatches and copies of the most recently used size-recording.
        barriers: barriers the hazard tracker put between them.
        arena_bytes: the arenas' size together.
        intermediate_bytes: the intermediates' sizes summed (memory without reuse).
        replays: calls served.
        recorded: size-recordings made (one evicted and needed again counts twice).
        evicted: size-recordings released to make room for another.
        in_place: of the recordings held, those reading caller tensors in place (each also
            listed in ``sizes``, with the sizes it was recorded at).
    """

    bindings: dict[str, int]
    sizes: list[dict[str, int]]
    nodes: int
    launches: int
    barriers: int
    arena_bytes: int
    intermediate_bytes: int
    replays: int
    recorded: int
    evicted: int
    in_place: int = 0


def binding_limit(context: Any) -> int:
    """The most bytes one arena may hold on ``context``'s device: what a kernel binds of
    one buffer (``maxStorageBufferRange``); a seam that tests narrow."""
    return int(context.caps.max_storage_buffer_range)


class Bucket:
    """The tensors and arenas of one bucket, and its size-recordings.

    Args:
        context: the compiled graph's context.
        graph: the graph (its node list is the schedule).
        plan_graph: :func:`planning_graph` of it.
        weights: a device tensor per weight value id (shared by every bucket).
        env: the bucket's size for every symbol.
        max_sizes: size-recordings kept at once; the least recently used is released when
            another is needed.

    Attributes:
        inputs: the bucket-shaped tensor per input name.
        owned: the bucket-shaped tensor per output value id (what nodes write outputs to).
        returned: per graph output that is an input or weight, the tensor it is copied to.
        users: calls inside now (the compiled graph counts them under its lock).
        retired: evicted; the last user releases it.
    """

    def __init__(self, context: Any, graph: Graph, plan_graph: Graph,
                 weights: Mapping[int, Tensor], env: Mapping[str, int],
                 max_sizes: int) -> None:
        self.context = context
        self.graph = graph
        self.env = dict(env)
        self.weights = weights
        self.max_sizes = max_sizes
        self.plan: MemoryPlan = plan_memory(plan_graph, env,
                                            binding_limit=binding_limit(context))
        self.inputs: dict[str, Tensor] = {}
        self.owned: dict[int, Tensor] = {}
        self.returned: dict[int, Tensor] = {}
        self.replays = 0
        self.recorded = 0
        self.evicted = 0
        self.users = 0
        self.retired = False
        self._kept = {n.id for n in plan_graph.nodes}
        self._recordings: OrderedDict[tuple, Recording] = OrderedDict()
        self.arenas: list[Arena] = []
        try:
            for size in self.plan.arena_sizes:
                self.arenas.append(Arena(context, size))
            self._allocate({v.id for v in plan_graph.values() if v.kind is ValueKind.OUTPUT})
        except BaseException:
            self.release()
            raise

    def _allocate(self, output_ids: set[int]) -> None:
        dims = self.graph.dims
        for v in self.graph.inputs:
            self.inputs[v.name] = self.context.empty(dims.bind(v.shape, self.env), v.dtype)
        for node in self.graph.nodes:
            if updated_value(node) is not None:
                continue  # its output is the updated input's memory
            for out in node.outputs:
                if self.kept(node) and out.id in output_ids:
                    self.owned[out.id] = self.context.empty(dims.bind(out.shape, self.env),
                                                            out.dtype)
        for index, v in enumerate(self.graph.outputs):
            if v.producer is None:
                self.returned[index] = self.context.empty(dims.bind(v.shape, self.env),
                                                          v.dtype)

    def kept(self, node: Node) -> bool:
        """Whether ``node`` is lowered (False: a reshape folded into a view of its input)."""
        return node.id in self._kept

    def slot(self, value: Value) -> tuple[Tensor, int]:
        """The arena holding an intermediate's slot, and the slot's offset in it."""
        allocation = self.plan.allocations[value.id]
        return self.arenas[allocation.arena].base, allocation.offset

    def recording(self, env: Mapping[str, int],
                  bound: Mapping[str, Tensor] | None = None) -> Recording:
        """The size-recording for the true sizes ``env`` (reading the caller tensors
        ``bound`` in place of those inputs), recorded now if not held.

        Raises:
            GraphError, UnsupportedOpError: as :class:`Recording`.
        """
        key = (tuple(sorted(env.items())),
               tuple((n, id(t), t.binding) for n, t in sorted((bound or {}).items())))
        found = self._recordings.get(key)
        if found is not None:
            self._recordings.move_to_end(key)
            return found
        while len(self._recordings) >= self.max_sizes:
            self._recordings.popitem(last=False)[1].release()
            self.evicted += 1
        made = Recording(self, env, bound)
        self._recordings[key] = made
        self.recorded += 1
        return made

    def replay(self, recording: Recording) -> None:
        """Submit one of this bucket's size-recordings on the current stream (a call)."""
        recording.replay()
        self.replays += 1

    def recordings(self) -> Iterator[Recording]:
        """The size-recordings held now, least recently used first."""
        return iter(list(self._recordings.values()))

    def stats(self) -> BucketStats:
        """This bucket's :class:`BucketStats`."""
        latest = next(reversed(self._recordings.values()), None)
        return BucketStats(dict(self.env), [r.env for r in self._recordings.values()],
                           len(self.graph.nodes), latest.launches if latest else 0,
                           latest.barriers if latest else 0, self.plan.arena_bytes,
                           self.plan.intermediate_bytes, self.replays, self.recorded,
                           self.evicted, sum(1 for r in self._recordings.values() if r.bound))

    def release(self) -> None:
        """Release every size-recording (waiting for replays in flight), then free the
        arena and the input tensors. Output tensors are not freed here: returned results
        are views of them, which the caller may still hold; they go with the last view.
        Safe to call twice."""
        for recording in self._recordings.values():
            recording.release()
        self._recordings.clear()
        for arena in self.arenas:
            arena.release()
        for t in self.inputs.values():
            t.release()
        self.inputs.clear()
        self.owned.clear()
        self.returned.clear()
