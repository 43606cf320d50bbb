"""Layer norm and RMS norm over the last dimension, with optional affine parameters."""

from __future__ import annotations

from vkumd.compiler.kernels.norm import norm_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdValueError
from vkumd.framework.ops.checks import (
    check_float,
    check_real,
    check_same,
    leading_rows,
    output,
)
from vkumd.framework.tensor import Tensor


def check_norm_arguments(op: str, x: Tensor, weight: Tensor | None, bias: Tensor | None,
                         eps: float) -> tuple[int, int, float]:
    """``(rows, cols, eps)`` after the checks every normalisation shares.

    Raises:
        VkumdTypeError: weight or bias of another dtype; non-numeric eps.
        VkumdValueError: 0-d x; weight or bias of the wrong length; negative eps.
    """
    rows, cols = leading_rows(op, x)
    eps = check_real(op, eps, "eps")
    if not eps >= 0.0:
        raise VkumdValueError(f"{op}: eps={eps!r}; it must be >= 0 (it keeps 1/sqrt finite)")
    for what, param in (("weight", weight), ("bias", bias)):
        if param is None:
            continue
        check_same(op, x, param, what)
        if param.shape != (cols,):
            raise VkumdValueError(f"{op}: {what} has shape {param.shape}; it must be "
                                  f"({cols},), the length of x's last dimension")
    return rows, cols, eps


def _norm(op: str, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float,
          out: Tensor | None) -> Tensor:
    x = check_float(op, x)
    rows, cols, eps = check_norm_arguments(op, x, weight, bias, eps)
    out = output(op, x.context, out, x.shape, x.dtype)
    if out.size == 0:
        return out
    plan = norm_plan(x.context.caps, op, ROW_CODES[x.dtype.name], rows, cols, eps,
                     weight is not None, bias is not None)
    x.context.run(plan, (x, weight, bias, out))
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
