"""Converters of the row ops along an axis: LogSoftmax, CumSum, CumProd, TopK, Hardmax, and
the losses over class scores, NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss.

vkumd's row ops take any axis themselves (moving it last inside the op), so a converter
only resolves the axis: an attribute, or for CumSum an input known at import time.
"""

from __future__ import annotations

from typing import Any

import onnx

from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import product


def _axis(axis: int, ndim: int, what: str = "axis") -> int:
    if not -max(ndim, 1) <= axis < max(ndim, 1):
        raise Unsupported(f"{what} {axis} is out of range for {ndim} dimensions")
    return axis % max(ndim, 1)


_ROW_OPS = {"LogSoftmax": "log_softmax", "Hardmax": "hardmax"}


@converter(*_ROW_OPS, attrs=("axis",))
def row_op(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """LogSoftmax or Hardmax over ``axis``; before opset 13 over the flattened trailing axes
    (as Softmax's converter)."""
    op = _ROW_OPS[node.op_type]
    x = st.value(node.input[0])
    ndim = len(x.shape)
    if st.opset < 13:
        axis = _axis(attrs.get("axis", 1), ndim)
        if axis == ndim - 1:
            return [st.b.op(op, x, axis=axis)]
        flat = st.b.reshape(x, (product(x.shape[:axis]), product(x.shape[axis:])))
        return [st.b.reshape(st.b.op(op, flat, axis=1), x.shape)]
    return [st.b.op(op, x, axis=_axis(attrs.get("axis", -1), ndim))]


@converter("CumSum", "CumProd", attrs=("exclusive", "reverse"))
def cumulative(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """CumSum and CumProd along the axis their second input names, which must be known at
    import (a constant, or computed from shapes)."""
    x = st.value(node.input[0])
    axis = st.ints(node.input[1], f"{node.op_type}'s axis")
    if len(axis) != 1:
        raise Unsupported(f"{node.op_type}'s axis must hold one integer, not {axis}")
    flags = {}
    for name in ("exclusive", "reverse"):
        value = attrs.get(name, 0)
        if value not in (0, 1):
            raise Unsupported(f"{node.op_type}: {name}={value}; ONNX allows 0 or 1")
        flags[name] = bool(value)
    op = st.b.cumsum if node.op_type == "CumSum" else st.b.cumprod
    return [op(x, axis=_axis(axis[0], len(x.shape)), **flags)]


@converter("TopK", attrs=("axis", "k", "largest", "sorted"))
def top_k(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """TopK along ``axis``: K an attribute before opset 10, then an input known at import
    (a constant, or computed from shapes)."""
    x = st.value(node.input[0])
    if st.opset < 10:
        k = attrs.get("k")
        if k is None:
            raise Unsupported("TopK before opset 10 needs its k attribute")
    else:
        ks = st.ints(node.input[1], "TopK's K")
        if len(ks) != 1:
            raise Unsupported(f"TopK's K must hold one integer, not {ks}")
        k = ks[0]
    flags = {}
    for name in ("largest", "sorted"):
        value = attrs.get(name, 1)
        if value not in (0, 1):
            raise Unsupported(f"TopK: {name}={value}; ONNX allows 0 or 1")
        flags[name] = bool(value)
    axis = _axis(attrs.get("axis", -1), len(x.shape))
    values, indices = st.b.topk(x, k=k, axis=axis, **flags)
    return [values, indices]


def _loss_attrs(node: onnx.NodeProto, attrs: dict[str, Any]) -> dict[str, Any]:
    reduction = attrs.get("reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"{node.op_type}: reduction={reduction!r}; ONNX allows none, sum, mean")
    return {"reduction": reduction, "ignore_index": attrs.get("ignore_index")}


def _loss_inputs(st: State, node: onnx.NodeProto) -> tuple[Any, Any, Any]:
    target = st.value(node.input[1])
    if target.dtype.name != "int32":  # int64 targets are stored as int32 already
        raise Unsupported(f"{node.op_type}: the target is {target.dtype.name}; class indices "
                          "must be integers")
    weight = st.value(node.input[2]) if st.present(node, 2) else None
    return st.value(node.input[0]), target, weight


@converter("NegativeLogLikelihoodLoss", attrs=("reduction", "ignore_index"))
def nll_loss(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """NegativeLogLikelihoodLoss: ``nll_loss`` (classes on axis 1)."""
    x, target, weight = _loss_inputs(st, node)
    return [st.b.nll_loss(x, target, weight, **_loss_attrs(node, attrs))]


@converter("SoftmaxCrossEntropyLoss", attrs=("reduction", "ignore_index"))
def softmax_cross_entropy(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                          ) -> list[Bound | None]:
    """SoftmaxCrossEntropyLoss: ``log_softmax`` over axis 1, then ``nll_loss``; the optional
    second output is the log-probabilities."""
    scores, target, weight = _loss_inputs(st, node)
    log_prob = st.b.log_softmax(scores, axis=1)
    loss = st.b.nll_loss(log_prob, target, weight, **_loss_attrs(node, attrs))
    return [loss, log_prob] if len(node.output) > 1 and node.output[1] else [loss]
