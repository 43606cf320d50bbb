"""Dispatch grids: how many workgroups cover a count, within the device's limits."""

from __future__ import annotations


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
