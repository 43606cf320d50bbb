"""Running what the compiler layer planned: launches on the current stream, scratch from the pool.

:func:`run_plan` is the one place a :class:`~vkumd.compiler.launch.LaunchPlan` meets memory:
it allocates the plan's scratch, asks the plan for its launches and records them, then hands
the scratch back to the pool, which frees it once the work that uses it has completed (or,
during a capture, once the graph that recorded it is released).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vkumd.compiler.launch import BufferRange, LaunchPlan, Operand
from vkumd.runtime.memory import Allocation

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext


class ScratchBuffer:
    """Temporary device memory a plan asked for, bound like a tensor.

    Attributes:
        allocation: the pooled memory.
    """

    __slots__ = ("allocation", "binding", "address")

    def __init__(self, allocation: Allocation, nbytes: int) -> None:
        self.allocation = allocation
        self.binding: BufferRange = (allocation.buffer, allocation.offset, nbytes)
        self.address: int = allocation.device_address


def run_plan(context: RuntimeContext, plan: LaunchPlan, operands: Sequence[Operand | None],
             ) -> None:
    """Record ``plan``'s launches for ``operands`` on ``context``'s current stream.

    Scratch memory is allocated before the first launch is built and released (returned
    to the pool once the launches have run) even if recording fails.
    """
    if not plan.scratch:
        for launch in plan.launches(operands, ()):
            context.launch(launch)
        return
    scratch: list[Any] = []
    try:
        for nbytes in plan.scratch:
            scratch.append(ScratchBuffer(context.allocate(max(nbytes, 4)), nbytes))
        for launch in plan.launches(operands, scratch):
            context.launch(launch)
    finally:
        for buffer in scratch:
            context.release_tensor_memory(buffer.allocation)
