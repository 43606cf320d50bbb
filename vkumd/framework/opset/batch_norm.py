"""Inference batch normalisation over ``[N, C, ...]``: ``batch_norm`` (the running
statistics, as ONNX's BatchNormalization with ``training_mode`` 0 and torch's ``eval()``)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.conv import CONV_CODES, batch_norm_plan
from vkumd.compiler.kernels.limits import CONV_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, real, same_dtype
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}
_PARAMS = ("scale", "bias", "mean", "var")


def _rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None and all(t is not None for t in ins)  # required inputs
    dt = same_dtype("batch_norm", ("x", x), *zip(_PARAMS, ins[1:], strict=True))
    if dt.name not in CONV_DTYPES:
        raise VkumdTypeError(f"batch_norm: x is {dt.name}; batch_norm takes "
                             f"{', '.join(CONV_DTYPES)} (cast() converts)")
    if x.ndim < 2:
        raise VkumdValueError(f"batch_norm: x has shape {format_shape(x.shape)}; it takes "
                              "[N, C, ...] with the channels second")
    for name, t in zip(_PARAMS, ins[1:], strict=True):
        assert t is not None
        if t.ndim != 1 or not dims.same(t.shape[0], x.shape[1]):
            raise VkumdValueError(f"batch_norm: {name} has shape {format_shape(t.shape)}; "
                                  f"expected [{x.shape[1]}], one per channel of x "
                                  f"{format_shape(x.shape)}")
    eps = real("batch_norm", attrs["eps"], "eps")
    if eps < 0:
        raise VkumdValueError(f"batch_norm: eps={eps!r} is negative")
    return [x]


def batch_norm(x: Tensor, scale: Tensor, bias: Tensor, mean: Tensor, var: Tensor, *,
               eps: float = 1e-5, out: Tensor | None = None) -> Tensor:
    """``(x - mean) / sqrt(var + eps) * scale + bias`` per channel (axis 1), float32
    arithmetic.

    Args:
        x: ``[N, C, ...]`` float32 or float16.
        scale: ``[C]`` (gamma), of x's dtype; likewise bias (beta), mean and var (the
            running statistics).
        eps: added to the variance, >= 0 (1e-5, ONNX's and torch's default).
        out: optional output of x's shape and dtype; may be x.

    Returns:
        The normalised tensor.

    Raises:
        VkumdTypeError: mixed or unsupported dtypes; eps not a number.
        VkumdValueError: x below 2-D; a parameter not ``[C]``; a negative or infinite eps;
            out of another shape; tensors of other contexts.
    """
    x = check_tensor("batch_norm", x, "x")
    params = [check_tensor("batch_norm", t, name) for t, name in
              zip((scale, bias, mean, var), _PARAMS, strict=True)]
    for t, name in zip(params, _PARAMS, strict=True):
        check_context("batch_norm", x, t, name)
    key = (x.shape, x.dtype.name, *((t.shape, t.dtype.name) for t in params), eps, type(eps))
    if recall(_VERDICTS, key) is None:
        concrete_rule("batch_norm", (x, *params), {"eps": eps})
        remember(_VERDICTS, key, True)
    if x.dtype.itemsize < 4:
        check_storage("batch_norm", x.dtype, x.context)
    out = output("batch_norm", x.context, out, x.shape, x.dtype, params)
    if out.size == 0:
        return out
    inner = math.prod(x.shape[2:])
    plan = batch_norm_plan(x.context.caps, CONV_CODES[x.dtype.name], x.size, x.shape[1],
                           inner, float(eps))
    x.context.run(plan, (x, *params, out))
    return out


def batch_norm_reference(x: np.ndarray, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray,
                         var: np.ndarray, eps: float) -> np.ndarray:
    """The float64 inference batch normalisation over axis 1."""
    shape = (1, -1) + (1,) * (x.ndim - 2)
    p = [np.asarray(a, np.float64).reshape(shape) for a in (scale, bias, mean, var)]
    return (np.asarray(x, np.float64) - p[2]) / np.sqrt(p[3] + eps) * p[0] + p[1]


def _lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    batch_norm(*ins, eps=attrs_of(node)["eps"], out=outs[0])


define("batch_norm", ("x", *_PARAMS), {"eps": 1e-5}, rule=_rule,
       reference=lambda a, at, s: [batch_norm_reference(*a, at["eps"])],
       inplace=("x",), lower=_lower, eager=batch_norm)
