"""Planning the residual-add + layer-norm kernel: one workgroup per row, as ``norm``."""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.add_norm import ADD_LAYER_NORM, ADD_NORM_PUSH
from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.rows import grid, row_layout
from vkumd.vk.caps import DeviceCaps

_PLANS = 4096


@functools.lru_cache(maxsize=_PLANS)
def add_layer_norm_plan(caps: DeviceCaps, code: str, rows: int, cols: int, eps: float,
                        weight: bool, bias: bool) -> FixedLaunch:
    """``layer_norm(x + residual)`` over ``rows`` rows of ``cols``. Operands: x, residual,
    weight, bias (None when absent), out.

    Args:
        caps: the device.
        code: the element type (``ROW_CODES`` value).
        rows: rows (the product of the leading dimensions).
        cols: the row length (> 0).
        eps: added to the variance.
        weight: whether a weight is given.
        bias: whether a bias is given.

    Returns:
        The plan.

    Raises:
        VkumdValueError: more rows than the device's grid holds.
    """
    variant = {"DTYPE": code, "VEC": 4 if cols % 4 == 0 else 1, **row_layout(caps)}
    flags = int(weight) | int(bias) << 1
    return FixedLaunch(ADD_LAYER_NORM.specialize(variant),
                       ADD_NORM_PUSH.pack(cols, rows, eps, flags), grid(caps, rows, 1), (4,))
