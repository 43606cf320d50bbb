"""The softmax kernel, ``shaders/softmax.comp``: ``softmax(x * scale + mask)`` over rows, and
its ``log_softmax`` build (``LOG_SOFTMAX`` 1: the same passes, the last writing logarithms).

A row kernel (:mod:`~vkumd.compiler.kernels.rows`): one workgroup per row.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import SOFTMAX_MAX_LEAD
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

SOFTMAX_PUSH = PushLayout("cols:u32", "rows:u32", "scale:f32", "mask_mode:u32", "nlead:u32",
                          f"lead:u32[{SOFTMAX_MAX_LEAD}]", f"mstride:u32[{SOFTMAX_MAX_LEAD}]")

SOFTMAX = register(Kernel(
    name="softmax",
    source="softmax.comp",
    buffers=3,
    push=SOFTMAX_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0},
    variants=row_variants(None),
))

LOG_SOFTMAX = register(Kernel(
    name="log_softmax",
    source="softmax.comp",
    buffers=3,
    push=SOFTMAX_PUSH,
    defines={**ROW_DEFINES, "LOG_SOFTMAX": (1,)},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{**v, "LOG_SOFTMAX": 1} for v in row_variants(None)(caps)],
))


def softmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int, scale: float,
                 mask_mode: int, lead: tuple[int, ...], mstride: tuple[int, ...]
                 ) -> FixedLaunch:
    """``softmax(x * scale + mask)`` over rows. Operands: x, mask (or None), out.

    Args:
        mask_mode: 0 no mask, 1 a mask row per x row, 2 one mask value per x row.
        lead: x's leading dimensions (at most :data:`SOFTMAX_MAX_LEAD`; empty without a mask).
        mstride: the mask's element strides along them (0 where broadcast).
    """
    return _softmax_plan(caps, layout_key(caps), code, rows, cols, scale, mask_mode, lead,
                         mstride)


@functools.lru_cache(maxsize=PLANS)
def _softmax_plan(caps: DeviceCaps, layout: tuple, code: str, rows: int, cols: int,
                  scale: float, mask_mode: int, lead: tuple[int, ...],
                  mstride: tuple[int, ...]) -> FixedLaunch:
    pad = SOFTMAX_MAX_LEAD - len(lead)
    push = SOFTMAX_PUSH.pack(cols, rows, scale, mask_mode, len(lead), *lead, *([1] * pad),
                             *mstride, *([0] * (SOFTMAX_MAX_LEAD - len(mstride))))
    program = SOFTMAX.specialize(row_variant(code, cols, layout))
    return FixedLaunch(program, push, grid(caps, rows, 1), (2,))


@functools.lru_cache(maxsize=PLANS)
def _log_softmax_plan(caps: DeviceCaps, layout: tuple, code: str, rows: int, cols: int
                      ) -> FixedLaunch:
    push = SOFTMAX_PUSH.pack(cols, rows, 1.0, 0, 0, *([1] * SOFTMAX_MAX_LEAD),
                             *([0] * SOFTMAX_MAX_LEAD))
    program = LOG_SOFTMAX.specialize({**row_variant(code, cols, layout), "LOG_SOFTMAX": 1})
    return FixedLaunch(program, push, grid(caps, rows, 1), (2,))


def log_softmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int) -> FixedLaunch:
    """``x - max - log(sum(exp(x - max)))`` over rows. Operands: x, None (no mask), out."""
    return _log_softmax_plan(caps, layout_key(caps), code, rows, cols)
