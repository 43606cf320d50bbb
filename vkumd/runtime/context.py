"""The runtime half of a context: instance, device, memory pool and transfers."""

from __future__ import annotations

import logging
import threading
from typing import Any

from vkumd import settings
from vkumd.compiler import kernels as _shipped_kernels  # noqa: F401 - registers kernels
from vkumd.compiler.pipeline_cache import PipelineCache
from vkumd.compiler.registry import KernelRegistry
from vkumd.runtime.device import Device, default_device_index, enumerate_caps, resolve_device
from vkumd.runtime.memory import DEFAULT_BLOCK_SIZE, Allocation, MemoryPool, MemoryUsage
from vkumd.runtime.transfer import Transfers
from vkumd.submission.descriptors import BufferRange, DescriptorBinder
from vkumd.submission.oneshot import OneShotQueue
from vkumd.submission.recorder import record_dispatch
from vkumd.vk.caps import DeviceCaps
from vkumd.vk.errors import ContextClosed
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
        memory_limit: cap on pooled bytes; ``None`` reads ``VKUMD_MEMORY_LIMIT``.
        push_descriptors: bind buffers with push descriptors where the device has them;
            ``False`` forces descriptor pools; ``None`` reads ``VKUMD_DISABLE_PUSH_DESCRIPTORS``.
    """

    def __init__(self, device: int | str | None = None, *, validation: bool | None = None,
                 zero_memory: bool | None = None, block_size: int = DEFAULT_BLOCK_SIZE,
                 memory_limit: int | None = None, push_descriptors: bool | None = None
                 ) -> None:
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
            self.memory = MemoryPool(self.device.handle, self.caps, block_size=block_size,
                                     limit=memory_limit)
            self._oneshot = OneShotQueue(self.device.handle, self.device.compute_queue)
            self.transfers = Transfers(self.memory, self._oneshot)
            if push_descriptors is None:
                push_descriptors = not settings.flag("VKUMD_DISABLE_PUSH_DESCRIPTORS")
            use_push = push_descriptors and self.caps.push_descriptors
            self.pipeline_cache = PipelineCache(self.device.handle, self.caps)
            self.kernels = KernelRegistry(self.device.handle, self.caps,
                                          push_descriptors=use_push,
                                          pipeline_cache=self.pipeline_cache)
            self.descriptors = DescriptorBinder(self.device.handle, use_push)
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
        """Raise :class:`ContextClosed` if the context is closed."""
        if self.released:
            raise ContextClosed(f"{what} needs an open context, but its context was closed; "
                                "create a new vkumd.Context")

    def allocate(self, size: int, usage: MemoryUsage = MemoryUsage.DEVICE,
                 zero: bool = False) -> Allocation:
        """Allocate ``size`` bytes; zero them when asked or when the context zeroes memory."""
        self.check_open("allocating memory")
        allocation = self.memory.allocate(size, usage)
        if zero or self.zero_memory:
            self.transfers.fill_zero(allocation)
        return allocation

    def free(self, allocation: Allocation) -> None:
        """Return an allocation to the pool (a no-op after the context closed)."""
        if not self.released:
            self.memory.free(allocation)

    def before_host_access(self, tensor: object) -> None:
        """Wait for submitted work that uses ``tensor`` before the host reads or writes it.

        Every submission is synchronous so far, so there is nothing to wait for; streams
        override this to flush and wait only on the work that touches the tensor.
        """

    def release_tensor_memory(self, allocation: Allocation) -> None:
        """Return a released tensor's memory once no submitted work uses it."""
        self.free(allocation)

    def dispatch(self, kernel: str, variant: dict, buffers: list[BufferRange], push: bytes,
                 groups: tuple[int, int, int], writes: tuple[int, ...] = ()) -> None:
        """Run one kernel now and wait for it (the eager path, until streams batch work).

        Args:
            kernel: a registered kernel name.
            variant: its defines and specialization constants.
            buffers: ``(VkBuffer, offset, range)`` for bindings 0..n-1.
            push: the packed push-constant block.
            groups: workgroup counts.
            writes: indices into ``buffers`` that the kernel writes (the rest it only reads);
                hazard tracking orders work by them.
        """
        self.check_open(f"dispatching {kernel}")
        program = self.kernels.program(kernel, variant)
        self._oneshot.run(lambda cmd: record_dispatch(cmd, program, self.descriptors, buffers,
                                                      push, groups))
        if not self.descriptors.push_descriptors:
            self.descriptors.reset()

    def synchronize(self) -> None:
        """Wait until the device has finished all work submitted from this context."""
        self.check_open("synchronize")
        self.device.wait_idle()

    def close(self) -> None:
        """Wait for the device, then release every Vulkan object. Safe to call twice."""
        self.release()

    def _release(self) -> None:
        self._teardown()

    def _teardown(self) -> None:
        with self._close_lock:
            device = getattr(self, "device", None)
            if device is not None and not device.released:
                device.wait_idle()
            cache = getattr(self, "pipeline_cache", None)
            if cache is not None and not cache.released:
                cache.save()
            for name in ("kernels", "descriptors", "pipeline_cache", "transfers", "_oneshot",
                         "memory"):
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
