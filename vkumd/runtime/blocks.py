"""Device memory blocks and the ranges carved out of them.

A :class:`Block` is one ``VkDeviceMemory`` with one ``VkBuffer`` bound over all of it; an
:class:`Allocation` is a ``(block, offset, size)`` range of one. The pool that decides which
block serves which request is :class:`vkumd.runtime.memory.MemoryPool`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vkumd.errors import VkumdValueError
from vkumd.runtime.suballoc import RangeAllocator
from vkumd.vk.binding import MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT, NULL, ffi, lib, new, vk
from vkumd.vk.caps import MemoryType
from vkumd.vk.errors import check
from vkumd.vk.handle import Handle

if TYPE_CHECKING:
    from vkumd.runtime.memory import MemoryPool


class MemoryUsage(enum.Enum):
    """What an allocation is for; decides the memory type."""

    DEVICE = "device"
    """Tensors: device-local; on a unified-memory device also host-visible and mapped (never
    on a discrete GPU, nor with ``device_only``: host access then goes through staging)."""
    UPLOAD = "upload"
    """Staging for host→device copies: host-visible, preferably not cached."""
    READBACK = "readback"
    """Staging for device→host copies: host-visible and host-cached where possible."""


class Block(Handle):
    """One ``VkDeviceMemory`` with a ``VkBuffer`` bound over all of it.

    It is mapped when its type is host-visible and ``map_memory`` is true; :attr:`mapped` is
    then the host pointer, else ``None``.
    """

    def __init__(self, pool: MemoryPool, mem_type: MemoryType, size: int,
                 dedicated: bool, map_memory: bool = True) -> None:
        super().__init__()
        self.pool = pool
        self.mem_type = mem_type
        self.size = size
        self.dedicated = dedicated
        self.ranges = RangeAllocator(size)
        device = pool.device_handle
        buffer_info = new("VkBufferCreateInfo", vk.VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
                          size=size, usage=pool.buffer_usage,
                          sharingMode=vk.VK_SHARING_MODE_EXCLUSIVE)
        if pool.queue_families is not None:
            # Compute and transfer queues of different families both touch every buffer;
            # concurrent sharing spares an ownership transfer per copy.
            buffer_info.sharingMode = vk.VK_SHARING_MODE_CONCURRENT
            buffer_info.queueFamilyIndexCount = len(pool.queue_families)
            buffer_info.pQueueFamilyIndices = pool.queue_families
        buffer = ffi.new("VkBuffer*")
        check("vkCreateBuffer", lib.vkCreateBuffer(device, buffer_info, NULL, buffer),
              f"{size} bytes")
        self.buffer = buffer[0]
        self.mapped: Any = None
        self.address = 0
        try:
            self._back(device, mem_type, size, map_memory)
        except BaseException:
            # Whatever step failed, nothing of the block may outlive the error.
            lib.vkDestroyBuffer(device, self.buffer, NULL)
            if self.handle is not None:
                lib.vkFreeMemory(device, self.handle, NULL)
            raise

    def _back(self, device: Any, mem_type: MemoryType, size: int, map_memory: bool) -> None:
        """Allocate, bind and map the memory behind :attr:`buffer`."""
        pool = self.pool
        reqs = ffi.new("VkMemoryRequirements*")
        lib.vkGetBufferMemoryRequirements(device, self.buffer, reqs)
        alloc_info = new("VkMemoryAllocateInfo", vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                         allocationSize=reqs.size, memoryTypeIndex=mem_type.index)
        if pool.caps.buffer_device_address:
            flags = new("VkMemoryAllocateFlagsInfo",
                        vk.VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_FLAGS_INFO,
                        flags=MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT)
            alloc_info.pNext = flags
        memory = ffi.new("VkDeviceMemory*")
        check("vkAllocateMemory", lib.vkAllocateMemory(device, alloc_info, NULL, memory),
              f"{reqs.size} bytes of memory type {mem_type.index}")
        self.handle = memory[0]
        check("vkBindBufferMemory", lib.vkBindBufferMemory(device, self.buffer, self.handle, 0))
        if map_memory and mem_type.host_visible:
            pointer = ffi.new("void**")
            check("vkMapMemory", lib.vkMapMemory(device, self.handle, 0, size, 0, pointer),
                  f"{size} bytes")
            self.mapped = ffi.cast("uint8_t*", pointer[0])
        if pool.caps.buffer_device_address:
            info = new("VkBufferDeviceAddressInfo",
                       vk.VK_STRUCTURE_TYPE_BUFFER_DEVICE_ADDRESS_INFO, buffer=self.buffer)
            self.address = lib.vkGetBufferDeviceAddress(device, info)

    def _release(self) -> None:
        device = self.pool.device_handle
        if self.mapped is not None:
            lib.vkUnmapMemory(device, self.handle)
            self.mapped = None
        lib.vkDestroyBuffer(device, self.buffer, NULL)
        lib.vkFreeMemory(device, self.handle, NULL)


@dataclass(eq=False)
class Allocation:
    """A byte range of a block: what a tensor or a staging area lives in.

    Attributes:
        block: the owning :class:`Block`.
        offset: start within the block's buffer, aligned for storage-buffer binding.
        size: bytes asked for.
        usage: the :class:`MemoryUsage` it was allocated for.
    """

    block: Block
    offset: int
    size: int
    usage: MemoryUsage
    freed: bool = field(default=False)

    @property
    def buffer(self) -> Any:
        """The ``VkBuffer`` to bind (with :attr:`offset`)."""
        return self.block.buffer

    @property
    def device_address(self) -> int:
        """64-bit device address of the first byte (0 without buffer device address)."""
        return self.block.address + self.offset if self.block.address else 0

    @property
    def host_visible(self) -> bool:
        """Whether the bytes can be read and written through :meth:`host_view`."""
        return self.block.mapped is not None

    @property
    def coherent(self) -> bool:
        """Whether host writes are visible without a flush."""
        return self.block.mem_type.host_coherent

    def host_view(self) -> memoryview:
        """A writable view of the bytes in mapped memory.

        Raises:
            VkumdValueError: the allocation is not host-visible (use a staging copy).
        """
        if self.block.mapped is None:
            raise VkumdValueError("this allocation lives in memory the host cannot map; "
                                  "copy it through a staging buffer")
        return memoryview(ffi.buffer(self.block.mapped + self.offset, self.size))

    def flush(self) -> None:
        """Make host writes visible to the device (a no-op on coherent memory)."""
        if not self.coherent:
            self.block.pool.flush_range(self, invalidate=False)

    def invalidate(self) -> None:
        """Make device writes visible to the host (a no-op on coherent memory)."""
        if not self.coherent:
            self.block.pool.flush_range(self, invalidate=True)
