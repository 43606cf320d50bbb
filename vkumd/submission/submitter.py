"""Submitting batches to one queue and recycling what they used once they complete.

A :class:`Submitter` owns a command pool with a ring of command buffers, a
:class:`~vkumd.submission.timeline.Timeline` and a descriptor binder. Each submission signals
the next timeline value; its command buffers, descriptor pools and any deferred releases are
kept in a queue and recycled only when the timeline passes that value.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vkumd.errors import VkumdError
from vkumd.submission.batch import BarrierKind, Batch
from vkumd.submission.descriptors import DescriptorBinder, DescriptorPool
from vkumd.submission.oneshot import allocate_command_buffer, create_command_pool
from vkumd.submission.timeline import FOREVER_NS, Timeline
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import DeviceLost, check, error_for

_ALL_COMMANDS = vk.VK_PIPELINE_STAGE_ALL_COMMANDS_BIT
MAX_IN_FLIGHT = 32
"""Submissions a submitter lets run at once; the next waits for the oldest. Without a bound a
host that records faster than the device runs (eager ops on lavapipe: 9 us against 50-90 us
per dispatch) queues command buffers without end: 200 in flight and +70 MB after 10^5 ops."""


@dataclass
class _InFlight:
    value: int
    commands: list[Any]
    pools: list[DescriptorPool]
    on_retire: list[Callable[[], None]] = field(default_factory=list)


class Submitter:
    """Records into and submits to one queue, in order.

    Threads: recording — :meth:`begin`, the batch's commands, then :meth:`submit` or
    :meth:`discard` — uses the command pool, which Vulkan requires to be externally
    synchronised, so one recorder at a time: the caller serialises these (a
    :class:`~vkumd.runtime.stream.Stream` does it with its lock), and values are then
    submitted in the order of the calls. Completion — :meth:`collect`, :meth:`wait`,
    :meth:`defer` — may be called from any thread at any time, also while another thread
    records or submits: a short internal lock guards the work in flight and the free command
    buffers, and nothing is locked while a thread blocks on the device. Each completed
    submission is recycled exactly once, by whichever thread notices first; its
    ``on_retire`` callables run on that thread, after the lock is released.

    Args:
        device: the ``VkDevice``.
        queue: a :class:`~vkumd.runtime.device.Queue` (``handle``, ``family``, ``lock``).
        compute: whether the queue runs compute work (else copies only).
        push_descriptors: bind buffers with push descriptors.
        timeline_semaphore: count submissions with a timeline semaphore (else fences).
        name: used in error messages.
        cache_sets: let the binder reuse pooled descriptor sets across dispatches and
            submissions (see :class:`~vkumd.submission.descriptors.DescriptorBinder`).
    """

    def __init__(self, device: Any, queue: Any, *, compute: bool, push_descriptors: bool,
                 timeline_semaphore: bool = True, name: str = "stream",
                 cache_sets: bool = False) -> None:
        self.device = device
        self.queue = queue
        self.name = name
        self.binder = DescriptorBinder(device, push_descriptors, cache_sets)
        self.barriers = BarrierKind(compute)
        self.timeline = Timeline(device, semaphore=timeline_semaphore, name=name)
        try:
            self.pool = create_command_pool(device, queue.family)
        except BaseException:
            self.timeline.release()  # at once: a failed context creation destroys the device next
            raise
        self._lock = threading.Lock()  # guards _free_commands, _in_flight and the counters
        self._free_commands: list[Any] = []
        self._in_flight: deque[_InFlight] = deque()
        self.last_work = "nothing yet"
        self.submissions = 0
        self._begin_info = new("VkCommandBufferBeginInfo",
                               vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                               flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        self._reusable_begin = new("VkCommandBufferBeginInfo",
                                   vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   flags=vk.VK_COMMAND_BUFFER_USAGE_SIMULTANEOUS_USE_BIT)
        self._signal_value = ffi.new("uint64_t[1]")
        self._signal = ffi.new("VkSemaphore[1]")
        if self.timeline.uses_semaphore:
            self._signal[0] = self.timeline.handle

    # -- command buffers ----------------------------------------------------------------
    def new_command_buffer(self, reusable: bool = False) -> Any:
        """A command buffer from the ring, begun for recording.

        Args:
            reusable: it will be submitted many times, possibly while still pending (a
                captured graph); otherwise it is submitted once and then recycled.
        """
        with self._lock:
            cmd = self._free_commands.pop() if self._free_commands else None
        if cmd is not None:
            check("vkResetCommandBuffer", lib.vkResetCommandBuffer(cmd, 0))
        else:
            cmd = allocate_command_buffer(self.device, self.pool)
        begin = self._reusable_begin if reusable else self._begin_info
        check("vkBeginCommandBuffer", lib.vkBeginCommandBuffer(cmd, begin))
        return cmd

    def begin(self, reusable: bool = False, after_earlier_work: bool | None = None) -> Batch:
        """Start a batch; it begins with a barrier only if earlier work may still run."""
        self.collect()
        if after_earlier_work is None:
            after_earlier_work = self.timeline.completed() < self.timeline.submitted
        return Batch(self.new_command_buffer(reusable), self.binder, self.barriers,
                     after_earlier_work)

    def discard(self, batch: Batch) -> None:
        """Throw a batch away unsubmitted (its recording or its submission failed)."""
        if not batch.ended:  # a failed submit comes after Batch.finish ended it
            lib.vkEndCommandBuffer(batch.cmd)
        with self._lock:
            self._free_commands.append(batch.cmd)
        self.binder.recycle(self.binder.take_unsubmitted_pools())
        for release in batch.on_retire:
            release()

    # -- submission ---------------------------------------------------------------------
    def submit(self, commands: Sequence[Any], *, waits: Sequence[tuple[Any, int]] = (),
               owned: Sequence[Any] = (), pools: list[DescriptorPool] | None = None,
               on_retire: Sequence[Callable[[], None]] = (), describe: str = "") -> int:
        """Submit ``commands`` (ended) in order; return the timeline value they signal.

        Calls are serialised by the caller (see the class docstring).

        Args:
            commands: command buffers to execute.
            waits: ``(timeline semaphore, value)`` pairs the submission waits for on the
                device (other streams' events).
            owned: the subset of ``commands`` to recycle once the submission completes.
            pools: descriptor pools to recycle then (default: the binder's active pools).
            on_retire: callables run then (deferred frees).
            describe: what was submitted, for a device-lost report.
        """
        if len(self._in_flight) >= MAX_IN_FLIGHT:
            self.wait(self._in_flight[0].value)
        value = self.timeline.submitted + 1
        n = len(commands)
        cmd_array = ffi.new("VkCommandBuffer[]", list(commands))
        self._signal_value[0] = value
        submit = new("VkSubmitInfo", vk.VK_STRUCTURE_TYPE_SUBMIT_INFO, commandBufferCount=n,
                     pCommandBuffers=cmd_array)
        keep: list[Any] = []
        if self.timeline.uses_semaphore:
            timeline_info = new("VkTimelineSemaphoreSubmitInfo",
                                vk.VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO,
                                signalSemaphoreValueCount=1,
                                pSignalSemaphoreValues=self._signal_value)
            submit.pNext = timeline_info
            submit.signalSemaphoreCount = 1
            submit.pSignalSemaphores = self._signal
            keep.append(timeline_info)
            if waits:
                semaphores = ffi.new("VkSemaphore[]", [s for s, _ in waits])
                values = ffi.new("uint64_t[]", [v for _, v in waits])
                stages = ffi.new("VkPipelineStageFlags[]", [_ALL_COMMANDS] * len(waits))
                timeline_info.waitSemaphoreValueCount = len(waits)
                timeline_info.pWaitSemaphoreValues = values
                submit.waitSemaphoreCount = len(waits)
                submit.pWaitSemaphores = semaphores
                submit.pWaitDstStageMask = stages
                keep += [semaphores, values, stages]
        fence = self.timeline.next_fence()
        with self.queue.lock:
            result = lib.vkQueueSubmit(self.queue.handle, 1, submit, fence)
        describe = describe or f"{n} command buffer(s)"
        if result != vk.VK_SUCCESS:
            self.timeline.spare(fence)
            raise self._failure("vkQueueSubmit", result, f"submitting {describe}")
        entry = _InFlight(value, list(owned),
                          self.binder.take_pools() if pools is None else pools, list(on_retire))
        # One step for collectors: a submitted value always has its entry in flight.
        with self._lock:
            self._in_flight.append(entry)
            self.timeline.advance(value, fence)
            self.submissions += 1
            self.last_work = f"submission {value} of {self.name}: {describe}"
        return value

    def _failure(self, call: str, result: int, doing: str) -> VkumdError:
        detail = doing
        if result == vk.VK_ERROR_DEVICE_LOST:
            detail = f"{doing}; the last work submitted was {self.last_work}"
        error = error_for(call, result, detail)
        if isinstance(error, DeviceLost):
            self.queue.health.mark_lost(error)  # every later use of the context says so
        return error

    # -- completion -----------------------------------------------------------------------
    def collect(self) -> int:
        """Recycle everything whose submission has completed; return the completed value.

        Safe from any thread; see the class docstring.
        """
        try:
            done = self.timeline.completed()
        except DeviceLost as exc:
            raise self._failure("vkGetSemaphoreCounterValue", vk.VK_ERROR_DEVICE_LOST,
                                str(exc)) from exc
        with self._lock:
            in_flight = self._in_flight
            if not in_flight or in_flight[0].value > done:
                return done
            finished: list[_InFlight] = []
            while in_flight and in_flight[0].value <= done:
                entry = in_flight.popleft()
                self._free_commands.extend(entry.commands)
                finished.append(entry)
        # Outside the lock: callbacks free memory, which takes the pool's lock.
        for entry in finished:
            self.binder.recycle(entry.pools)
            for release in entry.on_retire:
                release()
        return done

    def wait(self, value: int, timeout_ns: int = FOREVER_NS) -> None:
        """Block until ``value`` completes, then recycle what finished.

        Any number of threads may wait at once; none holds a lock while it blocks, so
        others go on recording and submitting.
        """
        try:
            self.timeline.wait(value, timeout_ns)
        except DeviceLost as exc:
            raise self._failure("vkWaitSemaphores", vk.VK_ERROR_DEVICE_LOST,
                                f"waiting for submission {value} ({exc})") from exc
        self.collect()

    def defer(self, release: Callable[[], None], value: int) -> None:
        """Run ``release`` once submitted work up to ``value`` completes (now, if it has)."""
        with self._lock:
            for entry in self._in_flight:
                if entry.value >= value:
                    entry.on_retire.append(release)
                    return
        release()

    def trim(self, value: int) -> int:
        """Wait for ``value`` (the last one submitted), recycle, then empty the binder's set
        cache and destroy its idle descriptor pools (:meth:`DescriptorBinder.trim`).

        The caller holds off recording meanwhile and has no batch open, whose sets would
        come from the cache (a stream holds its lock).

        Returns:
            How many descriptor pools were destroyed.

        Raises:
            DeviceLost: the device was lost while waiting.
        """
        self.wait(value)
        return self.binder.trim()

    def release(self) -> None:
        """Recycle and destroy everything; the device must be idle."""
        with self._lock:
            finished, self._in_flight = list(self._in_flight), deque()
        for entry in finished:
            for release in entry.on_retire:
                release()
        lib.vkDestroyCommandPool(self.device, self.pool, NULL)
        self.binder.release()
        self.timeline.release()
