"""Recording one dispatch into a command buffer through the binding's raw functions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from vkumd.submission.descriptors import BufferRange, DescriptorBinder
from vkumd.vk.binding import ffi, lib, vk


def record_dispatch(cmd: Any, program: Any, binder: DescriptorBinder,
                    buffers: Sequence[BufferRange], push: bytes,
                    groups: tuple[int, int, int]) -> None:
    """Bind ``program``, its buffers and push constants, and dispatch ``groups``.

    Args:
        cmd: a command buffer in the recording state.
        program: a compiled :class:`~vkumd.compiler.program.Program`.
        binder: writes the descriptors (push or pooled).
        buffers: ``(VkBuffer, offset, range)`` for bindings 0..n-1.
        push: the push-constant block, packed.
        groups: workgroup counts.
    """
    lib.vkCmdBindPipeline(cmd, vk.VK_PIPELINE_BIND_POINT_COMPUTE, program.handle)
    binder.bind(cmd, program.layout, buffers)
    if push:
        lib.vkCmdPushConstants(cmd, program.layout.handle, vk.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                               len(push), ffi.from_buffer(push))
    lib.vkCmdDispatch(cmd, *groups)


def grid_for(count: int, workgroup: int, max_groups: int = 65535) -> tuple[int, int, int]:
    """A 2-D grid of ``workgroup``-wide groups covering ``count`` invocations.

    Kernels recover the linear index as ``y * (groups_x * workgroup) + x``; the y dimension
    only appears when one row of groups would pass ``maxComputeWorkGroupCount[0]``.
    """
    groups = max(1, -(-count // workgroup))
    if groups <= max_groups:
        return (groups, 1, 1)
    rows = -(-groups // max_groups)
    return (max_groups, rows, 1)
