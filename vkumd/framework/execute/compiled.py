"""``CompiledGraph``: a graph lowered to kernel launches, recorded once per shape bucket.

Example::

    compiled = CompiledGraph(graph, ctx)
    y, = compiled(x=np.ones((37, 384), np.float32))   # records the seq=64 bucket, replays it
    y, = compiled(x=np.ones((50, 384), np.float32))   # replays the same recording
    print(compiled.summary())
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute.buckets import BucketPolicy, BucketSpec, bind_symbols
from vkumd.framework.execute.lower import check_lowerable
from vkumd.framework.execute.padded_io import RowIndices, read_output, write_input
from vkumd.framework.execute.padding import leaky_symbols
from vkumd.framework.execute.recording import BucketStats, Recording, planning_graph
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.memory import format_bytes
from vkumd.framework.tensor import Tensor
from vkumd.vk.handle import Handle


class CompiledGraph(Handle):
    """``graph`` compiled for ``ctx``: call it with its inputs by name, get its outputs.

    Each distinct bucket of symbol sizes is lowered once: its launches are captured with
    ``ctx.capture()`` over an arena holding every intermediate, and replayed on every call of
    that bucket. Symbols are rounded up to their bucket; inputs are zero-padded to it and the
    outputs cut back to the true shapes. A symbol whose padding would leak into results
    (see :mod:`vkumd.framework.execute.padding`) is recorded at exact sizes instead.

    Returned tensors may be the recording's own output memory: the next call of the same
    bucket overwrites them (copy with ``ops.copy`` to keep one). They stay valid after the
    compiled graph is released.

    Args:
        graph: a checked graph whose node list is the schedule.
        ctx: a :class:`vkumd.Context`.
        buckets: per symbol, a list of bucket sizes or None for exact sizes; symbols not
            named get powers of two.
        max_recordings: buckets kept recorded at once; the least recently used is released
            when another is needed.

    Raises:
        UnsupportedOpError: a node whose op has no lowering (naming the node).
        GraphError: the graph does not check.
        VkumdValueError: a bad bucket list or ``max_recordings`` < 1.
    """

    def __init__(self, graph: Graph, ctx: Any, *, buckets: BucketSpec | None = None,
                 max_recordings: int = 8) -> None:
        super().__init__()
        if isinstance(max_recordings, bool) or not isinstance(max_recordings, int) \
                or max_recordings < 1:
            raise VkumdValueError(f"max_recordings={max_recordings!r}: keep at least 1")
        graph.check()
        check_lowerable(graph.nodes)
        self.graph = graph
        self.context = ctx
        self.max_recordings = max_recordings
        self.leaky = leaky_symbols(graph)
        """Symbols recorded at exact sizes, each with the reason."""
        self.policy = BucketPolicy(graph, buckets, exact=tuple(self.leaky))
        self._plan_graph = planning_graph(graph)
        self._recordings: OrderedDict[tuple, Recording] = OrderedDict()
        self.evicted = 0
        """Recordings released to make room for another bucket."""
        self.calls = 0
        self.recorded = 0
        """Recordings made so far (a bucket evicted and needed again counts twice)."""
        self.weights: dict[int, Tensor] = {}
        self._indices = RowIndices(ctx)
        self.handle = True
        try:
            for v in graph.weights:
                self.weights[v.id] = ctx.tensor(np.asarray(v.data), dtype=v.dtype)
        except BaseException:
            self.release()
            raise

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, **inputs: Any) -> list[Tensor]:
        """Run the graph on ``inputs`` (numpy arrays or vkumd Tensors, by input name).

        Returns:
            The outputs, in the graph's order, as tensors of their true shapes.

        Raises:
            VkumdValueError: a missing or unknown input, a shape the graph does not take
                (two inputs that disagree on a symbol are both named), a released graph.
            VkumdTypeError: an input tensor of the wrong dtype.
        """
        if self.released:
            raise VkumdValueError("this CompiledGraph was released; compile the graph again")
        shapes = {}
        for name, value in inputs.items():
            shape = getattr(value, "shape", None)
            if shape is None:
                raise VkumdTypeError(f"input {name!r} is a {type(value).__name__}; pass a "
                                     "numpy array or a vkumd Tensor")
            shapes[name] = tuple(shape)
        true_env = bind_symbols(self.graph, shapes)
        recording = self._recording(self.policy.apply(true_env))
        for v in self.graph.inputs:
            write_input(v.name, recording.inputs[v.name], inputs[v.name], self._indices)
        recording.replay(true_env)
        self.calls += 1
        return [read_output(t, self.graph.dims.bind(v.shape, true_env), self._indices)
                for v, t in zip(self.graph.outputs, recording.outputs, strict=True)]

    def input_tensors(self, **shapes: tuple[int, ...]) -> dict[str, Tensor]:
        """The input tensors of the recording that serves these input shapes, recording it
        if needed. Fill them (``Tensor.write``, or ops with ``out=``) and pass them back to
        the call: the recording's own tensors are bound without a copy. Their shapes are
        the bucket's, so the call then runs at the bucket's sizes.

        Raises:
            VkumdValueError: as :meth:`__call__` for shapes it does not take.
        """
        if self.released:
            raise VkumdValueError("this CompiledGraph was released; compile the graph again")
        env = self.policy.apply(bind_symbols(self.graph, {k: tuple(v) for k, v in
                                                          shapes.items()}))
        return dict(self._recording(env).inputs)

    def _recording(self, env: dict[str, int]) -> Recording:
        key = tuple(sorted(env.items()))
        found = self._recordings.get(key)
        if found is not None:
            self._recordings.move_to_end(key)
            return found
        while len(self._recordings) >= self.max_recordings:
            _, old = self._recordings.popitem(last=False)
            old.release()
            self.evicted += 1
        padded = frozenset(s for s in env if s not in self.leaky)
        made = Recording(self.context, self.graph, self._plan_graph, self.weights, env, padded)
        self._recordings[key] = made
        self.recorded += 1
        return made

    # -- reporting -------------------------------------------------------------------------
    def buckets(self) -> list[BucketStats]:
        """Statistics of the recordings held now, least recently used first."""
        return [r.stats() for r in self._recordings.values()]

    def recordings(self) -> Iterator[Recording]:
        """The recordings held now, least recently used first (for tests and tools)."""
        return iter(list(self._recordings.values()))

    def summary(self) -> str:
        """A text table: per bucket, nodes, kernels launched, barriers, arena bytes against
        the intermediates' sum, replays; then the symbols kept exact and why."""
        lines = [f"CompiledGraph {self.graph.name}: {len(self.graph.nodes)} nodes, "
                 f"{len(self._recordings)} recording(s) of at most {self.max_recordings} "
                 f"({self.evicted} evicted), {self.calls} call(s)",
                 f"{'bucket':<28}{'nodes':>6}{'kernels':>8}{'barriers':>9}{'arena':>12}"
                 f"{'intermediates':>15}{'replays':>8}"]
        for s in self.buckets():
            name = ", ".join(f"{k}={v}" for k, v in sorted(s.bindings.items())) or "(static)"
            lines.append(f"{name:<28}{s.nodes:>6}{s.launches:>8}{s.barriers:>9}"
                         f"{format_bytes(s.arena_bytes):>12}"
                         f"{format_bytes(s.intermediate_bytes):>15}{s.replays:>8}")
        for symbol, why in sorted(self.leaky.items()):
            lines.append(f"{symbol}: exact sizes ({why})")
        return "\n".join(lines)

    # -- lifetime --------------------------------------------------------------------------
    def _release(self) -> None:
        for recording in self._recordings.values():
            recording.release()
        self._recordings.clear()
        self._indices.release()
        for t in self.weights.values():
            t.release()
        self.weights.clear()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<vkumd.CompiledGraph {self.graph.name}: {len(self._recordings)} "
                f"recording(s){state}>")
