"""Softmax over the last dimension (or any other, moved last first), with an optional scale
and an additive mask: the ``softmax`` record and its eager function, which checks its
arguments with the record's rule (the one the graph applies) and adds the kernel's limit on a
masked x's rank."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import axis_double_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.compiler.kernels.softmax import SOFTMAX_MAX_LEAD, softmax_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import (
    Types,
    at_least_1d,
    axis_of,
    like_x,
    need_float,
    only,
    real,
)
from vkumd.framework.graph.reference import softmax_rows
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
from vkumd.framework.opset.along_axis import along_axis
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor


def _mask_words(x: Tensor, mask: Tensor) -> tuple[int, tuple[int, ...], tuple[int, ...]]:
    """``(mode, lead, mstride)`` for the kernel: how the mask's elements line up with x's
    (a mask the rule accepted: it broadcasts to x without growing it)."""
    if x.ndim - 1 > SOFTMAX_MAX_LEAD:
        raise VkumdValueError(f"softmax: with a mask, x may have at most {SOFTMAX_MAX_LEAD + 1} "
                              f"dimensions, not {x.ndim}; reshape the leading ones together")
    padded = (1,) * (x.ndim - mask.ndim) + mask.shape
    strides = [0] * x.ndim
    step = 1
    for d in range(x.ndim - 1, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    mode = 2 if padded[-1] == 1 else 1
    return mode, x.shape[:-1], tuple(strides[:-1])


Words = tuple[int, int, int, float, int, tuple[int, ...], tuple[int, ...]]
"""``(axis, rows, cols, scale, mode, lead, mstride)``: the axis as an index, and what the kernel
is planned with."""

# Words by (x's shape and dtype name, the mask's signature, scale and its type): calls the
# op's rule and the kernel's limit accepted.
_VERDICTS: Verdicts = {}


def _judge(x: Tensor, mask: Tensor | None, scale: Any, axis: Any) -> Words:
    """Check a call with the op's rule and the kernel's limit; raises as they do."""
    concrete_rule("softmax", (x, mask), {"scale": scale, "axis": axis})
    mode, lead, mstride = (0, (), ()) if mask is None else _mask_words(x, mask)
    factor = 1.0 if scale is None else float(scale)
    index = axis_of("softmax", axis, x.ndim)
    cols = x.shape[index]
    rows = math.prod(x.shape) // cols if cols else 0
    return index, rows, cols, factor, mode, lead, mstride


def softmax(x: Tensor, *, scale: float | None = None, mask: Tensor | None = None,
            axis: int = -1, out: Tensor | None = None) -> Tensor:
    """``softmax(x * scale + mask)`` over ``axis`` (the last by default), in float32
    arithmetic (float64 in double, without a mask).

    Each row's largest ``x * sign(scale)`` is subtracted before scaling, as
    ``scale * (x - reference) + mask``, so large inputs neither overflow nor lose digits to
    the rounding of ``x * scale``. The entries are those of ``x * scale + mask`` in IEEE
    arithmetic: ``-inf`` gets probability 0; a row whose every entry is ``-inf`` (e.g. fully
    masked) has no finite maximum and is written as zeros (where numpy gives NaN); an entry
    that is NaN or ``+inf`` makes the whole row NaN, as in numpy. The mask is added, so a NaN
    in ``x`` is not masked out by a ``-inf`` (NaN + -inf is NaN), and ``scale=0`` turns an
    infinite ``x`` into NaN (0 * inf).

    Args:
        x: float32, float16, bfloat16 or float64 (with shaderFloat64; no mask), at least 1-D;
            rows of any length.
        scale: multiplies ``x`` before the mask is added (default 1), e.g. ``1/sqrt(d)``;
            negative, zero and infinite scales follow the same IEEE rules.
        mask: additive, x's dtype, broadcastable to ``x`` without growing it: e.g. ``[q, k]``
            or ``[batch, 1, q, k]`` against ``[batch, heads, q, k]``, or a last dimension of 1.
            With a mask, ``x`` has at most 6 dimensions and ``axis`` is the last.
        axis: the dimension normalised (negative counts from the end); another than the last
            is moved last first (two copies).
        out: optional output of ``x``'s shape and dtype.

    Returns:
        The probabilities, ``x``'s shape and dtype.

    Raises:
        VkumdTypeError: non-tensor or non-float ``x``; a mask or out of another dtype; a
            non-numeric scale; a non-int axis.
        VkumdValueError: 0-d ``x``; a mask that does not broadcast; an axis out of range, or
            another than the last with a mask; out of the wrong shape.
    """
    op = "softmax"
    x = live_inputs(op, x, ((mask, "mask?"),))
    key = (x.shape, x.dtype.name, signature(mask), scale, type(scale), axis, type(axis))
    known = recall(_VERDICTS, key)
    if known is None:
        known = remember(_VERDICTS, key, _judge(x, mask, scale, axis))
    if x.dtype.itemsize != 4:
        check_storage(op, x.dtype, x.context)
    index, rows, cols, factor, mode, lead, mstride = known
    out = output(op, x.context, out, x.shape, x.dtype)
    if out.size == 0:
        return out
    if x.dtype.name == "float64":  # the double kernel reads the axis in place
        x.context.run(axis_double_plan(x.context.caps, op, math.prod(x.shape[:index]), cols,
                                       math.prod(x.shape[index + 1:]), denominator=factor),
                      (x, out))
        return out
    plan = softmax_plan(x.context.caps, ROW_CODES[x.dtype.name], rows, cols, factor, mode,
                        lead, mstride)
    if index == x.ndim - 1:
        x.context.run(plan, (x, mask, out))
    else:  # no mask here: the rule takes one with the last axis only
        along_axis(x, index, out, lambda src, dst: x.context.run(plan, (src, None, dst)))
    return out


def _softmax_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, mask = only(ins), ins[1]
    if x.dtype.name != "float64":
        need_float("softmax", x)
    elif mask is not None:
        raise VkumdTypeError("softmax: a mask with float64 x is not supported (the double "
                             "kernel takes a scale only); add the mask to x first")
    at_least_1d("softmax", x)
    index = axis_of("softmax", attrs["axis"], x.ndim)
    if mask is not None and index != x.ndim - 1:
        raise VkumdValueError(f"softmax: axis={attrs['axis']} with a mask; a mask is taken "
                              "with the last axis only (permute x and the mask first)")
    if attrs["scale"] is not None:  # an infinite or NaN scale follows IEEE arithmetic
        real("softmax", attrs["scale"], "scale", finite=False)
    if mask is not None:
        like_x("softmax", x, mask, "mask")
        why = ""
        try:
            fits = dims.same_shape(dims.broadcast(mask.shape, x.shape), x.shape)
        except VkumdValueError as exc:
            fits, why = False, f" ({exc})"
        if not fits:
            raise VkumdValueError(f"softmax: a mask of shape {format_shape(mask.shape)} does "
                                  f"not broadcast to x's shape {format_shape(x.shape)}; it "
                                  f"must broadcast without growing x{why}")
    return [x]


def _softmax_reference(args: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    x, mask = args
    scale = 1.0 if attrs["scale"] is None else float(attrs["scale"])
    z = x * scale
    if mask is not None:
        z = z + mask
    axis = attrs["axis"]
    return [np.moveaxis(softmax_rows(np.moveaxis(z, axis, -1)), -1, axis)]


def _softmax_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    softmax(ins[0], scale=at["scale"], mask=ins[1], axis=at["axis"], out=outs[0])


define("softmax", ("x", "mask?"), {"scale": None, "axis": -1}, rule=_softmax_rule,
       reference=_softmax_reference, lower=_softmax_lower, eager=softmax)
