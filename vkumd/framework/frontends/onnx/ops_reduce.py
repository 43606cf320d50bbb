"""Converters of the reductions (ReduceSum, ReduceMean, ReduceMax, ReduceMin, ReduceProd,
ReduceSumSquare, ReduceL1, ReduceL2, ReduceLogSumExp, ReduceLogSum) and of ArgMax/ArgMin.

Each Reduce* node is one vkumd reduction over its axes (``opset/reductions.py``: a middle or
contiguous run of axes is reduced in place, separated axes are moved last first). An empty
reduction gives the op's identity (ONNX's reference values: 0, 1, -inf for the max and the
logs, +inf for the min); ReduceMax/ReduceMin of 8-bit integers (bool included) run in float32,
which holds them exactly, and are cast back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter

# float64 too: vkumd's reductions compute it in double (the device check is the op's).
_FLOATS = ("float32", "float16", "bfloat16", "float64")
_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod", "ReduceSumSquare": "sum_square", "ReduceL1": "l1_norm",
           "ReduceL2": "l2_norm", "ReduceLogSumExp": "logsumexp", "ReduceLogSum": "log_sum"}
# What ONNX's reference gives for a reduction over no element, where vkumd's op refuses one.
_EMPTY = {"max": -math.inf, "min": math.inf}
# Integer types whose every value float32 holds exactly (ReduceMax/ReduceMin only).
_SMALL_INTS = ("uint8", "int8")


def _axes(st: State, node: onnx.NodeProto, attrs: dict[str, Any], ndim: int
          ) -> tuple[int, ...] | None:
    """The reduced axes, sorted; None for a node that passes x through."""
    if "axes" in attrs:
        axes = list(attrs["axes"])
    elif st.present(node, 1):
        axes = st.ints(node.input[1], "axes")
    else:
        axes = []
    if not axes:
        return None if attrs.get("noop_with_empty_axes", 0) else tuple(range(ndim))
    for a in axes:
        if not -ndim <= a < ndim:
            raise Unsupported(f"reduction axis {a} is out of range for {ndim} dimensions")
    found = [a % ndim for a in axes]
    if len(set(found)) != len(found):
        raise Unsupported(f"reduction axes {axes} name an axis twice")
    return tuple(sorted(found))


@converter(*_REDUCE, attrs=("axes", "keepdims", "noop_with_empty_axes"))
def reduce(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A Reduce* node over any axes (attribute or input), keepdims, noop_with_empty_axes."""
    op = _REDUCE[node.op_type]
    x = st.value(node.input[0])
    ndim = len(x.shape)
    if ndim == 0:
        raise Unsupported("reducing a 0-d tensor")
    axes = _axes(st, node, attrs, ndim)
    if axes is None:
        return [x]
    keep = bool(attrs.get("keepdims", 1))
    dtype = x.dtype.name
    if dtype == "bool" and op in ("max", "min"):  # or and and: any and all (False, True empty)
        return [st.b.op("any" if op == "max" else "all", x, dim=axes, keepdims=keep)]
    if dtype not in _FLOATS and not (op in ("max", "min") and dtype in _SMALL_INTS):
        raise Unsupported(f"{node.op_type} of {dtype} (vkumd's reductions take float tensors)")
    sizes = [x.shape[a] for a in axes]
    if op in _EMPTY and 0 in sizes:
        shape = tuple(1 if i in axes else s for i, s in enumerate(x.shape)
                      if keep or i not in axes)
        if not all(isinstance(s, int) for s in shape):
            raise Unsupported(f"{node.op_type} over an empty axis with a symbolic result shape")
        if dtype not in _FLOATS:
            raise Unsupported(f"{node.op_type} of {dtype} over an empty axis (no identity)")
        return [st.constant(np.full(shape, _EMPTY[op], np.float32), dtype)]
    moved = x if dtype in _FLOATS else st.b.cast(x, "float32")
    y = st.b.op(op, moved, dim=axes, keepdims=keep)
    return [y if dtype in _FLOATS else st.b.cast(y, dtype)]


@converter("ArgMax", "ArgMin", attrs=("axis", "keepdims", "select_last_index"))
def arg_extreme(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """ArgMax/ArgMin of a float tensor along any axis: vkumd's argmax/argmin (int64 indices
    kept as int32, as vkumd stores int64), the last index among equals on
    ``select_last_index``."""
    x = st.value(node.input[0])
    if x.dtype.name not in _FLOATS:
        raise Unsupported(f"{node.op_type} of {x.dtype.name} (vkumd's {node.op_type} takes "
                          "float tensors)")
    ndim = len(x.shape)
    axis = attrs.get("axis", 0)
    if ndim == 0 or not -ndim <= axis < ndim:
        raise Unsupported(f"axis {axis} is out of range for {ndim} dimensions")
    op = "argmax" if node.op_type == "ArgMax" else "argmin"
    return [st.b.op(op, x, axis=axis % ndim, keepdims=bool(attrs.get("keepdims", 1)),
                    select_last_index=bool(attrs.get("select_last_index", 0)))]
