"""Binding storage buffers to a dispatch: push descriptors, or sets from pools that grow.

With ``VK_KHR_push_descriptor`` the buffers go straight into the command buffer. Without it
sets are allocated from pools; a pool that runs out (``VK_ERROR_OUT_OF_POOL_MEMORY`` or
``VK_ERROR_FRAGMENTED_POOL``) is joined by a new one, and :meth:`DescriptorBinder.reset`
recycles them all once the submissions that used them have completed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vkumd.vk.binding import NULL, ffi, lib, new, raw_device_proc, vk
from vkumd.vk.errors import ERROR_FRAGMENTED_POOL, ERROR_OUT_OF_POOL_MEMORY, check
from vkumd.vk.handle import Handle

SETS_PER_POOL = 1024
BUFFERS_PER_POOL = 8 * SETS_PER_POOL

BufferRange = tuple[Any, int, int]  # (VkBuffer, offset, range)


class DescriptorPool(Handle):
    """One ``VkDescriptorPool`` of storage-buffer descriptors."""

    def __init__(self, device: Any) -> None:
        super().__init__()
        self.device = device
        size = ffi.new("VkDescriptorPoolSize*")
        size.type = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
        size.descriptorCount = BUFFERS_PER_POOL
        info = new("VkDescriptorPoolCreateInfo", vk.VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                   maxSets=SETS_PER_POOL, poolSizeCount=1, pPoolSizes=size)
        out = ffi.new("VkDescriptorPool*")
        check("vkCreateDescriptorPool", lib.vkCreateDescriptorPool(device, info, NULL, out))
        self.handle = out[0]
        self.capacity = SETS_PER_POOL
        self.sets = 0

    def _release(self) -> None:
        lib.vkDestroyDescriptorPool(self.device, self.handle, NULL)


class DescriptorBinder:
    """Writes the buffers of one dispatch into a command buffer.

    Args:
        device: the ``VkDevice``.
        push_descriptors: use ``vkCmdPushDescriptorSetKHR`` (the device must enable it).
    """

    def __init__(self, device: Any, push_descriptors: bool) -> None:
        self.device = device
        self.push_descriptors = push_descriptors
        self._push = (raw_device_proc(device, "vkCmdPushDescriptorSetKHR",
                                      "PFN_vkCmdPushDescriptorSetKHR")
                      if push_descriptors else None)
        self._pools: list[DescriptorPool] = []
        self._current = 0
        self.sets_allocated = 0

    @property
    def pool_count(self) -> int:
        """How many descriptor pools the pooled path has created."""
        return len(self._pools)

    def bind(self, cmd: Any, layout: Any, buffers: Sequence[BufferRange]) -> None:
        """Bind ``buffers`` to bindings 0..n-1 of set 0 of ``layout`` (a compiler Layout)."""
        n = len(buffers)
        infos = ffi.new("VkDescriptorBufferInfo[]", n)
        writes = ffi.new("VkWriteDescriptorSet[]", n)
        for i, (buffer, offset, size) in enumerate(buffers):
            infos[i].buffer = buffer
            infos[i].offset = offset
            infos[i].range = size
            writes[i].sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            writes[i].dstBinding = i
            writes[i].descriptorCount = 1
            writes[i].descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            writes[i].pBufferInfo = infos + i
        if self._push is not None:
            self._push(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout.handle, 0, n, writes)
            return
        descriptor_set = self._allocate(layout)
        for i in range(n):
            writes[i].dstSet = descriptor_set
        lib.vkUpdateDescriptorSets(self.device, n, writes, 0, NULL)
        sets = ffi.new("VkDescriptorSet[]", [descriptor_set])
        lib.vkCmdBindDescriptorSets(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, layout.handle, 0, 1,
                                    sets, 0, NULL)

    def _allocate(self, layout: Any) -> Any:
        out = ffi.new("VkDescriptorSet*")
        while True:
            if self._current == len(self._pools):
                self._pools.append(DescriptorPool(self.device))
            pool = self._pools[self._current]
            # Some drivers hand out sets past maxSets; counting keeps us within the spec.
            if pool.sets >= pool.capacity:
                self._current += 1
                continue
            info = new("VkDescriptorSetAllocateInfo",
                       vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                       descriptorPool=pool.handle, descriptorSetCount=1,
                       pSetLayouts=layout.set_layouts)
            result = lib.vkAllocateDescriptorSets(self.device, info, out)
            if result in (ERROR_OUT_OF_POOL_MEMORY, ERROR_FRAGMENTED_POOL):
                self._current += 1  # this pool is full until the next reset
                continue
            check("vkAllocateDescriptorSets", result)
            pool.sets += 1
            self.sets_allocated += 1
            return out[0]

    def reset(self) -> None:
        """Recycle every pooled set; only call once no pending work uses them."""
        for pool in self._pools:
            check("vkResetDescriptorPool", lib.vkResetDescriptorPool(self.device, pool.handle, 0))
            pool.sets = 0
        self._current = 0

    def release(self) -> None:
        """Destroy the pools."""
        for pool in self._pools:
            pool.release()
        self._pools.clear()
        self._current = 0
