"""Layer norm and RMS norm over the last dimension, with optional affine parameters.

The arguments are checked by the ops' records' rule (:mod:`vkumd.framework.opset.rows`), the
one the graph applies.
"""

from __future__ import annotations

import math
from typing import Any

from vkumd.compiler.kernels.norm import norm_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.framework.ops.checks import check_storage, output
from vkumd.framework.ops.contract import (
    Verdicts,
    concrete_rule,
    live_inputs,
    recall,
    remember,
    signature,
)
from vkumd.framework.tensor import Tensor

# (rows, cols, eps) by (op, x's shape and dtype name, each optional input's signature, eps
# and its type): what the op's rule accepted.
_VERDICTS: Verdicts = {}


def check_norm_call(op: str, x: Any, others: tuple[Any, ...], names: tuple[str, ...],
                    eps: Any) -> tuple[Tensor, int, int, float]:
    """Check a normalisation's arguments with the op record's rule.

    Args:
        op: ``"layer_norm"``, ``"rms_norm"`` or ``"add_layer_norm"``.
        x: the rows.
        others: the op's other inputs in its record's order (None where absent).
        names: their names, for the messages (``"weight?"``: optional).
        eps: the eps attribute.

    Returns:
        ``(x, rows, cols, eps)``.

    Raises:
        VkumdTypeError: non-tensor or non-float x; another input of another dtype;
            non-numeric eps.
        VkumdValueError: 0-d x; an input of the wrong shape; eps negative or not finite;
            tensors of different contexts.
        CapabilityMissing: a 16-bit type on a device without 16-bit storage.
    """
    x = live_inputs(op, x, zip(others, names, strict=True))
    key = (op, x.shape, x.dtype.name, *map(signature, others), eps, type(eps))
    known = recall(_VERDICTS, key)
    if known is None:
        concrete_rule(op, (x, *others), {"eps": eps})
        known = remember(_VERDICTS, key, (math.prod(x.shape[:-1]), x.shape[-1], float(eps)))
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    return (x, *known)


def _norm(op: str, x: Tensor, weight: Tensor | None, bias: Tensor | None, eps: float,
          out: Tensor | None) -> Tensor:
    others, names = ((weight, bias), ("weight?", "bias?")) if op == "layer_norm" else \
        ((weight,), ("weight?",))
    x, rows, cols, eps = check_norm_call(op, x, others, names, eps)
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
        eps: added to the variance (finite, >= 0).
        out: optional output of x's shape and dtype.

    Returns:
        The normalised tensor, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; weight, bias or out of another dtype; non-numeric eps.
        VkumdValueError: 0-d x; weight or bias of the wrong length; eps negative or not
            finite; out of the wrong shape.
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
        eps: added to the mean square (finite, >= 0).
        out: optional output of x's shape and dtype.

    Returns:
        The normalised tensor, x's shape and dtype.

    Raises:
        VkumdTypeError: non-float x; weight or out of another dtype; non-numeric eps.
        VkumdValueError: 0-d x; weight of the wrong length; eps negative or not finite; out of
            the wrong shape.
    """
    return _norm("rms_norm", x, weight, None, eps, out)


__all__ = ["layer_norm", "rms_norm"]
