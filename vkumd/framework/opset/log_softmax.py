"""``log_softmax``: ``x - max - log(sum(exp(x - max)))`` along any axis, numerically stable.

The softmax kernel's ``LOG_SOFTMAX`` build (``shaders/softmax.comp``): the same running
maximum and sum, the last pass writing logarithms. Another axis than the last is moved last
first (:func:`~vkumd.framework.opset.along_axis.along_axis`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import axis_double_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.compiler.kernels.softmax import log_softmax_plan
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, at_least_1d, axis_of, need_float, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.along_axis import along_axis
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

# The axis as an index by (x's shape and dtype name, axis and its type): calls the rule
# accepted.
_VERDICTS: Verdicts = {}


def log_softmax(x: Tensor, *, axis: int = -1, out: Tensor | None = None) -> Tensor:
    """``log(softmax(x))`` along ``axis``, computed as ``x - max - log(sum(exp(x - max)))``
    in float32 arithmetic (float64 in double; no overflow for large inputs, no ``log(0)``
    for small ones).

    An entry of ``-inf`` gives ``-inf``; a row whose every entry is ``-inf`` gives ``-inf``
    throughout (the logarithm of the zeros :func:`softmax` writes there); a NaN or ``+inf``
    makes its row NaN, as in numpy.

    Args:
        x: float32, float16, bfloat16 or float64 (with shaderFloat64), at least 1-D.
        axis: the dimension normalised (negative counts from the end); the last is the
            kernel's own, any other is moved last first (two copies).
        out: optional output of ``x``'s shape and dtype.

    Returns:
        The log-probabilities, ``x``'s shape and dtype.

    Raises:
        VkumdTypeError: non-tensor or non-float x, a non-int axis, out of another dtype.
        VkumdValueError: 0-d x, an axis out of range, out of the wrong shape.
    """
    op = "log_softmax"
    x = check_tensor(op, x, "x")
    key = (x.shape, x.dtype.name, axis, type(axis))
    index = recall(_VERDICTS, key)
    if index is None:
        concrete_rule(op, (x,), {"axis": axis})
        index = remember(_VERDICTS, key, axis_of(op, axis, x.ndim))
    if x.dtype.itemsize != 4:
        check_storage(op, x.dtype, x.context)
    out = output(op, x.context, out, x.shape, x.dtype, (x,))
    if out.size == 0:
        return out
    cols = x.shape[index]
    if x.dtype.name == "float64":  # the double kernel reads the axis in place
        x.context.run(axis_double_plan(x.context.caps, op, math.prod(x.shape[:index]), cols,
                                       math.prod(x.shape[index + 1:]), denominator=1.0),
                      (x, out))
        return out
    plan = log_softmax_plan(x.context.caps, ROW_CODES[x.dtype.name], math.prod(x.shape) // cols,
                            cols)
    along_axis(x, index, out, lambda src, dst: x.context.run(plan, (src, None, dst)))
    return out


def _log_softmax_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    if x.dtype.name != "float64":  # float64 has the double kernel
        need_float("log_softmax", x)
    at_least_1d("log_softmax", x)
    axis_of("log_softmax", attrs["axis"], x.ndim)
    return [x]


def log_softmax_reference(x: np.ndarray, axis: int) -> np.ndarray:
    """float64 ``log_softmax`` along ``axis``; an all ``-inf`` row gives ``-inf``."""
    top = np.max(x, axis=axis, keepdims=True)
    dead = np.isneginf(top)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        shifted = x - np.where(dead, 0.0, top)
        found = shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))
    return np.where(dead, -np.inf, found)


def _log_softmax_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    log_softmax(ins[0], axis=attrs_of(node)["axis"], out=outs[0])


define("log_softmax", ("x",), {"axis": -1}, rule=_log_softmax_rule,
       reference=lambda a, attrs, s: [log_softmax_reference(a[0], attrs["axis"])],
       lower=_log_softmax_lower, eager=log_softmax)
