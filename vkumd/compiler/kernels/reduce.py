"""The reduction kernels: ``shaders/reduce.comp`` (one reduction per row, one workgroup per
row), ``shaders/reduce_axis.comp`` (a middle axis, one invocation per output element) and
``shaders/argmax.comp`` (the index of each row's maximum).

:func:`reduce_plan` sees x as ``[rows, cols, inner]`` reduced over ``cols``: the row kernel
(a workgroup's lanes share each row) when ``inner`` is 1, else the strided kernel, which reads
the reduced axis in place, with neighbouring invocations on neighbouring elements, instead
of paying a permute copy to move it last.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.rows import (
    PLANS,
    ROW_DEFINES,
    ROW_TYPES,
    grid,
    layout_key,
    row_types,
    row_variant,
    row_variants,
)
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# The reductions' OP codes (the shaders' spec constant 1). The squares, norms and logs are
# kinds of the kernels rather than elementwise steps around a sum: on llvmpipe (2 shared
# cores) an L2 norm of [2048, 1024] rows took 9.9 ms as one kernel against 14.5 ms as
# mul + sum + sqrt, and a sum over the middle axis of [64, 512, 64] 4.5 ms in the strided
# kernel against 19.2 ms as permute + row kernel (each the best of 5, read-back included).
REDUCE_OPS = {"sum": 0, "mean": 1, "max": 2, "min": 3, "prod": 4, "sum_square": 5,
              "l1_norm": 6, "l2_norm": 7, "logsumexp": 8, "log_sum": 9, "var": 10, "std": 11}
# The product has no lane reduction in rows.glsl: its rows take the strided kernel.
_ROW_OPS = [code for name, code in REDUCE_OPS.items() if name != "prod"]
REDUCE_PUSH = PushLayout("cols:u32", "rows:u32", "inner:u32", "denominator:f32")
# Invocations of the strided kernel per workgroup.
_AXIS_WORKGROUP = 64

REDUCE_ROWS = register(Kernel(
    name="reduce_rows",
    source="reduce.comp",
    buffers=2,
    push=REDUCE_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=row_variants(_ROW_OPS),
))

REDUCE_AXIS = register(Kernel(
    name="reduce_axis",
    source="reduce_axis.comp",
    buffers=2,
    push=REDUCE_PUSH,
    defines={"DTYPE": ROW_TYPES},
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=lambda caps: [{"DTYPE": t, WORKGROUP: _AXIS_WORKGROUP, "OP": op}
                           for t in row_types(caps) for op in REDUCE_OPS.values()],
))


def reduce_plan(caps: DeviceCaps, op: str, code: str, rows: int, cols: int, inner: int = 1,
                denominator: float | None = None) -> FixedLaunch:
    """Reduction ``op`` of x ``[rows, cols, inner]`` over ``cols``. Operands: x, out
    ``[rows, inner]``.

    Args:
        caps: the device.
        op: a key of :data:`REDUCE_OPS`.
        code: x's type code (``F32``, ``F16``, ``BF16``).
        rows, cols, inner: the sizes; ``cols`` may be 0 only for the strided path (the
            reductions' identities: 0, 1, -inf, +inf), which ``inner > 1`` or ``prod`` takes.
        denominator: what the mean and the variance divide by (default ``cols``).

    Raises:
        VkumdValueError: x has 2^32 elements or more (the kernels index in 32 bits).
    """
    if rows * cols * inner >= 1 << 32:
        raise VkumdValueError(f"{op}: x has {rows * cols * inner} elements; the reduction "
                              "kernels index at most 2^32 - 1; split the tensor")
    den = float(cols if denominator is None else denominator)
    return _reduce_plan(caps, layout_key(caps), op, code, rows, cols, inner, den)


@functools.lru_cache(maxsize=PLANS)
def _reduce_plan(caps: DeviceCaps, layout: tuple, op: str, code: str, rows: int, cols: int,
                 inner: int, denominator: float) -> FixedLaunch:
    push = REDUCE_PUSH.pack(cols, rows, inner, denominator)
    if inner == 1 and op != "prod" and cols > 0:
        program = REDUCE_ROWS.specialize({**row_variant(code, cols, layout),
                                          "OP": REDUCE_OPS[op]})
        return FixedLaunch(program, push, grid(caps, rows, 1), (1,))
    program = REDUCE_AXIS.specialize({"DTYPE": code, WORKGROUP: _AXIS_WORKGROUP,
                                      "OP": REDUCE_OPS[op]})
    return FixedLaunch(program, push, grid(caps, rows * inner, _AXIS_WORKGROUP), (1,))


# argmax: the same rows, an int32 index out (the shader carries indices through float
# reductions, exact below 2^24). MIN searches the minimum, LAST the last index among equals.
ARGMAX_PUSH = PushLayout("cols:u32", "rows:u32")
ARGMAX_ROWS = register(Kernel(
    name="argmax_rows",
    source="argmax.comp",
    buffers=2,
    push=ARGMAX_PUSH,
    defines=ROW_DEFINES,
    spec_constants={WORKGROUP: 0, "MIN": 1, "LAST": 2},
    variants=lambda caps: [{**v, "MIN": low, "LAST": last} for v in row_variants(None)(caps)
                           for low in (0, 1) for last in (0, 1)],
))


def argmax_plan(caps: DeviceCaps, code: str, rows: int, cols: int, *, minimum: bool = False,
                last: bool = False) -> FixedLaunch:
    """The index of each row's maximum (``minimum``: its minimum; ``last``: the last index
    among equals) for ``0 < cols <= ARGMAX_MAX_COLS``. Operands: x, out (int32 [rows])."""
    return _argmax_plan(caps, layout_key(caps), code, rows, cols, minimum, last)


@functools.lru_cache(maxsize=PLANS)
def _argmax_plan(caps: DeviceCaps, layout: tuple, code: str, rows: int, cols: int,
                 minimum: bool, last: bool) -> FixedLaunch:
    program = ARGMAX_ROWS.specialize({**row_variant(code, cols, layout), "MIN": int(minimum),
                                      "LAST": int(last)})
    return FixedLaunch(program, ARGMAX_PUSH.pack(cols, rows), grid(caps, rows, 1), (1,))
