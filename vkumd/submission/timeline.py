"""Counting a queue's submissions: a timeline semaphore, or one fence per submission.

Every submission signals the next value of its stream's counter; resources a submission used
are recycled once :meth:`Timeline.completed` reaches its value. Timeline semaphores are core
in Vulkan 1.2, so the fence path only serves drivers that leave the feature off; it cannot
make one queue wait for another on the device, so cross-stream waits fall back to the host.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from vkumd.errors import TimeoutError
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import check
from vkumd.vk.handle import Handle

FOREVER_NS = 2**64 - 1


class Timeline(Handle):
    """A monotonically increasing counter of completed submissions.

    Args:
        device: the ``VkDevice``.
        semaphore: use a timeline semaphore (``False``: fences).
        name: shown in timeout messages.
    """

    def __init__(self, device: Any, *, semaphore: bool = True, name: str = "stream") -> None:
        super().__init__()
        self.device = device
        self.name = name
        self.uses_semaphore = semaphore
        self.submitted = 0
        self._completed = 0
        self._fences: deque[tuple[int, Any]] = deque()  # fence path: (value, VkFence)
        self._spare_fences: list[Any] = []
        if semaphore:
            type_info = new("VkSemaphoreTypeCreateInfo",
                            vk.VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO,
                            semaphoreType=vk.VK_SEMAPHORE_TYPE_TIMELINE, initialValue=0)
            info = new("VkSemaphoreCreateInfo", vk.VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO,
                       pNext=type_info)
            out = ffi.new("VkSemaphore*")
            check("vkCreateSemaphore", lib.vkCreateSemaphore(device, info, NULL, out))
            self.handle = out[0]
            self._value_out = ffi.new("uint64_t*")
            self._wait_values = ffi.new("uint64_t[1]")
            self._wait_semaphores = ffi.new("VkSemaphore[1]", [self.handle])
            self._wait_info = new("VkSemaphoreWaitInfo",
                                  vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, semaphoreCount=1,
                                  pSemaphores=self._wait_semaphores, pValues=self._wait_values)
        else:
            self.handle = True  # fences are made per submission

    def next_fence(self, value: int) -> Any:
        """The fence the submission of ``value`` signals (fence path), else ``NULL``."""
        if self.uses_semaphore:
            return NULL
        if self._spare_fences:
            fence = self._spare_fences.pop()
            check("vkResetFences", lib.vkResetFences(self.device, 1, ffi.new("VkFence*", fence)))
        else:
            info = new("VkFenceCreateInfo", vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO)
            out = ffi.new("VkFence*")
            check("vkCreateFence", lib.vkCreateFence(self.device, info, NULL, out))
            fence = out[0]
        self._fences.append((value, fence))
        return fence

    def cancel_fence(self, value: int) -> None:
        """Take back the fence :meth:`next_fence` gave for ``value``, whose submission failed:
        it would never signal, and a wait for the next submission would wait on it forever."""
        if self._fences and self._fences[-1][0] == value:
            self._spare_fences.append(self._fences.pop()[1])

    def completed(self) -> int:
        """The highest value whose submission (and every earlier one) has finished."""
        if self._completed == self.submitted:
            return self._completed
        if self.uses_semaphore:
            check("vkGetSemaphoreCounterValue",
                  lib.vkGetSemaphoreCounterValue(self.device, self.handle, self._value_out))
            self._completed = int(self._value_out[0])
        else:
            while self._fences:
                value, fence = self._fences[0]
                status = lib.vkGetFenceStatus(self.device, fence)
                if status == vk.VK_NOT_READY:
                    break
                check("vkGetFenceStatus", status)
                self._fences.popleft()
                self._spare_fences.append(fence)
                self._completed = value
        return self._completed

    def wait(self, value: int, timeout_ns: int = FOREVER_NS) -> None:
        """Block until ``value`` has completed; the GIL is released while the device works.

        Raises:
            TimeoutError: it had not completed after ``timeout_ns``.
            DeviceLost: the device was lost (the caller adds what it had submitted).
        """
        if value <= self._completed or value <= self.completed():
            return
        if self.uses_semaphore:
            self._wait_values[0] = value
            result = lib.vkWaitSemaphores(self.device, self._wait_info, timeout_ns)
        else:
            fence = next(f for v, f in self._fences if v >= value)
            result = lib.vkWaitForFences(self.device, 1, ffi.new("VkFence*", fence), vk.VK_TRUE,
                                         timeout_ns)
        if result == vk.VK_TIMEOUT:
            raise TimeoutError(
                f"{self.name}: submission {value} had not finished after "
                f"{timeout_ns / 1e9:g} s (completed: {self.completed()}); the context is still "
                "usable, and you may wait again")
        check("vkWaitSemaphores" if self.uses_semaphore else "vkWaitForFences", result)
        self.completed()

    def _release(self) -> None:
        if self.uses_semaphore:
            lib.vkDestroySemaphore(self.device, self.handle, NULL)
            return
        for _, fence in self._fences:
            lib.vkDestroyFence(self.device, fence, NULL)
        for fence in self._spare_fences:
            lib.vkDestroyFence(self.device, fence, NULL)
        self._fences.clear()
        self._spare_fences.clear()
