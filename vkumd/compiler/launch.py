"""What the compiler layer hands the runtime: launches of kernels, and the plans that make them.

Every op takes one path: check its arguments, ask its kernel family's planner (beside the
kernel, in :mod:`vkumd.compiler.kernels`) for a :class:`LaunchPlan`, and give the plan and
its operands to the runtime (``RuntimeContext.run``). The runtime allocates the scratch the
plan asks for, calls :meth:`LaunchPlan.launches` with the operands' bindings and addresses,
and records each :class:`Launch` on the current stream. A fused graph node lowers to the same
plans, with its scratch placed in the graph's arena instead of the pool.

Planners are pure functions of the problem (shapes, dtypes, layout facts, device caps) and
are cached on them; only :meth:`LaunchPlan.launches`, which packs addresses, runs per call.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from vkumd.errors import VkumdValueError

if TYPE_CHECKING:
    from vkumd.compiler.registry import Kernel

BufferRange = tuple[Any, int, int]  # (VkBuffer, offset, range): one storage-buffer binding


class Operand(Protocol):
    """Memory a launch binds: a tensor, a scratch buffer or a slice of a graph's arena."""

    @property
    def binding(self) -> BufferRange | None:
        """The ``(VkBuffer, offset, range)`` to bind; None for empty memory (never read)."""

    @property
    def address(self) -> int:
        """The device address of the first byte; 0 for empty memory or without addresses."""


@dataclass(frozen=True, eq=False)
class KernelVariant:
    """A kernel with its defines and specialization constants fixed: one pipeline per device.

    Build with :meth:`Kernel.specialize`, which checks the variant against what the kernel
    accepts, so a bad variant fails when it is planned rather than when it is dispatched.
    Planners cache these, so the runtime finds the pipeline by identity (``eq=False``) on
    the hot path; ``key`` names the pipeline across equal variants.

    Attributes:
        kernel: the registered kernel.
        variant: define and specialization-constant values.
        key: ``(kernel name, sorted (name, value) pairs)``.
    """

    kernel: Kernel
    variant: Mapping[str, Any]
    key: tuple = field(repr=False)


class Launch(NamedTuple):
    """One dispatch: a kernel variant, its bindings, its packed push constants and its grid.

    Attributes:
        program: the kernel variant to run.
        buffers: a binding for each of the kernel's storage buffers, in binding order.
        push: the push-constant bytes (the kernel's :class:`~vkumd.compiler.push.PushLayout`).
        groups: workgroup counts.
        writes: indices into ``buffers`` that the kernel writes; the rest it only reads. The
            runtime derives barriers from them.
    """

    program: KernelVariant
    buffers: tuple[BufferRange, ...]
    push: bytes
    groups: tuple[int, int, int]
    writes: tuple[int, ...]


class LaunchPlan(Protocol):
    """What a planner returns: the scratch a problem needs and how to launch it.

    Attributes:
        scratch: byte sizes of the temporary buffers the launches use (device memory whose
            contents need not survive the plan).
    """

    scratch: tuple[int, ...]

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand]) -> list[Launch]:
        """The launches, in order, for these operands (the op's tensors, in the order its
        planner documents; None for an absent optional one) and scratch buffers."""


def check_grid(op: str, groups: tuple[int, int, int], limits: Sequence[int], device: str,
               advice: str) -> tuple[int, int, int]:
    """``groups``, after checking each count against ``maxComputeWorkGroupCount``.

    Raises:
        VkumdValueError: a count past the device's limit; the message ends with ``advice``.
    """
    if groups[0] > limits[0] or groups[1] > limits[1] or groups[2] > limits[2]:
        raise VkumdValueError(f"{op}: this problem needs a {groups} grid of workgroups; "
                              f"{device} dispatches at most {tuple(limits)}. {advice}")
    return groups


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
