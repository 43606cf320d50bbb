"""``add_layer_norm``: layer norm of a residual sum in one kernel (``shaders/add_norm.comp``)."""

from __future__ import annotations

from vkumd.compiler.kernels.add_norm_plan import add_layer_norm_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.framework.ops.checks import output
from vkumd.framework.ops.norm import check_norm_call
from vkumd.framework.tensor import Tensor

__all__ = ["add_layer_norm"]


def add_layer_norm(x: Tensor, residual: Tensor, weight: Tensor | None = None,
                   bias: Tensor | None = None, *, eps: float = 1e-5,
                   out: Tensor | None = None) -> Tensor:
    """``layer_norm(x + residual, weight, bias, eps=eps)`` over the last dimension.

    The sum is formed in float32 and never stored (nor rounded to x's type); mean and
    biased variance are accumulated in float32, as :func:`~vkumd.ops.layer_norm`.

    Args:
        x: float32, float16 or bfloat16, at least 1-D.
        residual: x's shape and dtype.
        weight: optional scale, shape ``(x.shape[-1],)``, x's dtype.
        bias: optional shift, shape ``(x.shape[-1],)``, x's dtype.
        eps: added to the variance (finite, >= 0).
        out: optional output of x's shape and dtype (neither x nor residual).

    Returns:
        The normalised sum, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; residual, weight, bias or out of another dtype;
            non-numeric eps.
        VkumdValueError: 0-d x; a residual of another shape; weight or bias of the wrong
            length; eps negative or not finite; out of the wrong shape or aliasing an input.
    """
    op = "add_layer_norm"
    x, rows, cols, eps = check_norm_call(op, x, (residual, weight, bias),
                                         ("residual", "weight?", "bias?"), eps)
    out = output(op, x.context, out, x.shape, x.dtype, (x, residual))
    if out.size == 0:
        return out
    plan = add_layer_norm_plan(x.context.caps, ROW_CODES[x.dtype.name], rows, cols, eps,
                               weight is not None, bias is not None)
    x.context.run(plan, (x, residual, weight, bias, out))
    return out
