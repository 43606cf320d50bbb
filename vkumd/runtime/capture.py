"""Capture and replay, like CUDA graphs: record ops once, submit them again and again.

``with ctx.capture() as graph:`` makes a :class:`CaptureStream` current for the thread; ops
record into the graph's reusable command buffer instead of running. ``graph.replay()`` then
submits that command buffer on a stream with no Python-side recording at all. Inputs change
by writing new values into the tensors the capture used; every tensor the graph touches
stays allocated until the graph is released, even if the program drops it: the graph pins
its memory in the context's :class:`MemoryPins`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vkumd.errors import CaptureError, VkumdError, VkumdTypeError
from vkumd.runtime.memory import Allocation
from vkumd.runtime.stream import MemoryKey, Stream
from vkumd.submission.batch import Batch
from vkumd.submission.descriptors import BufferRange
from vkumd.submission.submitter import Submitter
from vkumd.vk.errors import DeviceLost, VulkanError

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext


class MemoryPins:
    """Counts, per memory range, the holders that need it to stay allocated.

    Holders are live graphs (which replay into their tensors' memory long after the program
    dropped them) and host views exported through DLPack. A tensor released while its
    memory is pinned parks the allocation here; the last :meth:`unpin` hands it back for the
    context to free.
    """

    def __init__(self) -> None:
        self._refs: dict[MemoryKey, int] = {}
        self._parked: dict[MemoryKey, Allocation] = {}
        # Host views are unpinned by the garbage collector, from whichever thread runs it.
        self._lock = threading.Lock()

    def pin(self, key: MemoryKey) -> None:
        """Add one holder of the memory at ``key``."""
        with self._lock:
            self._refs[key] = self._refs.get(key, 0) + 1

    def unpin(self, key: MemoryKey) -> Allocation | None:
        """Drop one holder of ``key``; return its parked allocation once none is left."""
        with self._lock:
            refs = self._refs.get(key, 0) - 1
            if refs > 0:
                self._refs[key] = refs
                return None
            self._refs.pop(key, None)
            return self._parked.pop(key, None)

    def park(self, key: MemoryKey, allocation: Allocation) -> bool:
        """Keep a released ``allocation`` while ``key`` is pinned; return whether it was."""
        with self._lock:
            if key not in self._refs:
                return False
            self._parked[key] = allocation
            return True


class Graph:
    """Work captured once and replayed with :meth:`replay`.

    Attributes:
        dispatches: dispatches captured.
        barriers: barriers the hazard tracker inserted between them.
        keys: memory ranges the graph reads or writes.
    """

    def __init__(self, context: RuntimeContext) -> None:
        self.context = context
        self.submitter = Submitter(context.device.handle, context.device.compute_queue,
                                   compute=True,
                                   push_descriptors=context.kernels.push_descriptors,
                                   timeline_semaphore=context.uses_timeline_semaphores,
                                   name="captured graph")
        self.commands: list[Any] = []
        self.pools: list[Any] = []
        self.keys: set[MemoryKey] = set()
        self.dispatches = 0
        self.barriers = 0
        self.copies = 0
        self.replays = 0
        self.released = False
        self.capturing = True
        """Whether the ``with ctx.capture()`` block that fills the graph is still open."""
        self._batch: Batch | None = None
        self._in_flight: dict[Stream, int] = {}
        self._lock = threading.Lock()

    def _check_usable(self, what: str) -> None:
        self.context.check_open(what)
        if self.released:
            raise VkumdError(f"{what}: the graph was released; capture it again")

    # -- capture ---------------------------------------------------------------------------
    def _record(self, what: str) -> Batch:
        self._check_usable(what)
        if not self.capturing:
            raise CaptureError(f"{what}: this graph's capture has ended; capture a new graph")
        if self._batch is None:
            # The first command orders the graph after whatever ran before each replay.
            self._batch = self.submitter.begin(reusable=True, after_earlier_work=True)
        return self._batch

    def record_dispatch(self, program: Any, buffers: Sequence[BufferRange], push: bytes,
                        groups: tuple[int, int, int], writes: Sequence[int]) -> None:
        """Record one dispatch into the graph (what :meth:`CaptureStream.dispatch` does).

        Raises:
            CaptureError: the capture has ended.
            ContextClosed: the context was closed.
        """
        batch = self._record("capturing a dispatch")
        batch.dispatch(program, buffers, push, groups, writes)
        self.dispatches += 1
        self._pin(buffers)

    def record_copy(self, src: BufferRange, dst: BufferRange) -> None:
        """Record a device copy of all of ``src`` into the start of ``dst``.

        Raises:
            CaptureError: the capture has ended.
            ContextClosed: the context was closed.
        """
        batch = self._record("capturing a copy")
        batch.copy(src, dst)
        self.copies += 1
        self._pin((src, dst))

    def track_overlaps(self, ranges: Sequence[BufferRange]) -> None:
        """Declare sub-ranges of one allocation that the capture binds and that may share
        bytes (a compiled graph's arena values): barriers then order accesses to overlapping
        ranges as they order accesses to the same range. Call before recording into them.

        Raises:
            CaptureError: the capture has ended.
            ContextClosed: the context was closed.
        """
        self._record("declaring overlapping ranges").hazards.track_overlaps(ranges)

    def _pin(self, buffers: Sequence[BufferRange]) -> None:
        for buffer, offset, _ in buffers:
            key = (buffer, offset)
            if key not in self.keys:
                self.keys.add(key)
                self.context.pins.pin(key)

    def end_capture(self, failed: BaseException | None) -> None:
        """Finish the capture: keep the recorded commands, or drop them if it ``failed``.

        Called by ``ctx.capture()`` as its block ends; later recording raises
        :class:`~vkumd.errors.CaptureError`.
        """
        self.capturing = False
        batch, self._batch = self._batch, None
        if batch is None or self.released:
            return  # a release (or the context's close) freed the batch's command buffer
        if failed is not None or batch.broken is not None:
            self.submitter.discard(batch)
            return
        batch.finish()
        self.barriers = batch.hazards.barriers
        self.commands.append(batch.cmd)
        self.pools = self.submitter.binder.take_pools()

    # -- replay ----------------------------------------------------------------------------
    def replay(self, stream: Stream | None = None) -> None:
        """Submit the captured work on ``stream`` (default: the current stream), after the
        work already recorded there. Returns without waiting.

        Raises:
            ContextClosed: the context was closed.
            CaptureError: called inside ``ctx.capture()`` without a stream.
            VkumdError: the graph or the stream was released, the graph captured nothing, or
                the stream is a transfer stream or belongs to another context.
            VkumdTypeError: ``stream`` is not a vkumd Stream.
        """
        self._check_usable("replaying a graph")
        if not self.commands:
            raise VkumdError("the graph captured no work; nothing to replay")
        context = self.context
        if stream is None:
            current = context.current_stream()
            if isinstance(current, CaptureStream):
                raise CaptureError("graph.replay() inside ctx.capture(): graphs do not nest; "
                                   "replay it before or after the capture block, or pass "
                                   "replay(stream=...) to run it on a stream now")
            stream = current
        elif not isinstance(stream, Stream):
            raise VkumdTypeError(f"replay(stream=...) takes a vkumd Stream, not "
                                 f"{type(stream).__name__}")
        if not stream.compute or stream.context is not context:
            raise VkumdError("replay needs a compute stream of the graph's context")
        if stream.released:
            raise VkumdError(f"replay(stream=...): {stream.name} was released; replay on a "
                             "live stream")
        value = stream.submit_commands(
            self.commands, self.keys,
            describe=f"replay of a graph of {self.dispatches} dispatch(es)")
        with self._lock:
            self._in_flight[stream] = value
        self.replays += 1

    def release(self) -> None:
        """Wait for replays in flight, free the command buffer and unpin the graph's memory.

        Safe to call twice, and after the context closed (which released the graph).
        """
        if self.released:
            return
        self.released = True
        context = self.context
        if not context.closed:
            try:
                for stream, value in list(self._in_flight.items()):
                    if not stream.released:
                        stream.wait_value(value)
            except DeviceLost:
                # A lost device ends its waits in finite time (vkDeviceWaitIdle returns once
                # nothing runs), so what the replay held is freed after it; every later use
                # of the context still reports the loss.
                with contextlib.suppress(VulkanError):
                    context.device.wait_idle()
            for key in self.keys:
                allocation = context.pins.unpin(key)
                if allocation is not None:
                    context.release_tensor_memory(allocation)
        self._in_flight.clear()
        self.submitter.release()

    def __del__(self) -> None:
        try:
            if not self.released and not self.context.closed:
                self.release()
        except Exception:  # noqa: BLE001 - never raise from a finaliser at shutdown
            pass

    def __repr__(self) -> str:
        return (f"<vkumd.Graph {self.dispatches} dispatches, {self.barriers} barriers, "
                f"{self.replays} replays>")


class CaptureStream:
    """What ``ctx.current_stream()`` is inside ``with ctx.capture()``: records into a graph."""

    compute = True

    def __init__(self, context: RuntimeContext, graph: Graph) -> None:
        self.context = context
        self.graph = graph
        self.name = "capture"

    def dispatch(self, program: Any, buffers: Sequence[BufferRange], push: bytes,
                 groups: tuple[int, int, int], writes: Sequence[int] = ()) -> None:
        """Record a dispatch into the graph."""
        self.graph.record_dispatch(program, buffers, push, groups, writes)

    def copy(self, src: BufferRange, dst: BufferRange) -> None:
        """Record a device copy into the graph."""
        self.graph.record_copy(src, dst)

    def refuse(self, what: str) -> None:
        """Raise :class:`CaptureError` for an operation that needs the host."""
        raise CaptureError(
            f"{what} needs the host to wait for device work, which cannot happen while "
            "ctx.capture() is recording a graph; move it before or after the capture block")

    def synchronize(self, timeout: float | None = None) -> None:
        """Refused: nothing captured has run yet."""
        self.refuse("synchronize()")

    def upload(self, allocation: Any, data: memoryview) -> None:
        """Refused: an upload during capture would only happen once."""
        self.refuse("an upload from the host")

    def flush(self) -> None:
        """Nothing to submit: captured work runs on replay."""

    def record(self, event: Any = None) -> Any:
        """Refused: events belong to streams that run."""
        self.refuse("recording an event")

    def wait(self, event: Any) -> None:
        """Refused: a graph cannot wait for another stream's event."""
        self.refuse("waiting for an event")
