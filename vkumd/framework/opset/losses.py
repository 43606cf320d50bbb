"""``nll_loss``: the negative log-likelihood loss over class scores (ONNX's
NegativeLogLikelihoodLoss, torch's ``nll_loss``); with ``log_softmax`` first it is the
softmax cross-entropy (ONNX's SoftmaxCrossEntropyLoss converts to the pair).

The nll kernel (``shaders/nll.comp``) gathers each target's weighted ``-x`` and its weight in
float32; the reduction is the ``sum`` row kernel over them (and a ``div`` for the mean),
then one cast to x's dtype.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import NLL_DTYPES
from vkumd.compiler.kernels.nll import NLL_CODES, nll_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types
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
from vkumd.framework.opset.arith import div
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.layout import reshape
from vkumd.framework.opset.reductions import sum as row_sum
from vkumd.framework.opset.unary import cast, copy, fill
from vkumd.framework.tensor import Tensor

REDUCTIONS = ("none", "sum", "mean")
_INT32 = np.iinfo(np.int32)

# The result's shape by (the operands' signatures, the attributes and their types): calls
# the rule accepted.
_VERDICTS: Verdicts = {}


def _nll_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, target, weight = ins
    assert x is not None and target is not None  # the registry checks required inputs
    if x.dtype.name not in NLL_DTYPES:
        raise VkumdTypeError(f"nll_loss: x is {x.dtype.name}; it takes "
                             f"{', '.join(NLL_DTYPES)} (cast() converts)")
    if x.ndim < 2:
        raise VkumdValueError(f"nll_loss: x has shape {format_shape(x.shape)}; it needs "
                              "[N, C] or [N, C, d1, ...] (classes on axis 1)")
    if target.dtype is not dtypes.int32:
        raise VkumdTypeError(f"nll_loss: target is {target.dtype.name}; it must be int32 class "
                             "indices")
    want = x.shape[:1] + x.shape[2:]
    if not dims.same_shape(target.shape, want):
        raise VkumdValueError(f"nll_loss: target has shape {format_shape(target.shape)}; x of "
                              f"shape {format_shape(x.shape)} needs {format_shape(want)}")
    if weight is not None:
        if weight.dtype is not x.dtype:
            raise VkumdTypeError(f"nll_loss: weight is {weight.dtype.name} but x is "
                                 f"{x.dtype.name}; cast it to x's dtype")
        if not dims.same_shape(weight.shape, x.shape[1:2]):
            raise VkumdValueError(f"nll_loss: weight has shape {format_shape(weight.shape)}; "
                                  f"it needs one entry per class, {format_shape(x.shape[1:2])}")
    reduction = attrs["reduction"]
    if reduction not in REDUCTIONS:
        raise VkumdValueError(f"nll_loss: reduction={reduction!r}; it is one of "
                              f"{', '.join(REDUCTIONS)}")
    ignore = attrs["ignore_index"]
    if ignore is not None and (isinstance(ignore, bool) or not isinstance(ignore, int)):
        raise VkumdTypeError(f"nll_loss: ignore_index must be an int or None, not {ignore!r}")
    if ignore is not None and not _INT32.min <= ignore <= _INT32.max:
        raise VkumdValueError(f"nll_loss: ignore_index={ignore} is outside int32's range")
    return [TensorType(target.shape if reduction == "none" else (), x.dtype)]


def nll_loss(x: Tensor, target: Tensor, weight: Tensor | None = None, *,
             reduction: str = "mean", ignore_index: int | None = None,
             out: Tensor | None = None) -> Tensor:
    """The negative log-likelihood loss: ``-x[n, target[n, ...], ...] * weight[target]``.

    ``x`` holds log-probabilities (``log_softmax``'s output) with the classes on axis 1.
    The terms are computed and reduced in float32, then stored in x's dtype. A target equal
    to ``ignore_index`` contributes nothing (neither loss nor weight); any other target
    outside ``[0, C)`` makes its term NaN (and so the sum and mean).

    Args:
        x: float32, float16 or bfloat16, ``[N, C]`` or ``[N, C, d1, ...]``.
        target: int32 class indices, ``[N]`` or ``[N, d1, ...]``.
        weight: optional per-class weights, ``[C]``, x's dtype.
        reduction: ``"none"`` (target's shape), ``"sum"``, or ``"mean"`` (the sum divided by
            the sum of the targets' weights; NaN when that is 0).
        ignore_index: a target value to skip, or None.
        out: optional output of the result's shape and x's dtype.

    Returns:
        The loss: target's shape under ``"none"``, else 0-d; x's dtype.

    Raises:
        VkumdTypeError: non-tensors, x not float, target not int32, weight of another dtype,
            a non-int ignore_index, out of another dtype.
        VkumdValueError: shapes that do not match, an unknown reduction, ignore_index
            outside int32, out of the wrong shape.
    """
    op = "nll_loss"
    x = live_inputs(op, x, ((target, "target"), (weight, "weight?")))
    attrs = {"reduction": reduction, "ignore_index": ignore_index}
    key = (x.shape, x.dtype.name, signature(target), signature(weight), reduction,
           ignore_index, type(ignore_index))
    shape = recall(_VERDICTS, key)
    if shape is None:
        (result,) = concrete_rule(op, (x, target, weight), attrs)
        shape = remember(_VERDICTS, key, result.shape)
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    out = output(op, x.context, out, shape, x.dtype, (x, target, weight))
    count = math.prod(target.shape)
    if count == 0:  # no terms: an empty "none", a zero sum, a mean of nothing (NaN)
        if out.size:
            fill(out, 0.0 if reduction == "sum" else float("nan"))
        return out
    ctx = x.context
    losses = ctx.empty((count,), dtypes.float32)
    weights = ctx.empty((count,), dtypes.float32)
    parts: list[Tensor] = [losses, weights]
    try:
        plan = nll_plan(ctx.caps, NLL_CODES[x.dtype.name], count, x.shape[1],
                        count // x.shape[0], weight is not None, ignore_index)
        ctx.run(plan, (x, target, weight, losses, weights))
        if reduction == "none":
            result = reshape(losses, shape)
        else:
            result = row_sum(losses)
            parts.append(result)
            if reduction == "mean":
                total = row_sum(weights)
                parts.append(total)
                result = div(parts[-2], total)
                parts.append(result)
        if x.dtype is dtypes.float32:
            copy(result, out=out)
        else:
            cast(result, x.dtype.name, out=out)
    finally:
        for t in parts:
            t.release()  # back to the pool once the launches have run
    return out


def nll_reference(x: np.ndarray, target: np.ndarray, weight: np.ndarray | None,
                  reduction: str, ignore_index: int | None) -> np.ndarray:
    """float64 negative log-likelihood (out-of-range targets give NaN terms)."""
    x = np.asarray(x, np.float64)
    t = np.asarray(target).astype(np.int64)
    classes = x.shape[1]
    ignored = np.zeros(t.shape, bool) if ignore_index is None else t == ignore_index
    bad = ~ignored & ((t < 0) | (t >= classes))
    safe = np.where(ignored | bad, 0, t)
    picked = np.take_along_axis(x, np.expand_dims(safe, 1), axis=1)[:, 0]
    w = np.ones(classes) if weight is None else np.asarray(weight, np.float64)
    wt = np.where(ignored, 0.0, np.where(bad, np.nan, w[safe]))
    loss = np.where(ignored, 0.0, np.where(bad, np.nan, -picked * wt))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return np.asarray(loss.sum())
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(loss.sum() / wt.sum())


def _nll_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    nll_loss(ins[0], ins[1], ins[2], reduction=at["reduction"],
             ignore_index=at["ignore_index"], out=outs[0])


define("nll_loss", ("x", "target", "weight?"), {"reduction": "mean", "ignore_index": None},
       rule=_nll_rule,
       reference=lambda a, at, s: [nll_reference(a[0], a[1], a[2], at["reduction"],
                                                 at["ignore_index"])],
       lower=_nll_lower, eager=nll_loss)
