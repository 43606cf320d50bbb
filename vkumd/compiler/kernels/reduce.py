"""The row reduction kernels: ``shaders/reduce.comp`` (``sum``, ``mean`` or ``max`` per row)
and ``shaders/argmax.comp`` (the index of each row's maximum).

A row kernel (:mod:`~vkumd.compiler.kernels.rows`): one workgroup per row.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.rows import (
    PLANS,
    ROW_DEFINES,
    grid,
    layout_key,
    row_variant,
    row_variants,
)
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

REDUCE_OPS = {"sum": 0, "mean": 1, "max": 2}
REDUCE_PUSH = PushLayout("cols:u32", "rows:u32")

REDUCE_ROWS = register(Kernel(
    name="reduce_rows",
    source="reduce.comp",
    buffers=2,
    push=REDUCE_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=row_variants(list(REDUCE_OPS.values())),
))


def reduce_plan(caps: DeviceCaps, op: str, code: str, rows: int, cols: int) -> FixedLaunch:
    """``sum``, ``mean`` or ``max`` over rows (``cols`` > 0). Operands: x, out."""
    return _reduce_plan(caps, layout_key(caps), op, code, rows, cols)


@functools.lru_cache(maxsize=PLANS)
def _reduce_plan(caps: DeviceCaps, layout: tuple, op: str, code: str, rows: int, cols: int
                 ) -> FixedLaunch:
    program = REDUCE_ROWS.specialize({**row_variant(code, cols, layout),
                                      "OP": REDUCE_OPS[op]})
    return FixedLaunch(program, REDUCE_PUSH.pack(cols, rows), grid(caps, rows, 1), (1,))


# argmax: the same rows, an int32 index out (the shader carries indices through float
# reductions, exact below 2^24).
ARGMAX_PUSH = REDUCE_PUSH
ARGMAX_ROWS = register(Kernel(
    name="argmax_rows",
    source="argmax.comp",
    buffers=2,
    push=ARGMAX_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0},
    variants=row_variants(None),
))


def argmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int) -> FixedLaunch:
    """The index of each row's maximum (``0 < cols <= ARGMAX_MAX_COLS``). Operands: x,
    out (int32 [rows])."""
    return _argmax_plan(caps, layout_key(caps), code, rows, cols)


@functools.lru_cache(maxsize=PLANS)
def _argmax_plan(caps: DeviceCaps, layout: tuple, code: str, rows: int, cols: int
                 ) -> FixedLaunch:
    program = ARGMAX_ROWS.specialize(row_variant(code, cols, layout))
    return FixedLaunch(program, ARGMAX_PUSH.pack(cols, rows), grid(caps, rows, 1), (1,))
