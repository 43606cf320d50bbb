"""Layer norm and RMS norm over the last dimension, with optional affine parameters."""

from __future__ import annotations

import struct

from vkumd.compiler.kernels.transformer import ROW_OPS
from vkumd.errors import VkumdValueError
from vkumd.framework.ops import _rows
from vkumd.framework.tensor import Tensor

_PUSH = struct.Struct("<2If1I")


def _norm(op: str, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float,
          out: Tensor | None) -> Tensor:
    x = _rows.check_float(op, x)
    rows, cols = _rows.leading_rows(op, x)
    eps = _rows.check_real(op, eps, "eps")
    if not eps >= 0.0:
        raise VkumdValueError(f"{op}: eps={eps!r}; it must be >= 0 (it keeps 1/sqrt finite)")
    flags = 0
    params = []
    for bit, (what, param) in enumerate((("weight", weight), ("bias", bias))):
        if param is None:
            params.append(x)  # a dummy binding the kernel does not read
            continue
        param = _rows.check_same(op, x, param, what)
        if param.shape != (cols,):
            raise VkumdValueError(f"{op}: {what} has shape {param.shape}; it must be "
                                  f"({cols},), the length of x's last dimension")
        flags |= 1 << bit
        params.append(param)
    out = _rows.output(op, x, out, x.shape)
    if out.size == 0:
        return out
    variant = _rows.row_variant(x, cols, OP=ROW_OPS[op])
    buffers = [_rows.buffer(x), *(_rows.buffer(p) for p in params), _rows.buffer(out)]
    x.context.dispatch("norm", variant, buffers, _PUSH.pack(cols, rows, eps, flags),
                       _rows.rows_grid(x.context, rows), writes=(3,))
    return out


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None, *,
               eps: float = 1e-5, out: Tensor | None = None) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dimension.

    The variance is the biased one (divided by the row length), as ``torch.nn.LayerNorm``.
    Mean and variance are accumulated in float32; a row whose squares would overflow or
    underflow float32 (``|x|`` beyond about 1e19 or below about 1e-19) is first divided by a
    power of two near its largest ``|x|``, so it keeps float32 accuracy instead of coming
    back as zeros, huge values or inf. A row holding inf or NaN is written as NaN. A constant
    row gives zeros, or NaN (0/0) with ``eps=0``, as in torch.

    Args:
        x: float32, float16 or bfloat16, at least 1-D.
        weight: optional scale, shape ``(x.shape[-1],)``, x's dtype.
        bias: optional shift, shape ``(x.shape[-1],)``, x's dtype.
        eps: added to the variance (>= 0).
        out: optional output of x's shape and dtype.

    Returns:
        The normalised tensor, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; weight, bias or out of another dtype; non-numeric eps.
        VkumdValueError: 0-d x; weight or bias of the wrong length; negative eps; out of the
            wrong shape.
    """
    return _norm("layer_norm", x, weight, bias, eps, out)


def rms_norm(x: Tensor, weight: Tensor | None = None, *, eps: float = 1e-6,
             out: Tensor | None = None) -> Tensor:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last dimension (as in LLaMA).

    Accumulated in float32; a row whose squares would overflow or underflow float32 is first
    divided by a power of two near its largest ``|x|``, so it keeps float32 accuracy instead
    of coming back as zeros or inf. A row holding inf or NaN is written as NaN (torch gives 0
    for the finite entries beside an inf, where the norm itself is inf). An all-zero row gives
    zeros, or NaN (0/0) with ``eps=0``.

    Args:
        x: float32, float16 or bfloat16, at least 1-D.
        weight: optional scale, shape ``(x.shape[-1],)``, x's dtype.
        eps: added to the mean square (>= 0).
        out: optional output of x's shape and dtype.

    Returns:
        The normalised tensor, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; weight or out of another dtype; non-numeric eps.
        VkumdValueError: 0-d x; weight of the wrong length; negative eps; out of the wrong
            shape.
    """
    return _norm("rms_norm", x, weight, None, eps, out)


__all__ = ["layer_norm", "rms_norm"]
