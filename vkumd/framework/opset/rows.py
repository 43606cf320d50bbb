"""Row ops, over the last axis as vkumd's kernels: softmax (with scale and an additive
mask), layer_norm, rms_norm, and the reductions sum, mean and max."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import (
    Types,
    at_least_1d,
    flag,
    like_x,
    need_float,
    only,
    real,
)
from vkumd.framework.graph.reference import softmax_rows
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops import reduce
from vkumd.framework.ops.norm import layer_norm, rms_norm
from vkumd.framework.ops.softmax import softmax
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor


def _softmax_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, mask = only(ins), ins[1]
    need_float("softmax", x)
    at_least_1d("softmax", x)
    if attrs["axis"] not in (-1, x.ndim - 1):
        raise VkumdValueError(f"softmax: axis={attrs['axis']}; only the last axis (-1) is "
                              "supported, permute first")
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
    return [softmax_rows(z)]


def _softmax_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    # The rule admits only the last axis, which is what the kernel normalises.
    softmax(ins[0], scale=attrs_of(node)["scale"], mask=ins[1], out=outs[0])


define("softmax", ("x", "mask?"), {"scale": None, "axis": -1}, rule=_softmax_rule,
       reference=_softmax_reference, lower=_softmax_lower, eager=softmax)


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
    y = (x - mean) / np.sqrt(var + float(attrs["eps"]))
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


def _reduction(op: str, fn: Any) -> None:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        need_float(op, x)
        at_least_1d(op, x)
        keep = flag(op, attrs["keepdims"], "keepdims")
        if (op != "sum" and dims.resolve(x.shape[-1]) == 0
                and dims.resolve(product(x.shape[:-1])) != 0):
            raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; the {op} of an "
                                  "empty last dimension is undefined")
        return [TensorType(x.shape[:-1] + ((1,) if keep else ()), x.dtype)]

    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        return [np.asarray(fn(a[0], axis=-1, keepdims=attrs["keepdims"]), np.float64)]

    eager = getattr(reduce, op)

    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        eager(ins[0], keepdims=attrs_of(node)["keepdims"], out=outs[0])

    define(op, ("x",), {"keepdims": False}, rule=rule, reference=reference, lower=lower,
           eager=eager)


for _name, _fn in (("sum", np.sum), ("mean", np.mean), ("max", np.max)):
    _reduction(_name, _fn)
