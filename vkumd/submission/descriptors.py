"""Binding storage buffers to a dispatch: push descriptors, or sets from pools that grow.

With ``VK_KHR_push_descriptor`` the buffers go straight into the command buffer. Without it
sets are allocated from pools; a pool that runs out (``VK_ERROR_OUT_OF_POOL_MEMORY`` or
``VK_ERROR_FRAGMENTED_POOL``) is joined by another. The pools a submission used are handed
to it with :meth:`DescriptorBinder.take_pools` and come back through
:meth:`DescriptorBinder.recycle` once that submission has completed, so no set is reset
while the device may still read it.

A binder belongs to one stream: its scratch structs are reused on every bind, which is safe
because push descriptors and ``vkUpdateDescriptorSets`` copy them before returning. Binding
is done by that stream's one recorder at a time; :meth:`DescriptorBinder.recycle` may come
from any thread (whichever notices a submission completed), so the list of reset pools has
a lock of its own.
"""

from __future__ import annotations

import operator
import threading
from collections.abc import Sequence
from typing import Any

from vkumd.vk.binding import NULL, ffi, lib, new, raw_device_proc, vk
from vkumd.vk.errors import ERROR_FRAGMENTED_POOL, ERROR_OUT_OF_POOL_MEMORY, check
from vkumd.vk.handle import Handle

SETS_PER_POOL = 1024
BUFFERS_PER_POOL = 8 * SETS_PER_POOL
# Sets a caching binder keeps; past this many they retire together and the cache starts again.
CACHED_SETS = 4 * SETS_PER_POOL
# Most kernels bind a handful of buffers; the scratch structs grow if one binds more.
_SCRATCH_BINDINGS = 8

BufferRange = tuple[Any, int, int]  # (VkBuffer, offset, range)
KEY = operator.itemgetter(0, 1)
"""A buffer range's hazard and memory-use key, ``(VkBuffer, offset)`` (in C, per range)."""
_SIZE = operator.itemgetter(2)
_COMPUTE = vk.VK_PIPELINE_BIND_POINT_COMPUTE


class Binding:
    """One dispatch's buffers as bound to a layout, with what a batch derives from them.

    A caching binder hands the same object out again for the same layout and buffers, so
    the hazard keys, the byte count and the written keys are worked out once per set of
    buffers, not once per dispatch.

    Attributes:
        layout: the compiler ``Layout`` bound to.
        buffers: the ranges, in binding order (a tuple).
        set: the pooled descriptor set; None for push descriptors.
        keys: ``(VkBuffer, offset)`` of each range.
        nbytes: the ranges' total size.
        writes: the written indices :attr:`written` was made for (None: not yet).
        written: the keys at ``writes``.
    """

    __slots__ = ("layout", "buffers", "set", "set_array", "keys", "nbytes", "writes",
                 "written")

    def __init__(self, layout: Any, buffers: tuple[BufferRange, ...], descriptor_set: Any,
                 ) -> None:
        self.layout = layout
        self.buffers = buffers
        self.set = descriptor_set
        # vkCmdBindDescriptorSets takes an array; one per set spares a store per bind.
        self.set_array = None
        if descriptor_set is not None:
            self.set_array = ffi.new("VkDescriptorSet[1]")
            self.set_array[0] = descriptor_set
        self.keys = tuple(map(KEY, buffers))
        self.nbytes = sum(map(_SIZE, buffers))
        self.writes: tuple[int, ...] | None = None
        self.written: tuple[tuple[Any, int], ...] = ()

    def written_keys(self, writes: Sequence[int]) -> tuple[tuple[Any, int], ...]:
        """The keys of the ranges at indices ``writes`` (kept for the next call)."""
        if writes != self.writes:
            self.written = tuple(map(self.keys.__getitem__, writes))
            self.writes = tuple(writes)
        return self.written


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

    def reset(self) -> None:
        """Free every set of the pool at once."""
        check("vkResetDescriptorPool", lib.vkResetDescriptorPool(self.device, self.handle, 0))
        self.sets = 0

    def _release(self) -> None:
        lib.vkDestroyDescriptorPool(self.device, self.handle, NULL)


class DescriptorBinder:
    """Writes the buffers of one dispatch into a command buffer.

    Args:
        device: the ``VkDevice``.
        push_descriptors: use ``vkCmdPushDescriptorSetKHR`` (the device must enable it).
        cache_sets: on the pooled path, keep each set written and hand it out again for the
            same layout and buffers, as wgpu's bind groups are made once and set many times.
            Measured on lavapipe with ``LP_NUM_THREADS=0``: a set costs 6.5 us of host time to
            allocate and 0.4 us to write, a hit 0.5 us; a push-descriptor write costs lavapipe
            9 us to execute, binding a set 0.4 us. Sets in the cache outlive submissions, so
            a binder whose pools a graph takes over (:meth:`take_pools` at the end of a
            capture) must not cache.
    """

    def __init__(self, device: Any, push_descriptors: bool, cache_sets: bool = False) -> None:
        self.device = device
        self.push_descriptors = push_descriptors
        # (layout, buffers) -> their Binding; None: no caching (or push descriptors).
        self._cache: dict[tuple[Any, Any], Binding] | None = (
            {} if cache_sets and not push_descriptors else None)
        self._cache_pools: list[DescriptorPool] = []  # hold the cached sets
        # Cache pools dropped from the cache, recycled with the next submission's pools: the
        # work that used their sets was submitted before it, so it completes before it.
        self._retired: list[DescriptorPool] = []
        self._push = (raw_device_proc(device, "vkCmdPushDescriptorSetKHR",
                                      "PFN_vkCmdPushDescriptorSetKHR")
                      if push_descriptors else None)
        self._pools: list[DescriptorPool] = []   # every pool this binder created
        self._free: list[DescriptorPool] = []    # reset, ready for a new submission
        self._free_lock = threading.Lock()
        self._active: list[DescriptorPool] = []  # in use by the work being recorded
        self.sets_allocated = 0
        self._set_out = ffi.new("VkDescriptorSet[1]")
        self._alloc_info = new("VkDescriptorSetAllocateInfo",
                               vk.VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                               descriptorSetCount=1)
        self._grow_scratch(_SCRATCH_BINDINGS)

    def _grow_scratch(self, n: int) -> None:
        self._infos = ffi.new("VkDescriptorBufferInfo[]", n)
        self._writes = ffi.new("VkWriteDescriptorSet[]", n)
        for i in range(n):
            write = self._writes[i]
            write.sType = vk.VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET
            write.dstBinding = i
            write.descriptorCount = 1
            write.descriptorType = vk.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
            write.pBufferInfo = self._infos + i
        self._capacity = n

    @property
    def pool_count(self) -> int:
        """How many descriptor pools the pooled path holds (created, not yet trimmed)."""
        return len(self._pools)

    def prepare(self, layout: Any, buffers: Sequence[BufferRange]) -> Binding:
        """Write ``buffers`` into the scratch structs (and a pooled set): their Binding.

        Everything that can fail happens here, before the caller records any command.
        """
        buffers = buffers if type(buffers) is tuple else tuple(buffers)
        cache = self._cache
        if cache is None:
            return Binding(layout, buffers, self._write(layout, buffers, cached=False))
        key = (layout, buffers)
        found = cache.get(key)
        # Equal handles are not enough: a destroyed VkBuffer's handle value may come back
        # for a new buffer, which the set does not reference. The entry holds the ranges it
        # was made for, so the same range objects (a tensor's binding, made once) mean the
        # same live buffers; otherwise the handle objects are compared.
        if found is not None and (all(map(operator.is_, found.buffers, buffers))
                                  or _same_handles(found.buffers, buffers)):
            return found
        if len(cache) >= CACHED_SETS:
            self._retire_cache()  # before allocating: the new set stays in the cache
        binding = Binding(layout, buffers, self._write(layout, buffers, cached=True))
        cache[key] = binding
        return binding

    def _retire_cache(self) -> None:
        """Empty the cache; its pools are recycled after the next submission completes."""
        assert self._cache is not None
        self._cache.clear()
        self._retired.extend(self._cache_pools)
        self._cache_pools = []

    def _write(self, layout: Any, buffers: Sequence[BufferRange], cached: bool) -> Any:
        """Fill the scratch structs with ``buffers``; write them into a new set unless push
        descriptors take them straight from there (then return None)."""
        n = len(buffers)
        if n > self._capacity:
            self._grow_scratch(n)
        infos = self._infos
        for i, (buffer, offset, size) in enumerate(buffers):
            info = infos[i]
            info.buffer = buffer
            info.offset = offset
            info.range = size
        if self._push is not None:
            return None
        descriptor_set = self._allocate(layout, self._cache_pools if cached else self._active)
        writes = self._writes
        for i in range(n):
            writes[i].dstSet = descriptor_set
        lib.vkUpdateDescriptorSets(self.device, n, writes, 0, NULL)
        return descriptor_set

    def record(self, cmd: Any, binding: Binding) -> None:
        """Record ``binding``, which :meth:`prepare` returned (for push descriptors: last)."""
        if self._push is not None:
            self._push(cmd, _COMPUTE, binding.layout.handle, 0, len(binding.buffers),
                       self._writes)
            return
        lib.vkCmdBindDescriptorSets(cmd, _COMPUTE, binding.layout.handle, 0, 1,
                                    binding.set_array, 0, NULL)

    def bind(self, cmd: Any, layout: Any, buffers: Sequence[BufferRange]) -> None:
        """Bind ``buffers`` to bindings 0..n-1 of set 0 of ``layout`` (a compiler Layout)."""
        self.record(cmd, self.prepare(layout, buffers))

    def _allocate(self, layout: Any, pools: list[DescriptorPool]) -> Any:
        """A set of ``layout`` from the last of ``pools``, which gains a pool when it is full."""
        info = self._alloc_info
        info.pSetLayouts = layout.set_layouts
        while True:
            if not pools or pools[-1].sets >= pools[-1].capacity:
                pools.append(self._reset_pool() or self._new_pool())
            pool = pools[-1]
            info.descriptorPool = pool.handle
            result = lib.vkAllocateDescriptorSets(self.device, info, self._set_out)
            if result in (ERROR_OUT_OF_POOL_MEMORY, ERROR_FRAGMENTED_POOL):
                pool.sets = pool.capacity  # full until it is recycled
                continue
            check("vkAllocateDescriptorSets", result)
            # Some drivers hand out sets past maxSets; counting keeps us within the spec.
            pool.sets += 1
            self.sets_allocated += 1
            return self._set_out[0]

    def _reset_pool(self) -> DescriptorPool | None:
        with self._free_lock:
            return self._free.pop() if self._free else None

    def _new_pool(self) -> DescriptorPool:
        pool = DescriptorPool(self.device)
        self._pools.append(pool)
        return pool

    def take_pools(self) -> list[DescriptorPool]:
        """The pools used since the last call, with cache pools retired since then; pass
        them to :meth:`recycle` once the submission they go with has completed."""
        taken, self._active = self._active, []
        if self._retired:
            taken += self._retired
            self._retired = []
        return taken

    def take_unsubmitted_pools(self) -> list[DescriptorPool]:
        """The pools of a batch that is discarded, not submitted: free to recycle now.

        Retired cache pools stay for the next submission, since work submitted earlier may
        still use their sets."""
        taken, self._active = self._active, []
        return taken

    @property
    def cached_sets(self) -> int:
        """How many sets the cache holds (0 without caching)."""
        return len(self._cache) if self._cache is not None else 0

    def recycle(self, pools: list[DescriptorPool]) -> None:
        """Reset ``pools`` (whose submission has completed) and keep them for reuse.

        Safe from any thread: no one else holds these pools any more.
        """
        for pool in pools:
            if not pool.released:
                pool.reset()
                with self._free_lock:
                    self._free.append(pool)

    def reset(self) -> None:
        """Recycle every pool; only call once no pending work uses any of them."""
        self.recycle(self.take_pools())

    def trim(self) -> int:
        """Empty the set cache and destroy every pool no work holds; keep the binder usable.

        How many pools the cache fills depends on timing: each distinct (layout, buffers)
        gets a set, and how many distinct output offsets the allocator hands out follows
        how far the device lags behind the host (released memory comes back only after the
        work that used it). Trimming brings the binder to the same state whatever the
        timing was, as ``MemoryPool.free_all_blocks()`` does for memory blocks.

        Only call once no submitted or recorded work uses any of the binder's sets (its
        stream idle and no batch open); pools a graph took over are not the binder's, and a
        pool another thread is recycling right then stays.

        Returns:
            How many pools were destroyed.
        """
        if self._cache is not None:
            self._retire_cache()
        idle = self.take_pools()
        with self._free_lock:
            idle += self._free
            self._free = []
        for pool in idle:
            pool.release()
        self._pools = [pool for pool in self._pools if not pool.released]
        return len(idle)

    def release(self) -> None:
        """Destroy the pools."""
        for pool in self._pools:
            pool.release()
        self._pools.clear()
        with self._free_lock:
            self._free.clear()
        self._active.clear()
        self._retired.clear()
        self._cache_pools.clear()
        if self._cache is not None:
            self._cache.clear()


def _same_handles(cached: tuple[BufferRange, ...], buffers: tuple[BufferRange, ...]) -> bool:
    """Whether equal ranges also hold the same VkBuffer handle objects."""
    return all(mine[0] is theirs[0] for mine, theirs in zip(cached, buffers, strict=True))
