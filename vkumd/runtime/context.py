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
from vkumd.errors import ContextClosed, VkumdError
from vkumd.runtime import profiler
from vkumd.runtime.capture import CaptureStream, Graph
from vkumd.runtime.device import Device, default_device_index, enumerate_caps, resolve_device
from vkumd.runtime.memory import DEFAULT_BLOCK_SIZE, Allocation, MemoryPool, MemoryUsage
from vkumd.runtime.stream import MemoryKey, Stream
from vkumd.runtime.transfer import Transfers
from vkumd.submission.descriptors import BufferRange, DescriptorBinder
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
            the default choice (see :func:`vkumd.runtime.device.default_device_index`).
        validation: enable the Khronos validation layer; ``None`` reads ``VKUMD_VALIDATION``.
        zero_memory: zero-fill every allocation; ``None`` reads ``VKUMD_ZERO_MEMORY``.
        block_size: bytes per pooled ``VkDeviceMemory`` block.
        memory_limit: cap on pooled bytes, an int or a size string (``"1GB"``); ``None``
            reads ``VKUMD_MEMORY_LIMIT``.
        push_descriptors: bind buffers with push descriptors where the device has them;
            ``False`` forces descriptor pools; ``None`` reads ``VKUMD_DISABLE_PUSH_DESCRIPTORS``.
        device_only_memory: never map tensor memory, so host access goes through staging as
            on a discrete GPU; ``None`` reads ``VKUMD_DEVICE_ONLY_MEMORY``.
    """

    def __init__(self, device: int | str | None = None, *, validation: bool | None = None,
                 zero_memory: bool | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 memory_limit: int | str | None = None, push_descriptors: bool | None = None,
                 device_only_memory: bool | None = None) -> None:
        super().__init__()
        self._close_lock = threading.Lock()
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
                push_descriptors = not settings.flag("VKUMD_DISABLE_PUSH_DESCRIPTORS")
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
            self._local = threading.local()
            self._streams: list[Stream] = []
            self._graph_refs: dict[MemoryKey, int] = {}
            self._pinned: dict[MemoryKey, Allocation] = {}
            self._graphs: weakref.WeakSet[Graph] = weakref.WeakSet()
            self._programs: dict[tuple, Any] = {}
            self.default_stream = self.stream(name="default stream")
        except BaseException:
            self._teardown()
            raise
        self.zero_memory = (settings.flag("VKUMD_ZERO_MEMORY") if zero_memory is None
                            else zero_memory)
        self.handle = self.device.handle

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has run."""
        return self.released

    def check_open(self, what: str = "this operation") -> None:
        """Raise :class:`ContextClosed` if the context is closed, ``DeviceLost`` if its device
        was lost."""
        if self.released:
            raise ContextClosed(f"{what} needs an open context, but its context was closed; "
                                "create a new vkumd.Context")
        self.device.health.check(what)

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
        stack = getattr(self._local, "stack", None)
        return stack[-1] if stack else self.default_stream

    def push_stream(self, stream: Any) -> None:
        """Make ``stream`` current for this thread (``with stream:`` calls this)."""
        if stream.context is not self:
            raise VkumdError(f"{stream.name} belongs to another context")
        stack = getattr(self._local, "stack", None)
        if stack is None:
            stack = self._local.stack = []
        stack.append(stream)

    def pop_stream(self, stream: Any) -> None:
        """Undo :meth:`push_stream`."""
        stack = getattr(self._local, "stack", None)
        if stack and stack[-1] is stream:
            stack.pop()

    def refuse_during_capture(self, what: str) -> None:
        """Raise if this thread is capturing a graph: ``what`` would need the host."""
        current = self.current_stream()
        if isinstance(current, CaptureStream):
            current.refuse(what)

    @contextlib.contextmanager
    def capture(self) -> Iterator[Graph]:
        """Record the ops of the ``with`` block into a :class:`~vkumd.runtime.capture.Graph`
        instead of running them; replay it with ``graph.replay()``.

        Inside the block, anything that needs the host to wait (``Tensor.numpy()``,
        ``Tensor.write()``, ``synchronize()``, events) raises
        :class:`~vkumd.runtime.capture.CaptureError`.
        """
        self.check_open("capturing a graph")
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
            graph._end_capture(failed)
            if failed is not None:
                graph.release()

    def pin_for_graph(self, key: MemoryKey) -> None:
        """Keep the memory at ``key`` allocated while a graph that uses it lives."""
        self._graph_refs[key] = self._graph_refs.get(key, 0) + 1

    def unpin_graph(self, graph: Graph) -> None:
        """Drop ``graph``'s pins; memory its tensors released meanwhile goes back now."""
        for key in graph.keys:
            refs = self._graph_refs.get(key, 0) - 1
            if refs > 0:
                self._graph_refs[key] = refs
                continue
            self._graph_refs.pop(key, None)
            allocation = self._pinned.pop(key, None)
            if allocation is not None:
                self.release_tensor_memory(allocation)

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
        for stream in self._streams:
            value = stream.uses.get(key)
            if value is not None and value > stream.submitter.timeline._completed:
                stream.wait_value(value, what=what)

    def release_tensor_memory(self, allocation: Allocation) -> None:
        """Return a released tensor's memory once no submitted work or live graph uses it."""
        if self.released:
            return
        if self.device.health.lost is not None:  # no work runs on a lost device any more
            self.memory.free(allocation)
            return
        key = (allocation.buffer, allocation.offset)
        if key in self._graph_refs:
            self._pinned[key] = allocation
            return
        pending = []
        for stream in self._streams:
            value = stream.uses.pop(key, None)
            if value is not None and value > stream.completed_value():
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

    def dispatch(self, kernel: str, variant: dict, buffers: list[BufferRange], push: bytes,
                 groups: tuple[int, int, int], writes: tuple[int, ...] = ()) -> None:
        """Record one kernel on the current stream; it runs asynchronously.

        Args:
            kernel: a registered kernel name.
            variant: its defines and specialization constants.
            buffers: ``(VkBuffer, offset, range)`` for bindings 0..n-1, each the whole range
                of one allocation (hazard tracking identifies memory by buffer and offset).
            push: the packed push-constant block.
            groups: workgroup counts.
            writes: indices into ``buffers`` that the kernel writes (the rest it only reads);
                barriers are derived from them.
        """
        fast_key = (kernel, *variant.items())
        program = self._programs.get(fast_key)
        if program is None:
            self.check_open(f"dispatching {kernel}")
            program = self.kernels.program(kernel, variant)
            self._programs[fast_key] = program
        self.current_stream().dispatch(program, buffers, push, groups, writes)

    def synchronize(self) -> None:
        """Submit recorded work on every stream and wait until the device has finished it."""
        self.check_open("synchronize")
        self.refuse_during_capture("ctx.synchronize()")
        for stream in list(self._streams):
            if not stream.released:
                stream.synchronize()

    def close(self) -> None:
        """Wait for the device, then release every Vulkan object. Safe to call twice."""
        self.release()

    def _release(self) -> None:
        self._teardown()

    def _teardown(self) -> None:
        with self._close_lock:
            device = getattr(self, "device", None)
            for stream in getattr(self, "_streams", ()):
                if stream.released:
                    continue
                # Work the program recorded still runs before close; a batch whose recording
                # broke has already raised to its caller and is dropped here.
                with contextlib.suppress(VkumdError):
                    stream.flush()
            if device is not None and not device.released:
                try:
                    device.wait_idle()
                except VulkanError as exc:  # a lost device, say: it still must be released
                    log.warning("closing the context: %s", exc)
            for graph in list(getattr(self, "_graphs", ())):
                if not graph.released:
                    graph.released = True
                    graph.submitter.release()
            for stream in getattr(self, "_streams", ()):
                if not stream.released:
                    stream.released = True
                    stream.submitter.release()
            timestamps = getattr(self, "timestamps", None)
            if timestamps is not None:
                timestamps.release()
            cache = getattr(self, "pipeline_cache", None)
            if cache is not None and not cache.released:
                cache.save()
            for name in ("kernels", "pipeline_cache", "transfers", "_oneshot", "memory"):
                part: Any = getattr(self, name, None)
                if part is not None:
                    part.release()
            if device is not None:
                device.release()
            instance = getattr(self, "instance", None)
            if instance is not None:
                instance.release()

    def __enter__(self) -> RuntimeContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
