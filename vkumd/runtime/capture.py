"""Capture and replay, like CUDA graphs: record ops once, submit them again and again.

``with ctx.capture() as graph:`` makes a :class:`CaptureStream` current for the thread; ops
record into the graph's reusable command buffer instead of running. ``graph.replay()`` then
submits that command buffer on a stream with no Python-side recording at all. Inputs change
by writing new values into the tensors the capture used; every tensor the graph touches
stays allocated until the graph is released, even if the program drops it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vkumd.errors import CaptureError, VkumdError, VkumdTypeError
from vkumd.runtime.stream import MemoryKey, Stream
from vkumd.submission.batch import Batch
from vkumd.submission.descriptors import BufferRange
from vkumd.submission.submitter import Submitter

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext


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
        self._batch: Batch | None = None
        self._in_flight: dict[Stream, int] = {}
        self._lock = threading.Lock()

    # -- capture ---------------------------------------------------------------------------
    def _record(self) -> Batch:
        if self._batch is None:
            if self.commands:
                raise CaptureError("this graph's capture has ended; capture a new graph")
            # The first command orders the graph after whatever ran before each replay.
            self._batch = self.submitter.begin(reusable=True, after_earlier_work=True)
        return self._batch

    def _dispatch(self, program: Any, buffers: Sequence[BufferRange], push: bytes,
                  groups: tuple[int, int, int], writes: Sequence[int]) -> None:
        batch = self._record()
        batch.dispatch(program, buffers, push, groups, writes)
        self.dispatches += 1
        self._pin(buffers)

    def _pin(self, buffers: Sequence[BufferRange]) -> None:
        for buffer, offset, _ in buffers:
            key = (buffer, offset)
            if key not in self.keys:
                self.keys.add(key)
                self.context.pin_for_graph(key)

    def _copy(self, src: BufferRange, dst: BufferRange) -> None:
        batch = self._record()
        batch.copy(src, dst)
        self.copies += 1
        self._pin((src, dst))

    def _end_capture(self, failed: BaseException | None) -> None:
        batch, self._batch = self._batch, None
        if batch is None:
            return
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
            VkumdError: the graph was released, or captured nothing.
        """
        if self.released:
            raise VkumdError("the graph was released; capture it again")
        if not self.commands:
            raise VkumdError("the graph captured no work; nothing to replay")
        context = self.context
        if stream is None:
            stream = context.current_stream()
        elif not isinstance(stream, Stream):
            raise VkumdTypeError(f"replay(stream=...) takes a vkumd Stream, not "
                                 f"{type(stream).__name__}")
        if not stream.compute or stream.context is not context:
            raise VkumdError("replay needs a compute stream of the graph's context")
        context.check_open("replaying a graph")
        with stream._lock:
            stream._submit()
            submitter = stream.submitter
            value = submitter.submit(self.commands, pools=[], waits=stream._take_waits(),
                                     describe=f"replay of a graph of {self.dispatches} "
                                              "dispatch(es)")
            uses = stream.uses
            for key in self.keys:
                uses[key] = value
        with self._lock:
            self._in_flight[stream] = value
        self.replays += 1

    def release(self) -> None:
        """Wait for replays in flight, free the command buffer and unpin the graph's memory.

        Safe to call twice.
        """
        if self.released:
            return
        self.released = True
        context = self.context
        if not context.released:
            for stream, value in list(self._in_flight.items()):
                if not stream.released:
                    stream.wait_value(value)
            context.unpin_graph(self)
        self._in_flight.clear()
        self.submitter.release()

    def __del__(self) -> None:
        try:
            if not self.released and not self.context.released:
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
        self.graph._dispatch(program, buffers, push, groups, writes)

    def copy(self, src: BufferRange, dst: BufferRange) -> None:
        """Record a device copy into the graph."""
        self.graph._copy(src, dst)

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
