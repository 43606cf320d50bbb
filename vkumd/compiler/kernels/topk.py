"""The top-k kernel, ``shaders/topk.comp``: the k largest or smallest entries of each row in
order with their int32 indices (ties to the lower index), and its ``HARDMAX`` build, the
one-hot of each row's first maximum.

One workgroup per row, k passes over the row (no per-entry state): made for small k, which
:data:`~vkumd.compiler.kernels.limits.TOPK_MAX_K` bounds.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels import scan
from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import TOPK_DTYPES
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

TOPK_CODES = type_codes(TOPK_DTYPES)
TOPK_PUSH = PushLayout("rows:u32", "cols:u32", "k:u32", "largest:u32")

TOPK = register(Kernel(
    name="topk",
    source="topk.comp",
    buffers=3,
    push=TOPK_PUSH,
    defines={"DTYPE": tuple(TOPK_CODES.values()), "HARDMAX": (0, 1)},
    spec_constants={WORKGROUP: 0},
    # The scan kernel's width: one subgroup on a CPU driver, 128 lanes on a GPU.
    variants=lambda caps: [{"DTYPE": code, "HARDMAX": hardmax,
                            WORKGROUP: scan.scan_width(caps)}
                           for code in TOPK_CODES.values()
                           if caps.storage_16bit or code in ("F32", "I32")
                           for hardmax in (0, 1)],
))


def topk_plan(caps: DeviceCaps, code: str, rows: int, cols: int, k: int, largest: bool
              ) -> FixedLaunch:
    """The ``k`` largest (or smallest) entries of each row. Operands: x, values, indices."""
    # The width is read here, outside the cache, so tests may force another one.
    return _topk_plan(caps, scan.scan_width(caps), code, 0, rows, cols, k, largest)


def hardmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int) -> FixedLaunch:
    """Each row's one-hot first maximum. Operands: x, out, None (no indices)."""
    return _topk_plan(caps, scan.scan_width(caps), code, 1, rows, cols, 1, True)


@functools.lru_cache(maxsize=1024)
def _topk_plan(caps: DeviceCaps, width: int, code: str, hardmax: int, rows: int, cols: int,
               k: int, largest: bool) -> FixedLaunch:
    program = TOPK.specialize({"DTYPE": code, "HARDMAX": hardmax, WORKGROUP: width})
    return FixedLaunch(program, TOPK_PUSH.pack(rows, cols, k, int(largest)),
                       grid(caps, rows, 1), (1,) if hardmax else (1, 2))
