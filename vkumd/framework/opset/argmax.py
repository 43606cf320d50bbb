"""``argmax`` and ``argmin``: the index of the maximum (minimum) along an axis, as int32 (a
decoder's greedy pick).

Ties go to the lowest index (the highest with ``select_last_index``); an entry holding a NaN
gives the index of its first (last) NaN (as numpy's ``argmax``). The kernel works over the
last dimension (one workgroup per row, as the other reductions); another axis is first moved
last with a permute (a copy). float64 x (with shaderFloat64) takes ``axis_double.comp``,
which reads the axis in place and compares in double.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import LAST, axis_double_plan
from vkumd.compiler.kernels.limits import ARGMAX_MAX_COLS
from vkumd.compiler.kernels.reduce import argmax_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, at_least_1d, axis_of, flag, need_float, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.layout import permute
from vkumd.framework.tensor import Tensor

# (axis as an index, the result's shape) by (x's shape and dtype name, axis, keepdims and
# their types): calls the rule accepted.
_VERDICTS: Verdicts = {}


def argmax(x: Tensor, *, axis: int = -1, keepdims: bool = False,
           select_last_index: bool = False, out: Tensor | None = None) -> Tensor:
    """The index of the maximum of ``x`` along ``axis``, as int32.

    Equal maxima give the lowest index (the highest with ``select_last_index``); where the
    values along the axis hold a NaN, the result is the index of the first (last) NaN
    (numpy's rule: NaN counts as the maximum).

    Args:
        x: float32, float16, bfloat16 or float64 (with shaderFloat64), at least 1-D, with a
            non-empty ``axis``.
        axis: the dimension to search (negative counts from the end); the last is the
            kernel's own, any other is moved last first (one copy).
        keepdims: keep ``axis`` in the result, as 1.
        select_last_index: among equal maxima, give the last index (ONNX's attribute).
        out: optional int32 output of the result's shape.

    Returns:
        int32 indices: ``x.shape`` without ``axis`` (with it as 1 under keepdims).

    Raises:
        VkumdTypeError: non-float x, a non-int axis, a non-bool keepdims or
            select_last_index, out not int32.
        VkumdValueError: 0-d x, an axis out of range, an empty axis (its argmax is
            undefined), an axis longer than 2^24, out of another shape.
    """
    return _arg("argmax", x, axis, keepdims, select_last_index, out)


def argmin(x: Tensor, *, axis: int = -1, keepdims: bool = False,
           select_last_index: bool = False, out: Tensor | None = None) -> Tensor:
    """The index of the minimum of ``x`` along ``axis``, as int32 (NaN counts as the
    minimum, as numpy's ``argmin``). Args, returns and errors as :func:`argmax`."""
    return _arg("argmin", x, axis, keepdims, select_last_index, out)


def _arg(op: str, x: Any, axis: Any, keepdims: Any, last: Any, out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    key = (op, x.shape, x.dtype.name, axis, type(axis), keepdims, type(keepdims), last,
           type(last))
    known = recall(_VERDICTS, key)
    if known is None:
        (result,) = concrete_rule(op, (x,), {"axis": axis, "keepdims": keepdims,
                                             "select_last_index": last})
        known = remember(_VERDICTS, key, (axis_of(op, axis, x.ndim), result.shape))
    if x.dtype.itemsize != 4:
        check_storage(op, x.dtype, x.context)
    index, shape = known
    out = output(op, x.context, out, shape, dtypes.int32)
    if out.size == 0:
        return out
    if x.dtype.name == "float64":
        cols = x.shape[index]
        inner = math.prod(x.shape[index + 1:])
        plan = axis_double_plan(x.context.caps, op, out.size // inner, cols, inner,
                                flags=LAST if last else 0)
        x.context.run(plan, (x, out))
        return out
    moved = x
    if index != x.ndim - 1:
        moved = permute(x, [d for d in range(x.ndim) if d != index] + [index])
    cols = x.shape[index]
    try:
        x.context.run(argmax_plan(x.context.caps, ROW_CODES[x.dtype.name],
                                  math.prod(x.shape) // cols, cols, minimum=op == "argmin",
                                  last=bool(last)), (moved, out))
    finally:
        if moved is not x:
            moved.release()  # back to the pool once the launch has run
    return out


def _rule(op: str) -> Any:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        if x.dtype.name != "float64":  # float64 has the double kernel
            need_float(op, x)
        at_least_1d(op, x)
        index = axis_of(op, attrs["axis"], x.ndim)
        keep = flag(op, attrs["keepdims"], "keepdims")
        flag(op, attrs["select_last_index"], "select_last_index")
        length = dims.resolve(x.shape[index])
        rest = x.shape[:index] + x.shape[index + 1:]
        if length == 0 and dims.resolve(product(rest)) != 0:
            raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; the {op} of an "
                                  f"empty axis {index} is undefined")
        if isinstance(length, int) and length > ARGMAX_MAX_COLS:
            raise VkumdValueError(f"{op}: axis {index} has {length} entries; the kernel takes "
                                  f"at most {ARGMAX_MAX_COLS} (2^24); split it and combine the "
                                  "pieces' extremes")
        shape = x.shape[:index] + ((1,) if keep else ()) + x.shape[index + 1:]
        return [TensorType(shape, dtypes.int32)]
    return rule


def _reference(op: str) -> Any:
    search = np.argmax if op == "argmax" else np.argmin

    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        x, axis = np.asarray(a[0]), attrs["axis"]
        if attrs["select_last_index"]:
            found = x.shape[axis] - 1 - search(np.flip(x, axis), axis=axis,
                                               keepdims=attrs["keepdims"])
        else:
            found = search(x, axis=axis, keepdims=attrs["keepdims"])
        return [np.asarray(found, np.float64)]
    return reference


def _lower(eager: Any) -> Any:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        at = attrs_of(node)
        eager(ins[0], axis=at["axis"], keepdims=at["keepdims"],
              select_last_index=at["select_last_index"], out=outs[0])
    return lower


for _op, _eager in (("argmax", argmax), ("argmin", argmin)):
    define(_op, ("x",), {"axis": -1, "keepdims": False, "select_last_index": False},
           rule=_rule(_op), reference=_reference(_op), lower=_lower(_eager), eager=_eager)
