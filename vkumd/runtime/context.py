"""The runtime half of a context: instance, device, memory pool, transfers and streams."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
import weakref
from collections.abc import Iterator
from typing import Any

from vkumd import settings
from vkumd.compiler import kernels as _shipped_kernels  # noqa: F401 - registers kernels
from vkumd.compiler.pipeline_cache import PipelineCache
from vkumd.compiler.registry import KernelRegistry
from vkumd.errors import CaptureError, ContextClosed, VkumdError
from vkumd.runtime import profiler
from vkumd.runtime.capture import CaptureStream, Graph, MemoryPins
from vkumd.runtime.current import CurrentStreams
from vkumd.runtime.device import Device, default_device_index, enumerate_caps, resolve_device
from vkumd.runtime.event import timeout_ns
from vkumd.runtime.launch import Launcher
from vkumd.runtime.memory import DEFAULT_BLOCK_SIZE, Allocation, MemoryPool, MemoryUsage
from vkumd.runtime.stream import Stream
from vkumd.runtime.transfer import Transfers
from vkumd.submission.descriptors import DescriptorBinder
from vkumd.submission.oneshot import OneShotQueue
from vkumd.submission.queries import TimestampSlots
from vkumd.vk.caps import DeviceCaps
from vkumd.vk.errors import VulkanError
from vkumd.vk.handle import Handle
from vkumd.vk.instance import Instance

log = logging.getLogger("vkumd.runtime")


def devices() -> list[DeviceCaps]:
    """List every Vulkan device the loader finds, with its capabilities.

    The index of each entry is what ``VKUMD_DEVICE`` and ``Context(device=…)`` accept.
    """
    instance = Instance(validation=False)
    try:
        return [caps for _, caps in enumerate_caps(instance)]
    finally:
        instance.release()


class RuntimeContext(Handle):
    """Owns one device and everything allocated on it.

    Args:
        device: an index into :func:`devices`, a substring of a device name, or ``None`` for
            the default choice (see :func:`vkumd.runtime.device.default_device_index`):
            ``VKUMD_DEVICE`` when set, its first entry when it lists several (``0,1``; one
            context per entry is :func:`vkumd.distributed.open_contexts`).
        validation: enable the Khronos validation layer; ``None`` reads ``VKUMD_VALIDATION``.
        zero_memory: zero-fill every allocation; ``None`` reads ``VKUMD_ZERO_MEMORY``.
        block_size: bytes per pooled ``VkDeviceMemory`` block.
        memory_limit: cap on pooled bytes, an int or a size string (``"1GB"``); ``None``
            reads ``VKUMD_MEMORY_LIMIT``.
        push_descriptors: bind buffers with push descriptors where the device has them;
            ``False`` forces descriptor pools; ``None``: pools on CPU drivers (lavapipe
            executes a push 9 us slower than a cached set), else it reads
            ``VKUMD_DISABLE_PUSH_DESCRIPTORS``.
        device_only_memory: never map tensor memory, so host access goes through staging as
            on a discrete GPU; ``None`` reads ``VKUMD_DEVICE_ONLY_MEMORY``.

    Attributes:
        launch: ``launch(launch)`` records one :class:`~vkumd.compiler.launch.Launch` on the
            current stream (:meth:`vkumd.runtime.launch.Launcher.launch`).
        run: ``run(plan, operands)`` records a planner's launches with the scratch memory
            they need (:meth:`vkumd.runtime.launch.Launcher.run`).
    """

    def __init__(self, device: int | str | None = None, *, validation: bool | None = None,
                 zero_memory: bool | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 memory_limit: int | str | None = None, push_descriptors: bool | None = None,
                 device_only_memory: bool | None = None) -> None:
        settings.check_arguments(locals())  # wrong types stop us before anything is made
        super().__init__()
        settings.check_environment()  # a bad VKUMD_* value stops us before any Vulkan object
        # Re-entrant: the garbage collector may end a DLPack view, which takes this lock,
        # in the middle of close().
        self._close_lock = threading.RLock()
        self._closing = False
        self._host_views = 0
        self._device_kept = False
        self.instance = Instance(validation=validation)
        try:
            found = enumerate_caps(self.instance)
            all_caps = [caps for _, caps in found]
            index = (default_device_index(all_caps) if device is None
                     else resolve_device(all_caps, device))
            physical, self.caps = found[index]
            self.device = Device(self.instance, physical, self.caps)
            families = [self.device.compute_queue.family]
            if self.device.transfer_queue is not None:
                families.append(self.device.transfer_queue.family)
            self.memory = MemoryPool(self.device.handle, self.caps, block_size=block_size,
                                     limit=memory_limit, queue_families=tuple(families),
                                     device_only=device_only_memory)
            self._oneshot = OneShotQueue(self.device.handle, self.device.compute_queue)
            self.transfers = Transfers(self.memory, self._oneshot)
            if push_descriptors is None:
                push_descriptors = (self.caps.device_type != "cpu"
                                    and not settings.flag("VKUMD_DISABLE_PUSH_DESCRIPTORS"))
            use_push = push_descriptors and self.caps.push_descriptors
            self.pipeline_cache = PipelineCache(self.device.handle, self.caps)
            self.kernels = KernelRegistry(self.device.handle, self.caps,
                                          push_descriptors=use_push,
                                          pipeline_cache=self.pipeline_cache)
            self.kernels.on_compile = self._compiled
            family = self.caps.queue_families[self.device.compute_queue.family]
            self.timestamps = (TimestampSlots(self.device.handle, self.caps.timestamp_period_ns,
                                              family.timestamp_valid_bits)
                               if self.caps.timestamps else None)
            self.uses_timeline_semaphores = (self.caps.timeline_semaphores and not settings.flag(
                "VKUMD_DISABLE_TIMELINE_SEMAPHORES"))
            self._streams: list[Stream] = []
            self.pins = MemoryPins()
            self._graphs: weakref.WeakSet[Graph] = weakref.WeakSet()
            self.default_stream = self.stream(name="default stream")
            self._current = CurrentStreams(self, self.default_stream)
            # ctx.launch(launch) and ctx.run(plan, operands): the Launcher's methods, bound
            # here so an op's launch costs no call through the context.
            launcher = Launcher(self, self._current)
            self.launch = launcher.launch
            self.run = launcher.run
        except BaseException:
            self._teardown()
            raise
        self.zero_memory = (settings.flag("VKUMD_ZERO_MEMORY") if zero_memory is None
                            else zero_memory)
        self.handle = self.device.handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run (or is running)."""
        return self.released or self._closing

    def check_open(self, what: str = "this operation") -> None:
        """Raise :class:`ContextClosed` if the context is closed, ``DeviceLost`` if its device
        was lost."""
        if self.released or self._closing:
            raise ContextClosed(f"{what} needs an open context, but its context was closed; "
                                "create a new vkumd.Context")
        health = self.device.health
        if health.lost is not None:  # every op checks: the healthy case costs no call
            health.check(what)

    def allocate(self, size: int, usage: MemoryUsage = MemoryUsage.DEVICE,
                 zero: bool = False) -> Allocation:
        """Allocate ``size`` bytes; zero them when asked or when the context zeroes memory."""
        self.check_open("allocating memory")
        prof = profiler.current
        started = time.perf_counter_ns() if prof is not None else 0
        allocation = self.memory.allocate(size, usage)
        if zero or self.zero_memory:
            try:
                self.transfers.fill_zero(allocation)
            except BaseException:
                self.memory.free(allocation)
                raise
        if prof is not None:
            prof.host_event("alloc", f"{size} B", started, time.perf_counter_ns(),
                            {"bytes": size, "usage": usage.value})
        return allocation

    def free(self, allocation: Allocation) -> None:
        """Return an allocation to the pool now (a no-op after the context closed).

        Only for memory no submitted work uses; tensors go through
        :meth:`release_tensor_memory`.
        """
        if not self.released:
            self.memory.free(allocation)

    @property
    def descriptors(self) -> DescriptorBinder:
        """The default stream's descriptor binder."""
        return self.default_stream.submitter.binder

    # -- streams -------------------------------------------------------------------------
    def stream(self, queue: str = "compute", *, name: str = "",
               max_batch_dispatches: int | None = None,
               max_batch_bytes: int | None = None) -> Stream:
        """A new :class:`~vkumd.runtime.stream.Stream` on this context.

        Args:
            queue: ``"compute"`` or ``"transfer"`` (the device's transfer-only queue where it
                has one; copies only).
            name: shown in errors and profiles.
            max_batch_dispatches: submit after this many dispatches (default 256).
            max_batch_bytes: submit once commands touched this many bytes (default 256 MiB).
        """
        self.check_open("creating a stream")
        budget: dict[str, int] = {}
        if max_batch_dispatches is not None:
            budget["max_batch_dispatches"] = max_batch_dispatches
        if max_batch_bytes is not None:
            budget["max_batch_bytes"] = max_batch_bytes
        created = Stream(self, queue, name=name, **budget)
        self._streams.append(created)
        return created

    def forget_stream(self, stream: Stream) -> None:
        """Drop a released stream (all of its work has completed)."""
        if stream in self._streams:
            self._streams.remove(stream)

    def current_stream(self) -> Any:
        """The stream ops of this thread record into: the innermost ``with stream:`` block,
        or the default stream."""
        return self._current.current()

    def push_stream(self, stream: Any) -> None:
        """Make ``stream`` current for this thread (``with stream:`` calls this).

        Raises:
            VkumdError: ``stream`` belongs to another context.
            CaptureError: this thread is capturing a graph.
        """
        self._current.push(stream)

    def pop_stream(self, stream: Any) -> None:
        """Undo :meth:`push_stream`."""
        self._current.pop(stream)

    @property
    def capturing(self) -> bool:
        """Whether this thread is inside ``with ctx.capture()``."""
        return self._current.capture() is not None

    def refuse_during_capture(self, what: str) -> None:
        """Raise if this thread is capturing a graph: ``what`` would need the host."""
        self._current.refuse_during_capture(what)

    @contextlib.contextmanager
    def capture(self) -> Iterator[Graph]:
        """Record the ops of the ``with`` block into a :class:`~vkumd.runtime.capture.Graph`
        instead of running them; replay it with ``graph.replay()``.

        Inside the block, anything that needs the host to wait (``Tensor.numpy()``,
        ``Tensor.write()``, ``synchronize()``, events) raises
        :class:`~vkumd.errors.CaptureError`, and so do ``with stream:`` and another
        ``ctx.capture()``.
        """
        self.check_open("capturing a graph")
        if self.capturing:
            raise CaptureError("ctx.capture() inside another ctx.capture(): captures do not "
                               "nest; record the inner ops into the outer graph, or end the "
                               "outer capture before starting another")
        graph = Graph(self)
        self._graphs.add(graph)
        capture_stream = CaptureStream(self, graph)
        self.push_stream(capture_stream)
        failed: BaseException | None = None
        try:
            yield graph
        except BaseException as exc:
            failed = exc
            raise
        finally:
            self.pop_stream(capture_stream)
            graph.end_capture(failed)
            if failed is not None:
                graph.release()

    # -- DLPack views ----------------------------------------------------------------------
    def pin_host_view(self, allocation: Allocation) -> None:
        """Keep ``allocation`` (and, past :meth:`close`, its mapping) while a host view of it
        exported through DLPack lives; :meth:`unpin_host_view` ends it.

        Raises:
            ContextClosed: the context is closed.
        """
        with self._close_lock:
            self.check_open("exporting a host view")
            self.pins.pin((allocation.buffer, allocation.offset))
            self._host_views += 1

    def unpin_host_view(self, allocation: Allocation) -> None:
        """A host view of ``allocation`` died: its memory may go back to the pool, and once
        the last view of a closed context has died, the device is released too."""
        parked = self.pins.unpin((allocation.buffer, allocation.offset))
        with self._close_lock:
            self._host_views -= 1
            last_after_close = self._device_kept and self._host_views == 0
            if last_after_close:
                self._device_kept = False
        if last_after_close:
            self._release_device()
        elif parked is not None:
            # Outside the close lock: freeing may take a stream's lock, and the garbage
            # collector runs this from whatever thread, possibly one holding that lock.
            self.release_tensor_memory(parked)

    # -- work -----------------------------------------------------------------------------
    def _compiled(self, kernel: str, seconds: float, spirv_cached: bool) -> None:
        prof = profiler.current
        if prof is not None:
            end = time.perf_counter_ns()
            prof.host_event("compile", kernel, end - int(seconds * 1e9), end,
                            {"spirv_cache": "hit" if spirv_cached else "miss"})

    def before_host_access(self, tensor: Any, what: str = "host access to a tensor") -> None:
        """Wait for the submitted work that uses ``tensor`` before the host reads or writes it.

        Only the submissions that touched the tensor are waited for, on each stream.

        Raises:
            CaptureError: called while this thread captures a graph.
        """
        self.refuse_during_capture(what)
        self.device.health.check(what)
        allocation = tensor.allocation
        if allocation is None:
            return
        key = (allocation.buffer, allocation.offset)
        for stream in list(self._streams):  # a snapshot, as in release_tensor_memory
            try:
                stream.wait_for_memory(key, what)
            except VkumdError:
                # Another thread released that stream meanwhile; its release waited for
                # all of its work, so there is nothing left to wait for.
                if not stream.released or self.closed:
                    raise

    def release_tensor_memory(self, allocation: Allocation) -> None:
        """Return a released tensor's memory once no submitted work, live graph or DLPack view
        uses it (a no-op after :meth:`close`, which frees all memory)."""
        if self.closed:
            return
        if self.device.health.lost is not None:  # no work runs on a lost device any more
            self.memory.free(allocation)
            return
        key = (allocation.buffer, allocation.offset)
        if self.pins.park(key, allocation):
            return
        pending = []
        # A snapshot: another thread may release a stream meanwhile.
        for stream in list(self._streams):
            value = stream.forget_memory(key)
            if value is not None:
                pending.append((stream, value))
        if not pending:
            self.memory.free(allocation)
            return
        remaining = [len(pending)]

        def release_when_all_done() -> None:
            remaining[0] -= 1
            if remaining[0] == 0 and not self.released:
                self.memory.free(allocation)

        for stream, value in pending:
            stream.defer_until(release_when_all_done, value)

    def synchronize(self, timeout: float | None = None) -> None:
        """Submit recorded work on every stream and wait until the device has finished it.

        Args:
            timeout: seconds to wait at most, for all streams together; ``None`` waits as
                long as it takes.

        Raises:
            TimeoutError: the work had not finished in time (the context stays usable).
            VkumdTypeError, VkumdValueError: ``timeout`` is not a number of seconds >= 0.
            ContextClosed: the context was closed.
            CaptureError: this thread is capturing a graph.
        """
        timeout_ns(timeout)
        self.check_open("synchronize")
        self.refuse_during_capture("ctx.synchronize()")
        deadline = None if timeout is None else time.monotonic() + timeout
        for stream in list(self._streams):
            if not stream.released:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                stream.synchronize(left)

    def close(self) -> None:
        """Wait for the device, then release every Vulkan object. Safe to call twice."""
        self.release()

    def _release(self) -> None:
        self._teardown()

    def _teardown(self) -> None:
        with self._close_lock:
            self._closing = True
            device = getattr(self, "device", None)
            for stream in getattr(self, "_streams", ()):
                # Work the program recorded still runs before close.
                stream.submit_pending()
            if device is not None and not device.released:
                try:
                    device.wait_idle()
                except VulkanError as exc:  # a lost device, say: it still must be released
                    log.warning("closing the context: %s", exc)
            for graph in list(getattr(self, "_graphs", ())):
                graph.release()
            for stream in getattr(self, "_streams", ()):
                stream.release()
            timestamps = getattr(self, "timestamps", None)
            if timestamps is not None:
                timestamps.release()
            cache = getattr(self, "pipeline_cache", None)
            if cache is not None and not cache.released:
                cache.save()
            for name in ("kernels", "pipeline_cache", "transfers", "_oneshot"):
                part: Any = getattr(self, name, None)
                if part is not None:
                    part.release()
            if self._host_views:
                # A numpy view from np.from_dlpack(tensor) points into mapped memory; the
                # memory, the device and the instance stay until the last view dies, so
                # reading it after close still reads the tensor's bytes (not freed memory).
                log.info("context closed with %d DLPack view(s) alive: its memory stays "
                         "mapped until they are gone", self._host_views)
                self._device_kept = True
                return
            self._release_device()

    def _release_device(self) -> None:
        for name in ("memory", "device", "instance"):
            part: Any = getattr(self, name, None)
            if part is not None:
                part.release()

    def __enter__(self) -> RuntimeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
