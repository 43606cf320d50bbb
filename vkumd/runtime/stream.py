"""Streams: ordered, asynchronous work on one queue, as in CuPy and PyTorch.

A :class:`Stream` records dispatches and copies into the current command buffer and submits
it on :meth:`Stream.flush`, :meth:`Stream.synchronize`, a host read or write of a tensor it
uses, or when the batch passes its dispatch or byte budget. Work on one stream runs in order;
work on two is unordered unless one waits for an :class:`~vkumd.runtime.event.Event`.

A stream also remembers, for each memory range it touched, the submission that last used it,
so that a host access waits for exactly that submission and a released tensor's memory is
returned to the pool only after it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from vkumd.errors import VkumdError, VkumdTypeError, VkumdValueError
from vkumd.runtime import profiler
from vkumd.runtime.event import Event, timeout_ns
from vkumd.runtime.staging import upload_in_pieces
from vkumd.runtime.uses import PRUNE_AT, MemoryKey, MemoryUses
from vkumd.submission.batch import Batch
from vkumd.submission.descriptors import BufferRange
from vkumd.submission.submitter import Submitter
from vkumd.vk.binding import vk

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext

DEFAULT_BATCH_DISPATCHES = 256
DEFAULT_BATCH_BYTES = 256 << 20
_BOTTOM = vk.VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT


class Stream:
    """An in-order queue of device work. Create with ``ctx.stream()``.

    Args:
        context: the owning context.
        queue: ``"compute"`` or ``"transfer"``; a transfer stream uses the device's
            transfer-only queue where it has one (copies only), else the compute queue.
        name: shown in errors and the profiler.
        max_batch_dispatches: submit once a batch holds this many dispatches.
        max_batch_bytes: submit once a batch's commands have touched this many bytes.

    Raises:
        VkumdTypeError, VkumdValueError: a budget not an int >= 1, or an unknown queue.

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
        for budget in (max_batch_dispatches, max_batch_bytes):
            if isinstance(budget, bool) or not isinstance(budget, int):
                raise VkumdTypeError(f"batch budget {budget!r}: pass an int >= 1")
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
            timeline_semaphore=context.uses_timeline_semaphores, name=self.name,
            cache_sets=True)
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
        # Threads in a host wait; release() lets them leave before destroying the semaphore.
        self._waiting = 0
        self._no_waiters = threading.Condition(self._lock)
        self.uses = MemoryUses()
        # Dispatches and hazard barriers of the batches already submitted or discarded; the
        # open batch counts its own (two counters less per dispatch).
        self._dispatched = 0
        self._barriers = 0
        self.released = False

    def _check_usable(self, what: str) -> None:
        """Raise if the context or this stream is gone (before any driver call)."""
        self.context.check_open(f"{what} on {self.name}")
        if self.released:
            raise VkumdError(f"{what}: {self.name} was released; create a new stream")

    @property
    def dispatches(self) -> int:
        """Dispatches recorded on this stream so far."""
        batch = self._batch
        return self._dispatched + (batch.dispatches if batch is not None else 0)

    @property
    def barriers(self) -> int:
        """Barriers recorded between dependent commands (none between independent ones)."""
        batch = self._batch
        return self._barriers + (batch.hazards.barriers if batch is not None else 0)

    # -- recording ------------------------------------------------------------------------
    @property
    def recording_value(self) -> int:
        """The timeline value the batch being recorded will signal."""
        return self.submitter.timeline.submitted + 1

    def _open(self) -> Batch:
        self._check_usable("recording")
        batch = self._batch = self.submitter.begin()
        self.uses.open_batch(batch.touched, self.recording_value)
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
            if self.released:
                self._check_usable("dispatching")
            batch = self._batch or self._open()
            prof = profiler.current
            if prof is None:
                batch.dispatch(program, buffers, push, groups, writes)
            else:
                start = prof.begin_dispatch(self, batch)
                batch.dispatch(program, buffers, push, groups, writes)
                prof.end_dispatch(self, batch, start, program.name, groups)
            # The memory the batch touches is marked as used when it is submitted.
            if (batch.dispatches >= self.max_batch_dispatches
                    or batch.bytes >= self.max_batch_bytes):
                self._submit()

    def copy(self, src: BufferRange, dst: BufferRange, dst_offset: int = 0) -> int:
        """Record a device copy of ``src`` (all of its range) into ``dst``, ``dst_offset``
        bytes from its start; return the submission value it belongs to."""
        if dst_offset < 0 or dst[2] - dst_offset < src[2]:
            raise VkumdValueError(f"copy of {src[2]} bytes at offset {dst_offset} into a range "
                                  f"of {dst[2]} bytes")
        with self._lock:
            self._check_usable("a copy")
            batch = self._batch or self._open()
            batch.copy(src, dst, dst_offset)
            value = self.recording_value
            if batch.bytes >= self.max_batch_bytes:
                self._submit()
        return value

    def upload(self, allocation: Any, data: memoryview) -> None:
        """Copy host bytes into ``allocation`` through staging memory, without waiting (see
        :func:`vkumd.runtime.staging.upload_in_pieces`)."""
        self._check_usable("an upload")
        upload_in_pieces(self, self.context.memory, allocation, data)

    # -- submission -----------------------------------------------------------------------
    def _submit(self) -> int:
        """Submit the open batch, if any; return the last value submitted."""
        batch = self._batch
        if batch is None:
            return self.submitter.timeline.submitted
        self._batch = None
        self._dispatched += batch.dispatches
        self._barriers += batch.hazards.barriers
        if batch.broken is not None:
            self.uses.close_batch(None)
            self.submitter.discard(batch)
            raise VkumdError(
                f"{self.name}: work recorded since the last submission was discarded, not "
                f"submitted, because recording was interrupted by "
                f"{type(batch.broken).__name__}: {batch.broken}. Run those ops again") \
                from batch.broken
        waits = self._take_waits()
        if batch.empty and not waits:
            self.uses.close_batch(None)
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
            self.uses.close_batch(None)
            self.submitter.discard(batch)
            raise
        self.uses.close_batch(value)
        if len(self.uses) > PRUNE_AT:
            self.uses.prune(self.submitter.collect())
        return value

    def flush(self) -> None:
        """Submit the work recorded so far without waiting for it."""
        with self._lock:
            self._check_usable("flush()")
            self._submit()

    def submit_pending(self) -> None:
        """Submit what is recorded, even while the context closes (whose ``close()`` calls
        this so recorded work still runs); a no-op once released. A batch whose recording
        broke has already raised to its caller and is dropped."""
        with self._lock, contextlib.suppress(VkumdError):
            if not self.released:
                self._submit()

    def submit_commands(self, commands: Sequence[Any], keys: Iterable[MemoryKey],
                        describe: str) -> int:
        """Submit pre-recorded command buffers (a graph's) after the work recorded so far.

        Args:
            commands: ended command buffers, submitted as they are (not recycled).
            keys: the memory ranges they use; host access to them then waits for this.
            describe: what is submitted, for a device-lost report.

        Returns:
            The timeline value the submission signals.

        Raises:
            ContextClosed, VkumdError: the context was closed, or this stream released.
        """
        with self._lock:
            self._check_usable("submitting recorded commands")
            self._submit()
            value = self.submitter.submit(commands, pools=[], waits=self._take_waits(),
                                          describe=describe)
            self.uses.mark(keys, value)
        return value

    def wait_value(self, value: int, timeout: float | None = None, what: str = "") -> None:
        """Block until this stream's submission ``value`` has completed (submitting it first).

        Raises:
            ContextClosed, VkumdError: the context was closed, or this stream released.
            VkumdTypeError, VkumdValueError: ``timeout`` is not a number of seconds >= 0.
            TimeoutError: not completed within ``timeout`` seconds.
        """
        limit_ns = timeout_ns(timeout)
        with self._lock:
            self._check_usable(what or "a wait")
            self._enter_wait(value)
        self._finish_wait(value, limit_ns, what)

    def wait_for_memory(self, key: MemoryKey, what: str) -> None:
        """Block until the last work of this stream that used memory ``key`` has completed
        (a no-op if none did, or it already completed).

        Raises:
            ContextClosed, VkumdError: the context was closed, or this stream released.
        """
        with self._lock:
            self._check_usable(what)
            value = self.uses.last(key)
            if value is None or value <= self.submitter.timeline.completed():
                return
            self._enter_wait(value)
        self._finish_wait(value, timeout_ns(None), what)

    def _enter_wait(self, value: int) -> None:
        # Under the lock: submit up to value; release() keeps the submitter while we wait.
        if value > self.submitter.timeline.submitted:
            self._submit()
        self._waiting += 1

    def _finish_wait(self, value: int, limit_ns: int, what: str) -> None:
        prof = profiler.current
        started = time.perf_counter_ns() if prof is not None else 0
        try:
            self.submitter.wait(min(value, self.submitter.timeline.submitted), limit_ns)
        finally:
            with self._lock:
                self._waiting -= 1
                self._no_waiters.notify_all()
        if prof is not None:
            prof.host_event("wait", what or self.name, started, time.perf_counter_ns(),
                            {"value": value})

    def forget_memory(self, key: MemoryKey) -> int | None:
        """Forget memory ``key`` (it is being released); return the submission that last
        used it if that may still be running, else None."""
        with self._lock:
            value = self.uses.take(key)
        return value if value is not None and value > self.completed_value() else None

    def synchronize(self, timeout: float | None = None) -> None:
        """Submit what is recorded and block until all of this stream's work is done.

        Args:
            timeout: seconds to wait at most; ``None`` waits as long as it takes.

        Raises:
            TimeoutError: the work had not finished in time (the stream stays usable).
            DeviceLost: the device was lost; the message names the last work submitted.
            VkumdTypeError, VkumdValueError: ``timeout`` is not a number of seconds >= 0.
            ContextClosed, VkumdError: the context was closed, or this stream released.
        """
        timeout_ns(timeout)
        self._check_usable("synchronize()")
        self.context.refuse_during_capture(f"{self.name}.synchronize()")
        self.wait_value(self.recording_value, timeout)

    def free_cached_sets(self) -> int:
        """Submit and wait, then drop the set cache and idle descriptor pools: how many went."""
        with self._lock:  # no batch opens, with sets from the cache, until it is emptied
            self._check_usable("free_cached_sets()")
            return self.submitter.trim(self._submit())

    @property
    def done(self) -> bool:
        """Whether every piece of work recorded on this stream has finished."""
        with self._lock:
            self._check_usable("done")
            if self._batch is not None and not self._batch.empty:
                return False
            return self.submitter.collect() >= self.submitter.timeline.submitted

    def completed_value(self) -> int:
        """The highest submission value known to have completed."""
        with self._lock:
            self._check_usable("completed_value()")
            return self.submitter.collect()

    def defer_until(self, release: Any, value: int) -> None:
        """Run ``release()`` once submission ``value`` of this stream completes."""
        with self._lock:
            self._check_usable("defer_until()")
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

        Raises:
            CaptureError: this thread is capturing a graph.
            ContextClosed, VkumdError: the context was closed, or this stream or ``event``
                released.
            VkumdValueError: ``event`` belongs to another context.
        """
        self._check_usable("record()")
        self.context.refuse_during_capture(f"{self.name}.record()")
        if event is None:
            event = Event(self.context)
        elif not isinstance(event, Event):
            raise VkumdTypeError(f"{self.name}.record() takes an Event or None, not "
                                 f"{type(event).__name__}")
        else:
            event.check_usable(f"{self.name}.record(event)", self.context)
        with self._lock:
            batch = self._batch or self._open()
            slots = self.timestamps
            slot = event.timestamp_slot
            if slots is not None and slot is not None:
                pool, index = slots.location(slot)
                batch.timestamp(pool, index, _BOTTOM)
            event.set_point(self, self.recording_value)
        return event

    def wait(self, event: Event) -> None:
        """Make work recorded on this stream from now on wait for ``event``, on the device.

        The host does not block (except on devices without timeline semaphores, where the
        wait happens on the host).

        Raises:
            VkumdTypeError, VkumdValueError: ``event`` is not an Event of this context.
            ContextClosed, VkumdError: the context was closed, or this stream or ``event``
                released.
        """
        if not isinstance(event, Event):
            raise VkumdTypeError(f"{self.name}.wait() takes an Event, not {type(event).__name__}")
        event.check_usable(f"{self.name}.wait(event)", self.context)
        self._check_usable("wait()")
        source = event.stream
        if source is None or source is self or source.released:
            return  # a released stream waited for all of its work: the event has passed
        source.flush_to(event.value)
        if not (source.submitter.timeline.uses_semaphore
                and self.submitter.timeline.uses_semaphore):
            event.synchronize()
            return
        with self._lock:
            self._check_usable("wait()")
            self._waits.append((source.submitter.timeline.handle, event.value))
            if self._batch is None:
                self._open()

    def _take_waits(self) -> list[tuple[Any, int]]:
        waits, self._waits = self._waits, []
        return waits

    def flush_to(self, value: int) -> None:
        """Make sure submission ``value`` has been submitted."""
        with self._lock:
            self._check_usable("flush_to()")
            if value > self.submitter.timeline.submitted:
                self._submit()

    # -- context manager and lifetime ------------------------------------------------------
    def __enter__(self) -> Stream:
        self._check_usable("'with stream:'")
        self.context.push_stream(self)
        return self

    def __exit__(self, *exc: object) -> None:
        self.context.pop_stream(self)

    def release(self) -> None:
        """Wait for this stream's work and free its command buffers, pools and semaphore.

        Safe to call twice, and from any thread: recording on the stream from another
        thread then raises :class:`~vkumd.errors.VkumdError`. A no-op once the context closed.

        Raises:
            VkumdError: this is the default stream, which lives as long as its context.
        """
        with self._lock:
            if self.released:
                return
            if self is self.context.default_stream and not self.context.closed:
                raise VkumdError("the default stream lives as long as its context; close the "
                                 "context instead")
            if not self.context.closed:
                self.synchronize()
                self.context.forget_stream(self)
            self.released = True
            while self._waiting:
                self._no_waiters.wait()
            self.submitter.release()

    def __repr__(self) -> str:
        state = " released" if self.released else ""
        return f"<vkumd.Stream {self.name!r}{state}>"
