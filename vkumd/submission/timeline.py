"""Counting a queue's submissions: a timeline semaphore, or one fence per submission.

Every submission signals the next value of its stream's counter; resources a submission used
are recycled once :meth:`Timeline.completed` reaches its value. Timeline semaphores are core
in Vulkan 1.2, so the fence path only serves drivers that leave the feature off; it cannot
make one queue wait for another on the device, so cross-stream waits fall back to the host.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

from vkumd.errors import TimeoutError, VkumdValueError
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.errors import check
from vkumd.vk.handle import Handle

FOREVER_NS = 2**64 - 1


class Timeline(Handle):
    """A monotonically increasing counter of completed submissions; safe to share.

    Any thread may call :meth:`completed` and :meth:`wait`. A short lock guards the
    bookkeeping (the completed value, the fences in flight and the spare ones); no thread
    holds it while blocked on the device, so one thread's wait never delays another's
    submission or poll. :meth:`next_fence`, :meth:`advance` and :meth:`spare` belong to the
    submitter, which calls them in value order (see
    :class:`~vkumd.submission.submitter.Submitter`).

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
        self._lock = threading.Lock()
        self._fences: deque[tuple[int, Any]] = deque()  # fence path: (value, VkFence)
        self._spare_fences: list[Any] = []
        # Fences a thread is blocked on: resetting one would make that thread wait for a
        # later submission, so a retired fence is spared only when its last waiter leaves.
        self._waiters: dict[Any, int] = {}
        self._retired_waited: set[Any] = set()
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
            self._wait_semaphores = ffi.new("VkSemaphore[1]", [self.handle])
            self._per_thread = threading.local()
        else:
            self.handle = True  # fences are made per submission

    def next_fence(self) -> Any:
        """A reset fence for the next submission to signal (fence path), else ``NULL``.

        Hand it back with :meth:`advance` once submitted, or :meth:`spare` if the submission
        failed.
        """
        if self.uses_semaphore:
            return NULL
        with self._lock:
            fence = self._spare_fences.pop() if self._spare_fences else None
        if fence is not None:
            # No other thread sees a spare fence, so no lock is needed to reset it.
            check("vkResetFences", lib.vkResetFences(self.device, 1, ffi.new("VkFence*", fence)))
            return fence
        info = new("VkFenceCreateInfo", vk.VK_STRUCTURE_TYPE_FENCE_CREATE_INFO)
        out = ffi.new("VkFence*")
        check("vkCreateFence", lib.vkCreateFence(self.device, info, NULL, out))
        return out[0]

    def advance(self, value: int, fence: Any) -> None:
        """Record that ``value`` was submitted, signalling ``fence`` (``NULL``: the semaphore).

        Only after the submission: ``vkQueueSubmit`` needs the fence to itself, so pollers
        must not see it before.
        """
        if not self.uses_semaphore:
            with self._lock:
                self._fences.append((value, fence))
        self.submitted = value

    def spare(self, fence: Any) -> None:
        """Take back a fence from :meth:`next_fence` that no submission signals."""
        if not self.uses_semaphore:
            with self._lock:
                self._spare_fences.append(fence)

    def completed(self) -> int:
        """The highest value whose submission (and every earlier one) has finished."""
        if self._completed == self.submitted:
            return self._completed
        with self._lock:
            if self.uses_semaphore:
                check("vkGetSemaphoreCounterValue",
                      lib.vkGetSemaphoreCounterValue(self.device, self.handle, self._value_out))
                # Another thread may have read a later value meanwhile: never step back.
                self._completed = max(self._completed, int(self._value_out[0]))
                return self._completed
            fences = self._fences
            while fences:
                value, fence = fences[0]
                status = lib.vkGetFenceStatus(self.device, fence)
                if status == vk.VK_NOT_READY:
                    break
                check("vkGetFenceStatus", status)
                fences.popleft()
                if fence in self._waiters:
                    self._retired_waited.add(fence)
                else:
                    self._spare_fences.append(fence)
                self._completed = value
            return self._completed

    def wait(self, value: int, timeout_ns: int = FOREVER_NS) -> None:
        """Block until ``value`` has completed; the GIL is released while the device works.

        Several threads may wait at once, for the same or different values; none holds a
        lock while it blocks.

        Raises:
            TimeoutError: it had not completed after ``timeout_ns``.
            DeviceLost: the device was lost (the caller adds what it had submitted).
            VkumdValueError: fence path only: ``value`` was never submitted.
        """
        if value <= self._completed or value <= self.completed():
            return
        if self.uses_semaphore:
            result = lib.vkWaitSemaphores(self.device, self._wait_info(value), timeout_ns)
        else:
            fence = self._enter_fence_wait(value)
            if fence is None:
                return  # another thread retired it since we looked
            try:
                result = lib.vkWaitForFences(self.device, 1, ffi.new("VkFence*", fence),
                                             vk.VK_TRUE, timeout_ns)
            finally:
                self._leave_fence_wait(fence)
        if result == vk.VK_TIMEOUT:
            raise TimeoutError(
                f"{self.name}: submission {value} had not finished after "
                f"{timeout_ns / 1e9:g} s (completed: {self.completed()}); the context is still "
                "usable, and you may wait again")
        check("vkWaitSemaphores" if self.uses_semaphore else "vkWaitForFences", result)
        self.completed()

    def _wait_info(self, value: int) -> Any:
        """This thread's ``VkSemaphoreWaitInfo`` for ``value``.

        Per thread, not shared: another thread's wait must not change the value ours reads.
        """
        local = self._per_thread
        info = getattr(local, "info", None)
        if info is None:
            local.values = ffi.new("uint64_t[1]")
            local.info = info = new("VkSemaphoreWaitInfo",
                                    vk.VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO, semaphoreCount=1,
                                    pSemaphores=self._wait_semaphores, pValues=local.values)
        local.values[0] = value
        return info

    def _enter_fence_wait(self, value: int) -> Any:
        """The fence signalled with ``value`` (now held from reuse), or None if retired.

        Raises:
            VkumdValueError: ``value`` was never submitted.
        """
        with self._lock:
            if value <= self._completed:
                return None
            fence = next((f for v, f in self._fences if v == value), None)
            if fence is None:
                raise VkumdValueError(f"{self.name}: submission {value} was never made (the "
                                      f"last is {self.submitted}); a fence can only be "
                                      "waited for once submitted")
            self._waiters[fence] = self._waiters.get(fence, 0) + 1
            return fence

    def _leave_fence_wait(self, fence: Any) -> None:
        with self._lock:
            left = self._waiters.pop(fence) - 1
            if left:
                self._waiters[fence] = left
            elif fence in self._retired_waited:
                self._retired_waited.discard(fence)
                self._spare_fences.append(fence)

    def _release(self) -> None:
        if self.uses_semaphore:
            lib.vkDestroySemaphore(self.device, self.handle, NULL)
            return
        for fence in [f for _, f in self._fences] + self._spare_fences + list(
                self._retired_waited):
            lib.vkDestroyFence(self.device, fence, NULL)
        self._fences.clear()
        self._spare_fences.clear()
        self._retired_waited.clear()
