"""Synchronous one-off command submission: record, submit, wait.

For work that must finish before the call returns (staging copies on a discrete GPU,
zero-filling memory the host cannot map). Streams batch everything else.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

from vkumd.errors import TimeoutError
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import DeviceLost, VulkanError, check
from vkumd.vk.handle import Handle

DEFAULT_TIMEOUT_NS = 60 * 1_000_000_000


def create_command_pool(device: Any, family: int) -> Any:
    """A ``VkCommandPool`` for ``family`` whose command buffers can be reset one by one."""
    info = new("VkCommandPoolCreateInfo", vk.VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
               flags=vk.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
               queueFamilyIndex=family)
    out = ffi.new("VkCommandPool*")
    check("vkCreateCommandPool", lib.vkCreateCommandPool(device, info, NULL, out))
    return out[0]


def allocate_command_buffer(device: Any, pool: Any) -> Any:
    """One primary command buffer from ``pool``."""
    info = new("VkCommandBufferAllocateInfo", vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
               commandPool=pool, level=vk.VK_COMMAND_BUFFER_LEVEL_PRIMARY, commandBufferCount=1)
    out = ffi.new("VkCommandBuffer*")
    check("vkAllocateCommandBuffers", lib.vkAllocateCommandBuffers(device, info, out))
    return out[0]


class OneShotQueue(Handle):
    """A command pool and fence for blocking submissions to one queue.

    Args:
        device: the ``VkDevice``.
        queue: a :class:`vkumd.runtime.device.Queue`-like object (``handle``, ``family``,
            ``lock``, ``health``).
    """

    def __init__(self, device: Any, queue: Any) -> None:
        super().__init__()
        self.device = device
        self.queue = queue
        self._lock = threading.Lock()
        self.handle = create_command_pool(device, queue.family)
        try:
            self._cmd = allocate_command_buffer(device, self.handle)
            fence_info = new("VkFenceCreateInfo", vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO)
            fence = ffi.new("VkFence*")
            check("vkCreateFence", lib.vkCreateFence(device, fence_info, NULL, fence))
        except BaseException:
            lib.vkDestroyCommandPool(device, self.handle, NULL)
            raise
        self._fence = fence[0]
        # A submission whose wait failed: the device may still run it, so the command buffer
        # and fence are not reset before it has been waited for.
        self._pending = False
        self._begin = new("VkCommandBufferBeginInfo",
                          vk.VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                          flags=vk.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT)
        self._cmd_array = ffi.new("VkCommandBuffer[]", [self._cmd])
        self._submit = new("VkSubmitInfo", vk.VK_STRUCTURE_TYPE_SUBMIT_INFO,
                           commandBufferCount=1, pCommandBuffers=self._cmd_array)
        self._fence_array = ffi.new("VkFence[]", [self._fence])

    def run(self, record: Callable[[Any], None], timeout_ns: int = DEFAULT_TIMEOUT_NS) -> None:
        """Record commands with ``record(command_buffer)``, submit them and wait.

        Raises:
            TimeoutError: the work did not finish within ``timeout_ns``.
            VulkanError: a Vulkan call failed; the queue stays usable (a submission whose
                wait failed is waited for before the next one reuses its command buffer).
        """
        with self._lock:
            self.queue.health.check("a one-shot submission")
            try:
                self._run(record, timeout_ns)
            except DeviceLost as exc:
                self.queue.health.mark_lost(exc)
                raise

    def _run(self, record: Callable[[Any], None], timeout_ns: int) -> None:
        if self._pending:
            self._wait(timeout_ns)
        check("vkResetCommandBuffer", lib.vkResetCommandBuffer(self._cmd, 0))
        check("vkBeginCommandBuffer", lib.vkBeginCommandBuffer(self._cmd, self._begin))
        try:
            record(self._cmd)
        finally:
            check("vkEndCommandBuffer", lib.vkEndCommandBuffer(self._cmd))
        check("vkResetFences", lib.vkResetFences(self.device, 1, self._fence_array))
        with self.queue.lock:
            check("vkQueueSubmit",
                  lib.vkQueueSubmit(self.queue.handle, 1, self._submit, self._fence))
        self._pending = True
        try:
            self._wait(timeout_ns)
        except VulkanError:
            # The caller frees what the work used once this raises; when a second wait
            # succeeds (the first failed for want of memory, say) it is safe to.
            with contextlib.suppress(VulkanError, TimeoutError):
                self._wait(timeout_ns)
            raise

    def _wait(self, timeout_ns: int) -> None:
        result = lib.vkWaitForFences(self.device, 1, self._fence_array, vk.VK_TRUE, timeout_ns)
        if result == vk.VK_TIMEOUT:
            raise TimeoutError(f"one-shot submission did not finish in {timeout_ns} ns")
        check("vkWaitForFences", result)
        self._pending = False

    def _release(self) -> None:
        lib.vkDestroyFence(self.device, self._fence, NULL)
        lib.vkDestroyCommandPool(self.device, self.handle, NULL)
