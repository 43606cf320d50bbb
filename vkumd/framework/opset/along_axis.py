"""Running a last-axis row kernel along any axis: the axis is moved last with a permute (a
copy), the kernel writes a scratch tensor, and a second permute writes ``out``. The row ops of
this wave (``log_softmax``, ``cumsum``, ``cumprod``) share it."""

from __future__ import annotations

from collections.abc import Callable

from vkumd.framework.opset.layout import permute
from vkumd.framework.tensor import Tensor


def along_axis(x: Tensor, axis: int, out: Tensor, run: Callable[[Tensor, Tensor], None]) -> None:
    """``run(src, dst)`` over rows of ``x`` along ``axis``, the result written to ``out``.

    Args:
        x: the input; ``axis`` an index into its dimensions (already checked).
        out: the result, ``x``'s shape.
        run: launches the row kernel from ``src`` (rows along its last axis) into ``dst``.
    """
    last = x.ndim - 1
    if axis == last:
        run(x, out)
        return
    order = [d for d in range(x.ndim) if d != axis] + [axis]
    moved = permute(x, order)
    rows = x.context.empty(moved.shape, out.dtype)
    try:
        run(moved, rows)
        permute(rows, [order.index(d) for d in range(x.ndim)], out=out)
    finally:
        moved.release()  # back to the pool once the launches have run
        rows.release()
