"""The layer-norm and RMS-norm kernel, ``shaders/norm.comp``.

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

NORM_OPS = {"layer_norm": 0, "rms_norm": 1}
NORM_PUSH = PushLayout("cols:u32", "rows:u32", "eps:f32", "flags:u32")

NORM = register(Kernel(
    name="norm",
    source="norm.comp",
    buffers=4,
    push=NORM_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=row_variants(list(NORM_OPS.values())),
))


def norm_plan(caps: DeviceCaps, op: str, code: str, rows: int, cols: int, eps: float,
              weight: bool, bias: bool) -> FixedLaunch:
    """``layer_norm`` or ``rms_norm`` over rows. Operands: x, weight, bias (None when
    absent), out."""
    return _norm_plan(caps, layout_key(caps), op, code, rows, cols, eps, weight, bias)


@functools.lru_cache(maxsize=PLANS)
def _norm_plan(caps: DeviceCaps, layout: tuple, op: str, code: str, rows: int, cols: int,
               eps: float, weight: bool, bias: bool) -> FixedLaunch:
    flags = int(weight) | int(bias) << 1
    program = NORM.specialize({**row_variant(code, cols, layout), "OP": NORM_OPS[op]})
    return FixedLaunch(program, NORM_PUSH.pack(cols, rows, eps, flags), grid(caps, rows, 1),
                       (3,))
