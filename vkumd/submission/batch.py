"""One command buffer being recorded: dispatches, copies and timestamps, barriers as needed.

A :class:`Batch` prepares everything that can fail (descriptor sets, push-constant bytes)
before it records the first command of a dispatch, so an error leaves nothing half-recorded.
If recording is interrupted anyway (say by ``KeyboardInterrupt`` between two commands), the
batch is marked broken and its owner discards it instead of submitting it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vkumd.submission.descriptors import Binding, BufferRange, DescriptorBinder
from vkumd.submission.hazards import HazardTracker
from vkumd.vk.binding import ffi, lib, vk
from vkumd.vk.errors import check

_COMPUTE = vk.VK_PIPELINE_BIND_POINT_COMPUTE
_SHADER_STAGE = vk.VK_SHADER_STAGE_COMPUTE_BIT


def _dependency(stages: int, writes: int, dst_stages: int, dst_access: int) -> Any:
    """A ``VkDependencyInfo`` of one global memory barrier (the barrier kept alive with it)."""
    barrier = ffi.new("VkMemoryBarrier2*")
    barrier.sType = vk.VK_STRUCTURE_TYPE_MEMORY_BARRIER_2
    barrier.srcStageMask = stages
    barrier.srcAccessMask = writes
    barrier.dstStageMask = dst_stages
    barrier.dstAccessMask = dst_access
    info = ffi.new("VkDependencyInfo*")
    info.sType = vk.VK_STRUCTURE_TYPE_DEPENDENCY_INFO
    info.memoryBarrierCount = 1
    info.pMemoryBarriers = barrier
    return info, barrier


class BarrierKind:
    """Prebuilt barriers for a queue that runs compute work, or only copies.

    They go through ``vkCmdPipelineBarrier2`` (synchronization2, which every vkumd device
    enables): its two arguments cost the binding 0.37 us a call against 0.84 us for the ten
    of ``vkCmdPipelineBarrier`` (measured here), and batches of small dependent dispatches
    record one per dispatch. The flag bits below are the same in both APIs.
    """

    def __init__(self, compute: bool) -> None:
        transfer_write = vk.VK_ACCESS_TRANSFER_WRITE_BIT
        transfer_all = vk.VK_ACCESS_TRANSFER_READ_BIT | transfer_write
        if compute:
            self.stages = (vk.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT
                           | vk.VK_PIPELINE_STAGE_TRANSFER_BIT)
            writes = vk.VK_ACCESS_SHADER_WRITE_BIT | transfer_write
            everything = (vk.VK_ACCESS_SHADER_READ_BIT | vk.VK_ACCESS_SHADER_WRITE_BIT
                          | transfer_all)
        else:
            self.stages = vk.VK_PIPELINE_STAGE_TRANSFER_BIT
            writes = transfer_write
            everything = transfer_all
        self.between, self._keep_between = _dependency(self.stages, writes, self.stages,
                                                       everything)
        # Device writes must be made available to the host before it maps and reads them.
        self.to_host, self._keep_to_host = _dependency(
            self.stages, writes, vk.VK_PIPELINE_STAGE_HOST_BIT, vk.VK_ACCESS_HOST_READ_BIT)


class Batch:
    """Commands for one submission, with the resources that submission will own.

    Args:
        cmd: a command buffer in the recording state.
        binder: the stream's descriptor binder.
        barriers: the queue's :class:`BarrierKind`.
        after_earlier_work: begin with a barrier against earlier submissions on the queue
            (needed unless they have all completed).
    """

    def __init__(self, cmd: Any, binder: DescriptorBinder, barriers: BarrierKind,
                 after_earlier_work: bool) -> None:
        self.cmd = cmd
        self.binder = binder
        self.kind = barriers
        self.hazards = HazardTracker()
        self.dispatches = 0
        self.copies = 0
        self.timestamps = 0
        self.bytes = 0
        self.broken: BaseException | None = None
        self.ended = False
        """Whether ``vkEndCommandBuffer`` was called (even if it failed): never call it twice."""
        self.on_retire: list[Callable[[], None]] = []
        self.touched: set[tuple[Any, int]] = set()
        """``(VkBuffer, offset)`` of every range a command of this batch reads or writes."""
        self._bound = None
        # What the last dispatch left bound: its Binding and (layout, push bytes). A
        # dispatch that would bind the same again skips the command -- bindings and push
        # constants persist across dispatches, barriers and pipelines of the same layout --
        # which saves lavapipe executing them (0.4 us a set, 9 us a push-descriptor write).
        self._binding: Binding | None = None
        self._push: tuple[Any, bytes] | None = None
        if after_earlier_work:
            self.barrier()

    @property
    def last_kernel(self) -> str:
        """The name of the last kernel dispatched ("" before the first)."""
        return self._bound.name if self._bound is not None else ""

    def barrier(self) -> None:
        """Order every earlier command of the queue before every later one."""
        lib.vkCmdPipelineBarrier2(self.cmd, self.kind.between)

    def dispatch(self, program: Any, buffers: Sequence[BufferRange], push: bytes,
                 groups: tuple[int, int, int], writes: Sequence[int]) -> bool:
        """Record ``program`` over ``buffers`` with ``push`` constants and ``groups``.

        Returns:
            Whether a barrier was recorded before the dispatch.
        """
        layout = program.layout
        # Descriptors already bound to these buffers (pushed, or a set) need no preparing at
        # all. Within a batch equal handles name the same buffer: memory the batch uses is
        # neither freed nor reused before it completes.
        binding = self._binding
        rebind = binding is None or binding.layout is not layout or binding.buffers != buffers
        if rebind:
            binding = self.binder.prepare(layout, buffers)
        written = binding.written if binding.writes == writes else binding.written_keys(writes)
        hazard = self.hazards.access(binding.keys, written)
        pushed = self._push
        repush = push and (pushed is None or pushed[0] is not layout or pushed[1] != push)
        cmd = self.cmd
        try:
            if hazard:
                lib.vkCmdPipelineBarrier2(cmd, self.kind.between)
            if self._bound is not program:
                lib.vkCmdBindPipeline(cmd, _COMPUTE, program.handle)
                self._bound = program
            if rebind:
                self._binding = None  # unknown until the command is recorded
                self.binder.record(cmd, binding)
                self._binding = binding
                self.touched.update(binding.keys)
            if repush:
                self._push = None
                lib.vkCmdPushConstants(cmd, layout.handle, _SHADER_STAGE, 0, len(push), push)
                self._push = (layout, push)
            lib.vkCmdDispatch(cmd, *groups)
        except BaseException as exc:
            self.broken = exc
            raise
        self.dispatches += 1
        self.bytes += binding.nbytes
        return hazard

    def copy(self, src: BufferRange, dst: BufferRange, dst_offset: int = 0) -> None:
        """Record a copy of ``src`` (its size) into ``dst``, ``dst_offset`` bytes in.

        Hazards are tracked on the ranges' starts, so pieces copied into one allocation at
        different offsets all count as writes of that allocation.
        """
        size = src[2]
        region = ffi.new("VkBufferCopy*")
        region.srcOffset = src[1]
        region.dstOffset = dst[1] + dst_offset
        region.size = size
        keys = ((src[0], src[1]), (dst[0], dst[1]))
        hazard = self.hazards.access(keys, keys[1:])
        try:
            if hazard:
                self.barrier()
            lib.vkCmdCopyBuffer(self.cmd, src[0], dst[0], 1, region)
        except BaseException as exc:
            self.broken = exc
            raise
        self.touched.update(keys)
        self.copies += 1
        self.bytes += size

    def timestamp(self, pool: Any, index: int, stage: int) -> None:
        """Reset query ``index`` of ``pool`` and write a timestamp after ``stage``."""
        try:
            lib.vkCmdResetQueryPool(self.cmd, pool, index, 1)
            lib.vkCmdWriteTimestamp(self.cmd, stage, pool, index)
        except BaseException as exc:
            self.broken = exc
            raise
        self.timestamps += 1

    @property
    def empty(self) -> bool:
        """Whether no command was recorded."""
        return self.dispatches == 0 and self.copies == 0 and self.timestamps == 0

    def finish(self) -> None:
        """Make the batch's writes visible to the host and end the command buffer."""
        lib.vkCmdPipelineBarrier2(self.cmd, self.kind.to_host)
        self.end()

    def end(self) -> None:
        """End the command buffer; a second call does nothing.

        A failed ``vkEndCommandBuffer`` leaves it invalid rather than recording, so it is not
        ended again either; the next ``vkResetCommandBuffer`` makes it usable.
        """
        if self.ended:
            return
        self.ended = True
        check("vkEndCommandBuffer", lib.vkEndCommandBuffer(self.cmd))
