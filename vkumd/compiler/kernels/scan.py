"""The scan kernel, ``shaders/scan.comp``: running sums and products along rows (cumsum,
cumprod), exclusive or inclusive, forward or reversed.

One workgroup per row; the row is scanned in blocks of the workgroup's width in shared
memory, a carry joining the blocks, so rows of any length take one launch.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import SCAN_DTYPES, SCAN_OPS
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

SCAN_CODES = type_codes(SCAN_DTYPES)
SCAN_PUSH = PushLayout("rows:u32", "cols:u32", "exclusive:u32", "reverse:u32")
# scan.comp's SCAN_MAX_WORKGROUP: the shared block holds one value per lane.
_MAX_WIDTH = 256
# GPU width: a block of 128 takes 7 scan steps and keeps several rows resident per unit.
_GPU_WIDTH = 128


def scan_width(caps: DeviceCaps) -> int:
    """The workgroup width on ``caps``: one subgroup on a CPU driver (lavapipe runs a
    workgroup's lanes in one thread, and barriers across several subgroups cost it most),
    else 128, within the device's limits."""
    wanted = caps.subgroup_size if caps.device_type == "cpu" else _GPU_WIDTH
    width = 1
    while width * 2 <= min(wanted, _MAX_WIDTH, caps.max_workgroup_invocations,
                           caps.max_workgroup_size[0]):
        width *= 2
    return width


SCAN = register(Kernel(
    name="scan",
    source="scan.comp",
    buffers=2,
    push=SCAN_PUSH,
    defines={"DTYPE": tuple(SCAN_CODES.values()), "OP": tuple(SCAN_OPS.values())},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{"DTYPE": code, "OP": op, WORKGROUP: scan_width(caps)}
                           for code in SCAN_CODES.values()
                           if caps.storage_16bit or code in ("F32", "I32")
                           for op in SCAN_OPS.values()],
))


def scan_plan(caps: DeviceCaps, code: str, op: str, rows: int, cols: int, exclusive: bool,
              reverse: bool) -> FixedLaunch:
    """A running ``op`` (a key of :data:`SCAN_OPS`) along rows. Operands: x, out.

    Raises:
        VkumdValueError: more rows than the device's grid dispatches at once.
    """
    # The width is read here, outside the cache, so tests may force another one.
    return _scan_plan(caps, scan_width(caps), code, op, rows, cols, exclusive, reverse)


@functools.lru_cache(maxsize=1024)
def _scan_plan(caps: DeviceCaps, width: int, code: str, op: str, rows: int, cols: int,
               exclusive: bool, reverse: bool) -> FixedLaunch:
    program = SCAN.specialize({"DTYPE": code, "OP": SCAN_OPS[op], WORKGROUP: width})
    push = SCAN_PUSH.pack(rows, cols, int(exclusive), int(reverse))
    return FixedLaunch(program, push, grid(caps, rows, 1), (1,))
