"""Running what the compiler layer planned: launches on the current stream, scratch from the pool.

A context's :class:`Launcher` is what ``ctx.launch(launch)`` and ``ctx.run(plan, operands)``
call: it checks a launch, finds its pipeline and records it on the current stream. A
one-launch plan (``FixedLaunch``) is checked once per context; after that a run only binds its
operands and records.
:func:`run_plan` is the one place a :class:`~vkumd.compiler.launch.LaunchPlan` meets memory:
it allocates the plan's scratch, asks the plan for its launches and records them, then hands
the scratch back to the pool, which frees it once the work that uses it has completed (or,
during a capture, once the graph that recorded it is released).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.launch import BufferRange, Launch, LaunchPlan, Operand
from vkumd.errors import VkumdValueError
from vkumd.runtime.memory import Allocation

if TYPE_CHECKING:
    from vkumd.runtime.context import RuntimeContext
    from vkumd.runtime.current import CurrentStreams

# Pipelines looked up by kernel variant (planners cache those, so identity is the key); past
# this many the lookup table starts again rather than grow with variants made per call.
MAX_PROGRAMS = 4096
_BINDING = operator.attrgetter("binding")


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


class Launcher:
    """Records launches for one context.

    Args:
        context: the context (its kernel registry builds pipelines; its memory holds scratch).
        current: the context's per-thread current streams.
    """

    def __init__(self, context: RuntimeContext, current: CurrentStreams) -> None:
        self.context = context
        self.current = current
        # kernel variant -> (pipeline, push-constant block size): one lookup per launch.
        self.programs: dict[Any, tuple[Any, int]] = {}
        # id of a FixedLaunch plan -> (plan, pipeline, push, groups, writes), its push size
        # checked: a planned op then costs one lookup, not a list of Launch tuples per call.
        # The plan is kept in the value, so a recycled id cannot match.
        self._fixed: dict[int, tuple[Any, Any, bytes, tuple[int, int, int], tuple[int, ...]]] = {}

    def _program(self, kernel_variant: Any) -> tuple[Any, int]:
        """The pipeline of ``kernel_variant`` and its push block's size (built on first use)."""
        self.context.check_open(f"dispatching {kernel_variant.kernel.name}")
        found = (self.context.kernels.program(kernel_variant), kernel_variant.kernel.push.size)
        if len(self.programs) >= MAX_PROGRAMS:
            self.programs.clear()  # the registry still holds every pipeline
        self.programs[kernel_variant] = found
        return found

    def launch(self, launch: Launch) -> None:
        """Record one :class:`~vkumd.compiler.launch.Launch` on the current stream; it runs
        asynchronously.

        Raises:
            VkumdValueError: the push constants are not the size of the kernel's block.
            ContextClosed: the context was closed.
        """
        kernel_variant = launch.program
        found = self.programs.get(kernel_variant) or self._program(kernel_variant)
        if len(launch.push) != found[1]:
            _wrong_push(launch)
        self.current.current().dispatch(found[0], launch.buffers, launch.push, launch.groups,
                                        launch.writes)

    def run(self, plan: LaunchPlan, operands: Sequence[Any]) -> None:
        """Record a planner's launches for ``operands``, with the scratch memory the plan asks
        for (see :func:`run_plan`).

        Raises:
            VkumdValueError: a launch's push constants are not the size of its kernel's block.
            ContextClosed: the context was closed.
        """
        fixed = self._fixed.get(id(plan))
        if fixed is None or fixed[0] is not plan:
            if type(plan) is not FixedLaunch:
                self._run_planned(plan, operands)
                return
            fixed = self._fix(plan)
        try:
            buffers = tuple(map(_BINDING, operands))
        except AttributeError:  # an absent optional operand: FixedLaunch binds another one
            buffers = plan.launches(operands, ())[0].buffers
        self.current.current().dispatch(fixed[1], buffers, fixed[2], fixed[3], fixed[4])

    def _run_planned(self, plan: LaunchPlan, operands: Sequence[Any]) -> None:
        """:meth:`run` for any plan: its launches, and its scratch if it asks for some."""
        if plan.scratch:
            run_plan(self.context, plan, operands)
            return
        # The common case, with launch() written out: a call less per launch.
        programs = self.programs
        for kernel_variant, buffers, push, groups, writes in plan.launches(operands, ()):
            found = programs.get(kernel_variant) or self._program(kernel_variant)
            if len(push) != found[1]:
                _wrong_push(Launch(kernel_variant, buffers, push, groups, writes))
            self.current.current().dispatch(found[0], buffers, push, groups, writes)

    def _fix(self, plan: FixedLaunch) -> tuple[Any, Any, bytes, tuple[int, int, int],
                                                tuple[int, ...]]:
        """Look up ``plan``'s pipeline and check its push constants once, for :meth:`run`."""
        variant = plan.program
        found = self.programs.get(variant) or self._program(variant)
        if len(plan.push) != found[1]:
            _wrong_push(Launch(variant, (), plan.push, plan.groups, plan.writes))
        if len(self._fixed) >= MAX_PROGRAMS:
            self._fixed.clear()
        fixed = (plan, found[0], plan.push, plan.groups, tuple(plan.writes))
        self._fixed[id(plan)] = fixed
        return fixed


def _wrong_push(launch: Launch) -> None:
    """Refuse a launch whose push constants are not the size of its kernel's block.

    Raises:
        VkumdValueError: always, naming the kernel and its block.
    """
    kernel = launch.program.kernel
    raise VkumdValueError(
        f"a launch of {kernel.name} carries {len(launch.push)} bytes of push constants; its "
        f"block is {kernel.push.size} bytes ({kernel.push!r}). Pack them with the kernel's "
        "PushLayout")
