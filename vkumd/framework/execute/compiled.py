"""``CompiledGraph``: a graph lowered to kernel launches, its memory allocated per shape bucket.

Example::

    compiled = CompiledGraph(graph, ctx)
    y, = compiled(x=np.ones((37, 384), np.float32))   # allocates the seq=64 bucket, records 37
    y, = compiled(x=np.ones((50, 384), np.float32))   # the same memory, a recording for 50
    y, = compiled(x=np.ones((37, 384), np.float32))   # replays the recording for 37
    print(compiled.summary())
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.execute.bucket import Bucket, BucketStats, planning_graph
from vkumd.framework.execute.buckets import BucketPolicy, BucketSpec, bind_symbols
from vkumd.framework.execute.lower import check_recordable
from vkumd.framework.execute.recording import Recording
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.memory import format_bytes, updated_value
from vkumd.framework.tensor import Tensor
from vkumd.vk.handle import Handle

# Tensors remembered per input (held, so their identity stays theirs) to tell a caller who
# refills the same tensors, even alternating a few, from one who brings new ones each call.
RECENT_INPUTS = 4


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise VkumdValueError(f"{name}={value!r}: keep at least 1")
    return value


def _given(name: str, t: Any, shape: tuple[Any, ...], dtype: Any, ctx: Any) -> Tensor:
    """``t``, checked to stand for graph weight ``name`` of ``shape`` and ``dtype``."""
    if not isinstance(t, Tensor):
        raise VkumdTypeError(f"CompiledGraph: weights[{name!r}] is {type(t).__name__}, not a "
                             "vkumd Tensor")
    if t.context is not ctx or tuple(t.shape) != shape or t.dtype is not dtype:
        raise VkumdValueError(f"CompiledGraph: weights[{name!r}] is {t.dtype.name} "
                              f"{tuple(t.shape)}; the graph's weight is {dtype.name} {shape}"
                              f"{'' if t.context is ctx else ', on another context'}")
    return t


class CompiledGraph(Handle):
    """``graph`` compiled for ``ctx``: call it with its inputs by name, get its outputs.

    Each symbol's size is rounded up to a bucket, and a bucket owns the memory: input and
    output tensors and an arena holding every intermediate, sized for the bucket and
    allocated once. The launches are lowered at the call's TRUE sizes, over true-shaped
    views at the start of each value's bucket-sized slot, captured with ``ctx.capture()``
    once per distinct set of true sizes and replayed on every later call with those sizes.
    So push constants carry the true sizes, no padding is ever computed, and results equal
    an exact-shape run's bit for bit, while calls of many sizes share one bucket's memory.

    Returned tensors are views of the bucket's own output memory: the next call of the same
    bucket from the same thread overwrites them (copy with ``ops.copy`` to keep one). They
    stay valid after the compiled graph is released.

    Threads: any number may call one compiled graph at once, each on its current stream.
    Each thread gets buckets of its own (memory, recordings, recently passed inputs), so
    concurrent calls never share an input tensor, arena, output or command buffer, and a
    call's results are overwritten only by that thread's next call of the bucket. A short
    lock guards the bookkeeping (finding or making the bucket and the recording); writing
    the inputs and submitting run outside it. ``max_recordings`` bounds the buckets of all
    threads together (give ``threads x shapes`` to avoid recording again); a bucket evicted
    while its thread is inside a call is freed as that call ends, never under it.

    Inputs are copied into the bucket's input tensors, except a vkumd tensor passed for the
    same input in one of the thread's last few calls: that one is read where it is, through a
    recording over it (made once, then replayed while the same tensor keeps coming, and
    kept like a size-recording; it pins the tensor's memory until it is evicted). So a
    caller that refills the same input tensors pays no copy, and one that brings a new
    tensor every call pays no re-recording. An input an op updates in place (``kv_write``'s
    cache), given as a vkumd tensor (or view), is always read and written where it is, so the
    caller's tensor holds the update after the call; given as an array, it is copied in
    and the update is seen only through the op's returned result.

    Args:
        graph: a checked graph whose node list is the schedule.
        ctx: a :class:`vkumd.Context`.
        buckets: per symbol, a list of bucket sizes or None for exact sizes; symbols not
            named get powers of two.
        max_recordings: buckets kept allocated at once, over every calling thread; the least
            recently used is released (its memory and recordings) when another is needed.
        sizes_per_bucket: size-recordings (command buffers) each bucket keeps; the least
            recently used is released when a call brings other true sizes. At most
            ``max_recordings * sizes_per_bucket`` recordings are held in all.
        weights: device tensors already holding graph weights, by weight name: each is read
            where it is instead of uploading a copy (so a model that also runs eagerly keeps
            one copy of its weights). The caller keeps them alive while the compiled graph
            runs and frees them; weights not named here are uploaded and owned, and names
            the graph has no weight of (one the passes removed) are ignored.

    Raises:
        UnsupportedOpError: a node whose op has no lowering (naming the node).
        GraphError: the graph does not check.
        VkumdValueError: a bad bucket list, or a bound < 1; a given weight tensor of another
            shape, dtype or context than the graph's weight.
        VkumdTypeError: a given weight that is not a vkumd tensor.
    """

    def __init__(self, graph: Graph, ctx: Any, *, buckets: BucketSpec | None = None,
                 max_recordings: int = 8, sizes_per_bucket: int = 8,
                 weights: Mapping[str, Tensor] | None = None) -> None:
        super().__init__()
        self.max_recordings = _positive("max_recordings", max_recordings)
        self.sizes_per_bucket = _positive("sizes_per_bucket", sizes_per_bucket)
        graph.check()
        check_recordable(graph)
        self.graph = graph
        self.context = ctx
        self.policy = BucketPolicy(graph, buckets)
        self._plan_graph = planning_graph(graph)
        self._buckets: OrderedDict[tuple, Bucket] = OrderedDict()
        self.allocated = 0
        """Buckets allocated so far (one evicted and needed again counts twice)."""
        self.evicted = 0
        """Buckets released to make room for another."""
        self.calls = 0
        self._recorded_gone = 0  # size-recordings of buckets released
        # Guards the buckets, their recordings, eviction and the counters; never held while
        # inputs are written or work is submitted.
        self._lock = threading.Lock()
        # Per thread, per input, the latest bindable tensors (dropped with the thread).
        self._local = threading.local()
        self._input_dtypes = {v.name: v.dtype for v in graph.inputs}
        # Inputs an op updates in place (kv_write's cache): always read where they are.
        self._updated = {v.name for node in graph.nodes
                         if (v := updated_value(node)) is not None and v.name is not None
                         and any(v is i for i in graph.inputs)}
        self.weights: dict[int, Tensor] = {}
        """A device tensor per weight value id."""
        self._owned: list[Tensor] = []  # the weights uploaded here (the rest are the caller's)
        self.handle = True
        given = dict(weights or {})
        try:
            for v in graph.weights:
                if v.name in given:
                    self.weights[v.id] = _given(v.name, given[v.name], tuple(v.shape), v.dtype,
                                                ctx)
                    continue
                self.weights[v.id] = ctx.tensor(np.asarray(v.data), dtype=v.dtype)
                self._owned.append(self.weights[v.id])
        except BaseException:
            self.release()
            raise

    @property
    def recorded(self) -> int:
        """Size-recordings made so far, over every bucket held now and released."""
        return self._recorded_gone + sum(b.recorded for b in self._buckets.values())

    # -- calling ---------------------------------------------------------------------------
    def __call__(self, **inputs: Any) -> list[Tensor]:
        """Run the graph on ``inputs`` (numpy arrays or vkumd Tensors, by input name).

        Returns:
            The outputs, in the graph's order, as tensors of their true shapes.

        Raises:
            VkumdValueError: a missing or unknown input, a shape the graph does not take
                (two inputs that disagree on a symbol are both named), a size past the
                largest listed bucket, a released graph; integer values outside the input's
                type (never wrapped).
            VkumdTypeError: an input that is not an array or tensor; an array or tensor of
                another dtype than the input's, refused as ``ctx.tensor`` refuses (nothing is
                narrowed: :func:`vkumd.framework.dtypes.host_array`).
        """
        self._check_open()
        shapes = {}
        declared = self._input_dtypes
        for name, value in inputs.items():
            shape = getattr(value, "shape", None)
            if shape is None:
                raise VkumdTypeError(f"input {name!r} is a {type(value).__name__}; pass a "
                                     "numpy array or a vkumd Tensor")
            expected = declared.get(name)
            if expected is not None:  # an unknown name is refused with the shapes below
                if isinstance(value, Tensor):
                    if value.dtype is not expected:
                        raise dtypes.mismatch(f"input {name!r}", value.dtype, expected)
                elif not dtypes.stored_exactly(getattr(value, "dtype", None), expected):
                    # Data of the input's own type is read when it is written; anything else
                    # is converted (or refused) by the one rule now, before any memory moves.
                    inputs[name] = dtypes.host_array(value, expected=expected,
                                                     what=f"input {name!r}")[0]
            shapes[name] = tuple(shape)
        bucket, recording = self._checkout(shapes, self._repeated(inputs), call=True)
        try:
            for v in self.graph.inputs:
                recording.write_input(v.name, inputs[v.name])
            bucket.replay(recording)
        except BaseException:
            with self._lock:
                self.calls -= 1
            raise
        finally:
            self._checkin(bucket)
        return list(recording.outputs)

    def _repeated(self, inputs: dict[str, Any]) -> dict[str, Tensor]:
        """The inputs to read in place: plain vkumd tensors of this context and the input's
        dtype that one of this thread's last :data:`RECENT_INPUTS` calls passed for the name
        (views, such as an earlier call's results or :meth:`input_tensors`, are never
        bound: they are this graph's own memory)."""
        dtypes_of = self._input_dtypes
        bound: dict[str, Tensor] = {}
        recent_of: dict[str, list[Tensor]] | None = None
        for name, t in inputs.items():
            if (name in self._updated and isinstance(t, Tensor) and t.context is self.context
                    and t.binding is not None and t.dtype is dtypes_of.get(name)):
                bound[name] = t  # the caller's tensor must hold the update
                continue
            if not (type(t) is Tensor and t.context is self.context and t.binding is not None
                    and t.dtype is dtypes_of.get(name)):
                continue
            if recent_of is None:
                recent_of = getattr(self._local, "recent", None)
                if recent_of is None:
                    recent_of = self._local.recent = {}
            recent = recent_of.setdefault(name, [])
            if any(r is t for r in recent):
                bound[name] = t
                recent.remove(t)
            recent.append(t)
            del recent[:-RECENT_INPUTS]
        return bound

    def input_tensors(self, **shapes: tuple[int, ...]) -> dict[str, Tensor]:
        """The input tensors of the recording that serves these input shapes, recording it
        if needed: true-shaped views of the bucket's memory. Fill them (``Tensor.write``, or
        ops with ``out=``) and pass them back to the call: they are bound without a copy.

        Raises:
            VkumdValueError: as :meth:`__call__` for shapes it does not take.
        """
        bucket, recording = self._checkout({k: tuple(v) for k, v in shapes.items()})
        self._checkin(bucket)
        return dict(recording.inputs)

    def _check_open(self) -> None:
        if self.released:
            raise VkumdValueError("this CompiledGraph was released; compile the graph again")

    def _checkout(self, shapes: dict[str, tuple[int, ...]],
                  bound: dict[str, Tensor] | None = None,
                  call: bool = False) -> tuple[Bucket, Recording]:
        """This thread's bucket for ``shapes`` and its recording, marked in use until
        :meth:`_checkin` (so eviction cannot free it under the call); ``call`` counts a
        call."""
        true_env = bind_symbols(self.graph, shapes)
        env = self.policy.apply(true_env)
        with self._lock:
            self._check_open()  # here too: another thread may have released the graph
            bucket = self._bucket(env)
            recording = bucket.recording(true_env, bound)
            # Only the bucket's own thread changes ``users``, and only evictions read it,
            # under this lock: see _checkin.
            bucket.users += 1
            self.calls += call
        return bucket, recording

    def _checkin(self, bucket: Bucket) -> None:
        """End a use of ``bucket``; free it if it was evicted meanwhile.

        Without the lock: ``users`` drops before ``retired`` is read, and an eviction sets
        ``retired`` before it reads ``users``, so at least one side sees the other and frees
        the bucket (twice is harmless: both free it under the lock).
        """
        bucket.users -= 1
        if bucket.retired:
            with self._lock:
                if not bucket.users:
                    bucket.release()

    def _retire(self, bucket: Bucket) -> None:
        """Free ``bucket`` now, or as the call using it ends (under the lock)."""
        self._recorded_gone += bucket.recorded
        bucket.retired = True
        if not bucket.users:
            bucket.release()

    def _bucket(self, env: dict[str, int]) -> Bucket:
        # Keyed by thread too: a thread's results live in its own bucket until its next call.
        key = (tuple(sorted(env.items())), threading.get_ident())
        found = self._buckets.get(key)
        if found is not None:
            self._buckets.move_to_end(key)
            return found
        while len(self._buckets) >= self.max_recordings:
            self._retire(self._buckets.popitem(last=False)[1])
            self.evicted += 1
        made = Bucket(self.context, self.graph, self._plan_graph, self.weights, env,
                      self.sizes_per_bucket)
        self._buckets[key] = made
        self.allocated += 1
        return made

    # -- reporting -------------------------------------------------------------------------
    def buckets(self) -> list[BucketStats]:
        """Statistics of the buckets held now (every thread's), least recently used first."""
        with self._lock:
            return [b.stats() for b in self._buckets.values()]

    def bucket_memory(self) -> Iterator[Bucket]:
        """The buckets held now (every thread's), least recently used first (for tests and
        tools)."""
        with self._lock:
            return iter(list(self._buckets.values()))

    def summary(self) -> str:
        """A text table: per bucket, its size-recordings, the nodes, kernels launched and
        barriers (of the latest size-recording), arena bytes against the intermediates'
        sum, and calls served."""
        lines = [f"CompiledGraph {self.graph.name}: {len(self.graph.nodes)} nodes, "
                 f"{len(self._buckets)} bucket(s) of at most {self.max_recordings} "
                 f"({self.evicted} evicted), {self.recorded} size-recording(s) made, "
                 f"{self.calls} call(s)",
                 f"{'bucket':<28}{'sizes':>6}{'nodes':>6}{'kernels':>8}{'barriers':>9}"
                 f"{'arena':>12}{'intermediates':>15}{'replays':>8}"]
        for s in self.buckets():
            name = ", ".join(f"{k}={v}" for k, v in sorted(s.bindings.items())) or "(static)"
            lines.append(f"{name:<28}{len(s.sizes):>6}{s.nodes:>6}{s.launches:>8}"
                         f"{s.barriers:>9}{format_bytes(s.arena_bytes):>12}"
                         f"{format_bytes(s.intermediate_bytes):>15}{s.replays:>8}")
            if s.bindings:
                named = [", ".join(f"{k}={v}" for k, v in sorted(e.items())) for e in s.sizes]
                held = "; ".join(dict.fromkeys(named))  # an in-place twin shares its sizes
                twins = f", {s.in_place} reading inputs in place" if s.in_place else ""
                lines.append(f"  recorded at {held} (at most {self.sizes_per_bucket}, "
                             f"{s.evicted} evicted{twins})")
        return "\n".join(lines)

    # -- lifetime --------------------------------------------------------------------------
    def _release(self) -> None:
        # A call already inside keeps its bucket (and the weights its recording pins) until
        # it ends; later calls are refused.
        with self._lock:
            for bucket in self._buckets.values():
                self._retire(bucket)
            self._buckets.clear()
        self._local = threading.local()
        for t in self._owned:
            t.release()
        self._owned.clear()
        self.weights.clear()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return (f"<vkumd.CompiledGraph {self.graph.name}: {len(self._buckets)} "
                f"bucket(s){state}>")
