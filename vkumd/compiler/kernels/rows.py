"""The row kernels' shared machinery: one workgroup per row, reducing across its lanes.

``softmax``, ``norm``, ``reduce_rows`` and ``add_layer_norm`` give one workgroup to each row
and share ``shaders/include/rows.glsl``; ``gather_rows`` takes their workgroup width.
:func:`row_layout` picks how a workgroup reduces across its lanes, per device class: on a CPU
driver such as lavapipe one subgroup per row (no shared memory, which lavapipe makes slow);
on a GPU up to 256 lanes, with subgroup sums combined through one shared slot per subgroup;
without subgroup arithmetic, a shared-memory tree. ``VEC`` 4 variants load four elements at a
time when a row's length allows it. The grid folds into a second dimension past
``maxComputeWorkGroupCount[0]`` rows.
"""

from __future__ import annotations

from collections.abc import Callable

from vkumd.compiler.kernels.limits import ROW_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.launch import grid_for
from vkumd.compiler.registry import WORKGROUP, effective_caps
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# The dtypes the row and activation kernels take and their type codes.
ROW_CODES = type_codes(ROW_DTYPES)
ROW_TYPES = tuple(ROW_CODES.values())
ROW_DEFINES = {"DTYPE": ROW_TYPES, "VEC": (1, 4), "SUBGROUP_REDUCE": (0, 1)}
# Plans each row planner caches.
PLANS = 4096
# The shared-memory tree reduces at most this many lanes (rows.glsl ROW_MAX_WORKGROUP).
_MAX_TREE = 256


def row_types(caps: DeviceCaps) -> list[str]:
    """The row types usable on ``caps``: float16 and bfloat16 need 16-bit storage."""
    return [t for t in ROW_TYPES if caps.storage_16bit or t == "F32"]


def _power_of_two_at_most(n: int) -> int:
    p = 1
    while p * 2 <= n:
        p *= 2
    return p


def row_layout(caps: DeviceCaps) -> dict:
    """The reduction path and workgroup width of the row kernels on ``caps``.

    Returns:
        ``{"SUBGROUP_REDUCE": 0 or 1, WORKGROUP: lanes}``. With subgroups the width keeps
        the subgroup count within one subgroup (rows.glsl combines the per-subgroup partial
        results in a single subgroup), using the smallest subgroup size the driver may pick.
    """
    limit = min(_MAX_TREE, caps.max_workgroup_invocations, caps.max_workgroup_size[0])
    if "subgroup_arithmetic" in effective_caps(caps):
        if caps.device_type == "cpu":
            return {"SUBGROUP_REDUCE": 1, WORKGROUP: caps.subgroup_size}
        smallest = max(1, caps.min_subgroup_size)
        return {"SUBGROUP_REDUCE": 1, WORKGROUP: min(limit, smallest * smallest)}
    width = caps.subgroup_size if caps.device_type == "cpu" else limit
    return {"SUBGROUP_REDUCE": 0, WORKGROUP: _power_of_two_at_most(max(1, min(width, limit)))}


def row_variants(ops: list[int] | None) -> Callable[[DeviceCaps], list[dict]]:
    """Every dtype and vector width, for each ``OP`` (``None``: the kernel has no ``OP``)."""
    def variants(caps: DeviceCaps) -> list[dict]:
        layout = row_layout(caps)
        out = [{"DTYPE": t, "VEC": vec, **layout} for t in row_types(caps) for vec in (1, 4)]
        return out if ops is None else [{**v, "OP": op} for v in out for op in ops]
    return variants


def layout_key(caps: DeviceCaps) -> tuple[tuple[str, int], ...]:
    """:func:`row_layout` on ``caps`` as a hashable key for the planners' caches."""
    # A module global read on each call, so tests can swap the reduction path.
    return tuple(sorted(row_layout(caps).items()))


def row_variant(code: str, cols: int, layout: tuple[tuple[str, int], ...]) -> dict:
    """The variant of a row kernel for rows of ``cols`` elements of type ``code``."""
    return {"DTYPE": code, "VEC": 4 if cols % 4 == 0 else 1, **dict(layout)}


def grid(caps: DeviceCaps, count: int, workgroup: int) -> tuple[int, int, int]:
    """Groups of ``workgroup`` lanes covering ``count``, 2-D past the x limit.

    Raises:
        VkumdValueError: even the 2-D grid passes the device's limits.
    """
    groups = grid_for(count, workgroup, caps.max_workgroup_count[0])
    if groups[1] > caps.max_workgroup_count[1]:
        raise VkumdValueError(f"{count} work items need more workgroups than "
                              f"{caps.name} dispatches at once")
    return groups
