"""Streams and events: ordered, asynchronous work on one queue, as in CuPy and PyTorch.

A :class:`Stream` records dispatches and copies into the current command buffer and submits
it on :meth:`Stream.flush`, :meth:`Stream.synchronize`, a host read or write of a tensor it
uses, or when the batch passes its dispatch or byte budget. Work on one stream runs in order;
work on two streams is unordered unless one waits for an :class:`Event` of the other.

A stream also remembers, for each memory range it touched, the submission that last used it,
so that a host access waits for exactly that submission and a released tensor's memory is
returned to the pool only after it.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.runtime import profiler
from vkumd.runtime.memory import MemoryUsage
from vkumd.runtime.transfer import STAGING_MAX_BYTES, as_bytes
from vkumd.submission.batch import Batch
from vkumd.submission.descriptors import BufferRange
from vkumd.submission.submitter import Submitter
from vkumd.submission.timeline import FOREVER_NS
from vkumd.vk.binding import ffi, vk

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext

DEFAULT_BATCH_DISPATCHES = 256
DEFAULT_BATCH_BYTES = 256 << 20
_TOP = vk.VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT
_BOTTOM = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT
_PRUNE_AT = 8192

MemoryKey = tuple[Any, int]  # (VkBuffer, offset) of an allocation


def _timeout_ns(timeout: float | None) -> int:
    if timeout is None:
        return FOREVER_NS
    if timeout < 0:
        raise VkumdValueError(f"timeout={timeout} is negative; pass seconds >= 0 or None")
    return int(timeout * 1e9)


class Stream:
    """An in-order queue of device work. Create with ``ctx.stream()``.

    Args:
        context: the owning context.
        queue: ``"compute"`` or ``"transfer"``; a transfer stream uses the device's
            transfer-only queue where it has one (copies only), else the compute queue.
        name: shown in errors and the profiler.
        max_batch_dispatches: submit once a batch holds this many dispatches.
        max_batch_bytes: submit once a batch's commands have touched this many bytes.

    Use ``with stream:`` to make it the current stream of this thread for the ops inside.

    Threads may share a stream (the default stream is shared by all of them). Each dispatch,
    copy, :meth:`record`, :meth:`wait` and :meth:`flush` takes the stream's lock, so each is
    atomic and work from several threads is serialised in the order the calls took it; an
    op of several dispatches may have another thread's dispatches between its own, still
    correct, since barriers follow the memory each dispatch uses. A thread's own work runs
    in the order it recorded it. :meth:`synchronize`, :attr:`done` and events cover the
    work of every thread up to that point. Waits (:meth:`synchronize`, host reads,
    :meth:`Event.synchronize`) hold no lock and release the GIL, so other threads keep
    recording and submitting meanwhile.
    """

    def __init__(self, context: RuntimeContext, queue: str = "compute", *, name: str = "",
                 max_batch_dispatches: int = DEFAULT_BATCH_DISPATCHES,
                 max_batch_bytes: int = DEFAULT_BATCH_BYTES) -> None:
        if queue not in ("compute", "transfer"):
            raise VkumdValueError(f"queue={queue!r}: use 'compute' or 'transfer'")
        if max_batch_dispatches < 1 or max_batch_bytes < 1:
            raise VkumdValueError("max_batch_dispatches and max_batch_bytes must be >= 1")
        device = context.device
        chosen = device.transfer_queue if queue == "transfer" else None
        self.compute = chosen is None
        self.queue_kind = queue
        self.context = context
        self.name = name or f"{queue} stream {id(self):x}"
        self.max_batch_dispatches = max_batch_dispatches
        self.max_batch_bytes = max_batch_bytes
        self.submitter = Submitter(
            device.handle, chosen or device.compute_queue, compute=self.compute,
            push_descriptors=context.kernels.push_descriptors,
            timeline_semaphore=context.uses_timeline_semaphores, name=self.name)
        family = (chosen or device.compute_queue).family
        # Timestamps need a queue family that counts them and that may reset queries
        # (vkCmdResetQueryPool is for graphics and compute queues, not transfer-only ones);
        # events on other streams fall back to the host clock.
        fam = context.caps.queue_families[family]
        self.timestamps = (context.timestamps
                           if fam.timestamp_valid_bits and (fam.compute or fam.graphics)
                           else None)
        self._lock = threading.RLock()
        self._batch: Batch | None = None
        self._waits: list[tuple[Any, int]] = []
        self.uses: dict[MemoryKey, int] = {}
        self.dispatches = 0
        self.barriers = 0
        self.released = False

    # -- recording ------------------------------------------------------------------------
    @property
    def recording_value(self) -> int:
        """The timeline value the batch being recorded will signal."""
        return self.submitter.timeline.submitted + 1

    def _open(self) -> Batch:
        if self.released:
            raise VkumdError(f"{self.name} was released; create a new stream")
        self.context.check_open(f"recording on {self.name}")
        batch = self._batch = self.submitter.begin()
        return batch

    def dispatch(self, program: Any, buffers: Sequence[BufferRange], push: bytes,
                 groups: tuple[int, int, int], writes: Sequence[int] = ()) -> None:
        """Record one dispatch of ``program``; it runs after earlier work on this stream.

        Args:
            program: a compiled :class:`~vkumd.compiler.program.Program`.
            buffers: ``(VkBuffer, offset, range)`` for bindings 0..n-1.
            push: the packed push-constant block.
            groups: workgroup counts.
            writes: indices into ``buffers`` the kernel writes; a barrier precedes this
                dispatch only if it reads what earlier work wrote, or writes what it used.
        """
        if not self.compute:
            raise VkumdValueError(f"{self.name} runs on a transfer-only queue; dispatch "
                                  "kernels on a compute stream")
        with self._lock:
            batch = self._batch or self._open()
            prof = profiler.current
            if prof is not None:
                start = prof.begin_dispatch(self, batch)
            barriers = batch.hazards.barriers
            keys = [(range_[0], range_[1]) for range_ in buffers]
            batch.dispatch(program, buffers, push, groups, writes, keys)
            if prof is not None:
                prof.end_dispatch(self, batch, start, program.name, groups)
            self.barriers += batch.hazards.barriers - barriers
            self.dispatches += 1
            value = self.submitter.timeline.submitted + 1
            uses = self.uses
            for key in keys:
                uses[key] = value
            if (batch.dispatches >= self.max_batch_dispatches
                    or batch.bytes >= self.max_batch_bytes):
                self._submit()

    def copy(self, src: BufferRange, dst: BufferRange, dst_offset: int = 0) -> None:
        """Record a device copy of ``src`` (all of its range) into ``dst``, ``dst_offset``
        bytes from its start."""
        if dst_offset < 0 or dst[2] - dst_offset < src[2]:
            raise VkumdValueError(f"copy of {src[2]} bytes at offset {dst_offset} into a range "
                                  f"of {dst[2]} bytes")
        with self._lock:
            batch = self._batch or self._open()
            barriers = batch.hazards.barriers
            batch.copy(src, dst, dst_offset)
            self.barriers += batch.hazards.barriers - barriers
            value = self.recording_value
            self.uses[(src[0], src[1])] = value
            self.uses[(dst[0], dst[1])] = value
            if batch.bytes >= self.max_batch_bytes:
                self._submit()

    def upload(self, allocation: Any, data: memoryview) -> None:
        """Copy host bytes into ``allocation`` through staging memory, without waiting.

        Staging is taken from the memory pool in pieces of at most ``STAGING_MAX_BYTES``
        (so a large upload never holds a staging copy of all of it at once), and each piece
        returns to the pool once its copy's submission has completed. The host bytes are
        copied before this returns.
        """
        n = data.nbytes
        if n > allocation.size:
            raise VkumdValueError(f"upload of {n} bytes into an allocation of "
                                  f"{allocation.size} bytes")
        source = as_bytes(data)
        dst = (allocation.buffer, allocation.offset, allocation.size)
        memory = self.context.memory
        for start in range(0, n, STAGING_MAX_BYTES):
            size = min(STAGING_MAX_BYTES, n - start)
            staging = memory.allocate(size, MemoryUsage.UPLOAD)
            try:
                ffi.memmove(staging.block.mapped + staging.offset, source[start:start + size],
                            size)
                staging.flush()
                # The value the copy records into, read under the lock: after the copy it
                # may already be the next one (its batch submitted by the byte budget or by
                # another thread), whose batch may be discarded empty, freeing too early.
                with self._lock:
                    value = self.recording_value
                    self.copy((staging.buffer, staging.offset, size), dst, start)
            except BaseException:
                memory.free(staging)
                raise
            self.defer_until(lambda piece=staging: memory.free(piece), value)

    # -- submission -----------------------------------------------------------------------
    def _submit(self) -> int:
        """Submit the open batch, if any; return the last value submitted."""
        batch = self._batch
        if batch is None:
            return self.submitter.timeline.submitted
        self._batch = None
        if batch.broken is not None:
            self.submitter.discard(batch)
            raise VkumdError(
                f"{self.name}: work recorded since the last submission was discarded, not "
                f"submitted, because recording was interrupted by "
                f"{type(batch.broken).__name__}: {batch.broken}. Run those ops again") \
                from batch.broken
        waits = self._take_waits()
        if batch.empty and not waits:
            self.submitter.discard(batch)
            return self.submitter.timeline.submitted
        try:
            batch.finish()
            describe = (f"{batch.dispatches} dispatch(es), {batch.copies} copy(ies)"
                        + (f", last kernel {batch.last_kernel}" if batch.last_kernel else ""))
            prof = profiler.current
            started = time.perf_counter_ns() if prof is not None else 0
            value = self.submitter.submit([batch.cmd], waits=waits, owned=[batch.cmd],
                                          on_retire=batch.on_retire, describe=describe)
            if prof is not None:
                prof.host_event("submit", self.name, started, time.perf_counter_ns(),
                                {"value": value, "dispatches": batch.dispatches})
        except BaseException:
            self.submitter.discard(batch)
            raise
        if len(self.uses) > _PRUNE_AT:
            done = self.submitter.collect()
            self.uses = {key: v for key, v in self.uses.items() if v > done}
        return value

    def flush(self) -> None:
        """Submit the work recorded so far without waiting for it."""
        with self._lock:
            self._submit()

    def wait_value(self, value: int, timeout: float | None = None, what: str = "") -> None:
        """Block until this stream's submission ``value`` has completed (submitting it first)."""
        self.flush_to(value)
        prof = profiler.current
        started = time.perf_counter_ns() if prof is not None else 0
        self.submitter.wait(min(value, self.submitter.timeline.submitted), _timeout_ns(timeout))
        if prof is not None:
            prof.host_event("wait", what or self.name, started, time.perf_counter_ns(),
                            {"value": value})

    def synchronize(self, timeout: float | None = None) -> None:
        """Submit what is recorded and block until all of this stream's work is done.

        Args:
            timeout: seconds to wait at most; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: the work had not finished in time (the stream stays usable).
            DeviceLost: the device was lost; the message names the last work submitted.
        """
        self.context.refuse_during_capture(f"{self.name}.synchronize()")
        self.wait_value(self.recording_value, timeout)

    @property
    def done(self) -> bool:
        """Whether every piece of work recorded on this stream has finished."""
        with self._lock:
            if self._batch is not None and not self._batch.empty:
                return False
            timeline = self.submitter.timeline
            return self.submitter.collect() >= timeline.submitted

    def completed_value(self) -> int:
        """The highest submission value known to have completed."""
        return self.submitter.collect()

    def defer_until(self, release: Any, value: int) -> None:
        """Run ``release()`` once submission ``value`` of this stream completes."""
        with self._lock:
            if value > self.submitter.timeline.submitted:
                batch = self._batch or self._open()
                batch.on_retire.append(release)
                return
            self.submitter.defer(release, value)

    # -- events ---------------------------------------------------------------------------
    def record(self, event: Event | None = None) -> Event:
        """Mark the current point of the stream; return an :class:`Event` for it.

        With timestamp queries the event also records when the device passed that point,
        for :meth:`Event.elapsed_time`.
        """
        self.context.refuse_during_capture(f"{self.name}.record()")
        if event is None:
            event = Event(self.context)
        with self._lock:
            batch = self._batch or self._open()
            slots = self.timestamps
            if slots is not None and event._slot is not None:
                pool, index = slots.location(event._slot)
                batch.timestamp(pool, index, _BOTTOM)
            event._set(self, self.recording_value)
        return event

    def wait(self, event: Event) -> None:
        """Make work recorded on this stream from now on wait for ``event``, on the device.

        The host does not block (except on devices without timeline semaphores, where the
        wait happens on the host).
        """
        if not isinstance(event, Event):
            raise VkumdTypeError(f"{self.name}.wait() takes an Event, not "
                                 f"{type(event).__name__}")
        source = event.stream
        if source is None or source is self:
            return
        source.flush_to(event.value)
        if not (source.submitter.timeline.uses_semaphore
                and self.submitter.timeline.uses_semaphore):
            event.synchronize()
            return
        with self._lock:
            self._waits.append((source.submitter.timeline.handle, event.value))
            if self._batch is None:
                self._open()

    def _take_waits(self) -> list[tuple[Any, int]]:
        waits, self._waits = self._waits, []
        return waits

    def flush_to(self, value: int) -> None:
        """Make sure submission ``value`` has been submitted."""
        with self._lock:
            if value > self.submitter.timeline.submitted:
                self._submit()

    # -- context manager and lifetime ------------------------------------------------------
    def __enter__(self) -> Stream:
        self.context.push_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.pop_stream(self)

    def release(self) -> None:
        """Wait for this stream's work and free its command buffers, pools and semaphore."""
        if self.released:
            return
        if self is self.context.default_stream and not self.context.released:
            raise VkumdError("the default stream lives as long as its context; close the "
                             "context instead")
        if not self.context.released:
            self.synchronize()
            self.context.forget_stream(self)
        self.released = True
        self.submitter.release()

    def __repr__(self) -> str:
        return f"<vkumd.Stream {self.name!r}>"


class Event:
    """A point in a stream's work. Get one from :meth:`Stream.record`.

    Attributes:
        stream: the stream it was last recorded on (``None`` before that).
        value: that stream's submission value it completes with.
    """

    def __init__(self, context: RuntimeContext, timing: bool = True) -> None:
        self.context = context
        self.stream: Stream | None = None
        self.value = 0
        self.host_ns = 0
        self._timed = False
        slots = context.timestamps if timing else None
        self._slot = slots.allocate() if slots is not None else None
        if self._slot is not None:
            weakref.finalize(self, _free_slot, weakref.ref(context), self._slot)

    def _set(self, stream: Stream, value: int) -> None:
        self.stream = stream
        self.value = value
        self.host_ns = time.perf_counter_ns()
        self._timed = stream.timestamps is not None

    @property
    def done(self) -> bool:
        """Whether the device has passed the event (True if it was never recorded)."""
        if self.stream is None:
            return True
        return self.stream.completed_value() >= self.value

    def query(self) -> bool:
        """Same as :attr:`done`, for CuPy's spelling."""
        return self.done

    def synchronize(self, timeout: float | None = None) -> None:
        """Block until the device has passed the event.

        Raises:
            TimeoutError: not passed within ``timeout`` seconds.
        """
        if self.stream is not None:
            self.context.refuse_during_capture("Event.synchronize()")
            self.stream.wait_value(self.value, timeout, what="Event.synchronize()")

    def timestamp_ns(self) -> int:
        """The device time of the event in nanoseconds (waits for it first)."""
        if self.stream is None:
            raise VkumdValueError("the event was never recorded; call stream.record(event)")
        self.synchronize()
        slots = self.context.timestamps
        if slots is None or self._slot is None or not self._timed:
            return self.host_ns
        stamp = slots.read(self._slot)
        if stamp is None:
            raise VkumdError("the event's timestamp was not written; record it again")
        return stamp

    def elapsed_time(self, end: Event) -> float:
        """Milliseconds of device time from this event to ``end``.

        Both events are waited for. Timestamps come from GPU timestamp queries; on a device
        without them, from the host clock when each event was recorded (which includes
        queueing delays).
        """
        if not isinstance(end, Event):
            raise VkumdTypeError(f"elapsed_time() takes an Event, not {type(end).__name__}")
        return (end.timestamp_ns() - self.timestamp_ns()) / 1e6


def _free_slot(context_ref: Any, slot: int) -> None:
    context = context_ref()
    if context is not None and not context.released and context.timestamps is not None:
        context.timestamps.free(slot)
