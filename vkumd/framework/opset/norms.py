"""Layer norm and RMS norm over the last dimension, with optional affine parameters: the
``layer_norm`` and ``rms_norm`` records and their eager functions, which check their
arguments with the records' rule (the one the graph applies; ``add_layer_norm`` shares it)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from vkumd.compiler.kernels.norm import norm_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import (
    Types,
    at_least_1d,
    like_x,
    need_float,
    only,
)
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, output
from vkumd.framework.ops.contract import (
    Verdicts,
    concrete_rule,
    live_inputs,
    recall,
    remember,
    signature,
)
from vkumd.framework.opset.common import attrs_of
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


def norm_rule(op: str, ins: Types, eps: Any, dims: DimTable) -> list[TensorType]:
    """The rule of a norm over ``(x, weight?, bias?)``: x float, at least 1-D, eps >= 0,
    weight and bias x's dtype and one value per element of a row."""
    x = only(ins)
    need_float(op, x)
    at_least_1d(op, x)
    if isinstance(eps, bool) or not isinstance(eps, numbers.Real):
        raise VkumdTypeError(f"{op}: eps must be a real number, not {eps!r}")
    if not 0.0 <= eps < math.inf:
        raise VkumdValueError(f"{op}: eps must be >= 0 and finite (it keeps 1/sqrt finite), "
                              f"got {eps!r}")
    for what, t in zip(("weight", "bias"), ins[1:], strict=False):
        if t is None:
            continue
        like_x(op, x, t, what)
        if t.ndim != 1 or not dims.same(t.shape[0], x.shape[-1]):
            raise VkumdValueError(f"{op}: {what} has shape {format_shape(t.shape)}; it must "
                                  f"be [{x.shape[-1]}], one value per element of a row")
    return [x]


def layer_norm_reference(args: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    """``layer_norm(x, weight?, bias?)`` in float64 (the biased variance)."""
    x, w, b = args
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    # A constant finite row has variance 0 and centres to 0 at any magnitude and eps (the
    # kernels' answer); the mean of n copies may round off the value, which would leave a
    # spurious residue, and with eps = 0 divide 0 by 0.
    constant = np.isfinite(x[..., :1]) & (x == x[..., :1]).all(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        y = np.where(constant, 0.0, (x - mean) / np.sqrt(var + float(attrs["eps"])))
    y = y * w if w is not None else y
    return [y + b if b is not None else y]


def _layer_norm_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    layer_norm(ins[0], ins[1], ins[2], eps=attrs_of(node)["eps"], out=outs[0])


define("layer_norm", ("x", "weight?", "bias?"), {"eps": 1e-5},
       rule=lambda ins, attrs, dims: norm_rule("layer_norm", ins, attrs["eps"], dims),
       reference=layer_norm_reference, lower=_layer_norm_lower, eager=layer_norm)


def _rms_norm_reference(args: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    x, w = args
    y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + float(attrs["eps"]))
    return [y * w if w is not None else y]


def _rms_norm_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    rms_norm(ins[0], ins[1], eps=attrs_of(node)["eps"], out=outs[0])


define("rms_norm", ("x", "weight?"), {"eps": 1e-6},
       rule=lambda ins, attrs, dims: norm_rule("rms_norm", ins, attrs["eps"], dims),
       reference=_rms_norm_reference, lower=_rms_norm_lower, eager=rms_norm)
