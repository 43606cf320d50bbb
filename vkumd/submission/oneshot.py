"""Synchronous one-off command submission: record, submit, wait.

For work that must finish before the call returns (staging copies on a discrete GPU,
zero-filling memory the host cannot map). Streams batch everything else.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from vkumd.errors import TimeoutError
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import check
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
            ``lock``).
    """

    def __init__(self, device: Any, queue: Any) -> None:
        super().__init__()
        self.device = device
        self.queue = queue
        self._lock = threading.Lock()
        self.handle = create_command_pool(device, queue.family)
        self._cmd = allocate_command_buffer(device, self.handle)
        fence_info = new("VkFenceCreateInfo", vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO)
        fence = ffi.new("VkFence*")
        check("vkCreateFence", lib.vkCreateFence(device, fence_info, NULL, fence))
        self._fence = fence[0]
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
        """
        with self._lock:
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
            result = lib.vkWaitForFences(self.device, 1, self._fence_array, vk.VK_TRUE,
                                         timeout_ns)
            if result == vk.VK_TIMEOUT:
                raise TimeoutError(f"one-shot submission did not finish in {timeout_ns} ns")
            check("vkWaitForFences", result)

    def _release(self) -> None:
        lib.vkDestroyFence(self.device, self._fence, NULL)
        lib.vkDestroyCommandPool(self.device, self.handle, NULL)
