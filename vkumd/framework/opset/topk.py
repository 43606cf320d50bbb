"""``topk`` (the k largest or smallest entries along an axis, in order, with int32 indices)
and ``hardmax`` (the one-hot of the first maximum along an axis), both on the top-k kernel
(``shaders/topk.comp``), which works along rows; another axis is moved last first.

Order: NaN counts as the largest value (numpy's sort and argmax), ``-0.0`` equals ``+0.0``,
and equal values come lower index first (ONNX's TopK).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import TOPK_DTYPES, TOPK_MAX_K
from vkumd.compiler.kernels.topk import TOPK_CODES, hardmax_plan, topk_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, at_least_1d, axis_of, flag, only
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.along_axis import along_axis
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.layout import permute
from vkumd.framework.tensor import Tensor

# (axis as an index, the results' shape) by (op, x's shape and dtype name, the attributes
# and their types): calls the rule accepted.
_VERDICTS: Verdicts = {}


def _need_type(op: str, x: TensorType) -> None:
    if x.dtype.name not in TOPK_DTYPES:
        raise VkumdTypeError(f"{op}: x is {x.dtype.name}, which is not supported; {op} takes "
                             f"{', '.join(TOPK_DTYPES)} (cast() converts)")


def _topk_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    _need_type("topk", x)
    at_least_1d("topk", x)
    index = axis_of("topk", attrs["axis"], x.ndim)
    flag("topk", attrs["largest"], "largest")
    flag("topk", attrs["sorted"], "sorted")
    k = attrs["k"]
    if isinstance(k, bool) or not isinstance(k, int):
        raise VkumdTypeError(f"topk: k must be an int, not {k!r}")
    length = dims.resolve(x.shape[index])
    if k < 0 or (isinstance(length, int) and k > length):
        raise VkumdValueError(f"topk: k={k} is outside 0..{length}, the length of axis {index} "
                              f"of x's shape {format_shape(x.shape)}")
    if k > TOPK_MAX_K:
        raise VkumdValueError(f"topk: k={k}; the kernel takes at most {TOPK_MAX_K} (one pass "
                              "over the row per pick); sort on the host for more")
    shape = x.shape[:index] + (k,) + x.shape[index + 1:]
    return [TensorType(shape, x.dtype), TensorType(shape, dtypes.int32)]


def topk(x: Tensor, *, k: int, axis: int = -1, largest: bool = True, sorted: bool = True,
         out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """The ``k`` largest (or smallest) entries of ``x`` along ``axis``, in order, and their
    indices (ONNX's TopK, ``torch.topk``).

    NaN counts as larger than every number, ``-0.0`` equals ``+0.0``, and equal entries come
    lower index first.

    Args:
        x: float32, float16, bfloat16 or int32, at least 1-D.
        k: how many, 0 up to the axis's length and at most 1024 (each pick is a pass over
            the row).
        axis: the dimension searched (negative counts from the end); another than the last
            is moved last first (copies).
        largest: the largest entries, largest first; False: the smallest, smallest first.
        sorted: accepted for ONNX's attribute; the results are always in order.
        out: optional ``(values, indices)``: x's dtype and int32, of the results' shape.

    Returns:
        ``(values, indices)``: ``x``'s shape with ``axis`` of length ``k``; values of x's
        dtype, indices int32.

    Raises:
        VkumdTypeError: non-tensor x or one of another dtype, a non-int k or axis, flags
            that are not bools, outputs of other dtypes or an out that is not a pair.
        VkumdValueError: 0-d x, an axis out of range, k outside 0..length or past 1024,
            outputs of another shape.
    """
    op = "topk"
    x = check_tensor(op, x, "x")
    key = (x.shape, x.dtype.name, k, type(k), axis, type(axis), largest, type(largest),
           sorted, type(sorted))
    known = recall(_VERDICTS, key)
    if known is None:
        attrs = {"k": k, "axis": axis, "largest": largest, "sorted": sorted}
        values_type, _ = concrete_rule(op, (x,), attrs)
        known = remember(_VERDICTS, key, (axis_of(op, axis, x.ndim), values_type.shape))
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    index, shape = known
    return _picks(op, x, index, k, shape, bool(largest), out)


def _picks(op: str, x: Tensor, index: int, k: int, shape: tuple[int, ...], largest: bool,
           out: Any) -> tuple[Tensor, Tensor]:
    """Run the top-k kernel for a checked call (``op`` names it in errors about ``out``)."""
    if out is not None and not (isinstance(out, tuple) and len(out) == 2):
        raise VkumdTypeError(f"{op}: out= must be a (values, indices) pair, not {out!r}")
    values = output(op, x.context, None if out is None else out[0], shape, x.dtype, (x,))
    indices = output(op, x.context, None if out is None else out[1], shape, dtypes.int32, (x,))
    if values.size == 0:
        return values, indices
    cols = x.shape[index]
    plan = topk_plan(x.context.caps, TOPK_CODES[x.dtype.name], math.prod(x.shape) // cols,
                     cols, k, largest)
    if index == x.ndim - 1:
        x.context.run(plan, (x, values, indices))
        return values, indices
    order = [d for d in range(x.ndim) if d != index] + [index]
    back = [order.index(d) for d in range(x.ndim)]
    moved = permute(x, order)
    row_shape = moved.shape[:-1] + (k,)
    row_values = x.context.empty(row_shape, x.dtype)
    row_indices = x.context.empty(row_shape, dtypes.int32)
    try:
        x.context.run(plan, (moved, row_values, row_indices))
        permute(row_values, back, out=values)
        permute(row_indices, back, out=indices)
    finally:
        for t in (moved, row_values, row_indices):
            t.release()  # back to the pool once the launches have run
    return values, indices


def topk_reference(x: np.ndarray, k: int, axis: int, largest: bool
                   ) -> tuple[np.ndarray, np.ndarray]:
    """float64 ``(values, indices)``: a stable sort (lower index first among equals), NaN
    the largest."""
    x = np.asarray(x, np.float64)
    x = np.where(x == 0, 0.0, x)  # -0.0 sorts with +0.0
    order = np.argsort(-x if largest else x, axis=axis, kind="stable")
    if largest:  # -NaN is NaN, which argsort puts last: NaN must come first
        nan_first = np.argsort(~np.isnan(np.take_along_axis(x, order, axis)), axis=axis,
                               kind="stable")
        order = np.take_along_axis(order, nan_first, axis)
    picked = np.take(order, np.arange(k), axis=axis)
    return np.take_along_axis(x, picked, axis), picked.astype(np.float64)


def _topk_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    topk(ins[0], k=at["k"], axis=at["axis"], largest=at["largest"], sorted=at["sorted"],
         out=(outs[0], outs[1]))


define("topk", ("x",), {"k": REQUIRED, "axis": -1, "largest": True, "sorted": True},
       rule=_topk_rule,
       reference=lambda a, at, s: list(topk_reference(a[0], at["k"], at["axis"], at["largest"])),
       lower=_topk_lower, eager=topk)


def _sort_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    _need_type("sort", x)
    at_least_1d("sort", x)
    index = axis_of("sort", attrs["axis"], x.ndim)
    flag("sort", attrs["descending"], "descending")
    length = dims.resolve(x.shape[index])
    if isinstance(length, int) and length > TOPK_MAX_K:
        raise VkumdValueError(f"sort: axis {index} has {length} entries; the top-k kernel sorts "
                              f"at most {TOPK_MAX_K} (one pass over the row per entry)")
    return [TensorType(x.shape, x.dtype), TensorType(x.shape, dtypes.int32)]


def sort(x: Tensor, *, axis: int = -1, descending: bool = False,
         out: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
    """``x`` sorted along ``axis`` with the indices of the sorted entries (a stable sort:
    equal entries keep their order; NaN sorts as the largest), as ``torch.sort``.

    :func:`topk` with ``k`` the axis's length: a pass over the row per entry, so for short
    axes (at most 1024 entries).

    Args:
        x: float32, float16, bfloat16 or int32, at least 1-D.
        axis: the dimension sorted (negative counts from the end).
        descending: largest first (equal entries still lower index first).
        out: optional ``(values, indices)``: x's shape, x's dtype and int32.

    Returns:
        ``(values, indices)``.

    Raises:
        VkumdTypeError: as :func:`topk`; a non-bool descending.
        VkumdValueError: 0-d x, an axis out of range or longer than 1024, outputs of another
            shape.
    """
    x = check_tensor("sort", x, "x")
    key = ("sort", x.shape, x.dtype.name, axis, type(axis), descending, type(descending))
    index = recall(_VERDICTS, key)
    if index is None:
        concrete_rule("sort", (x,), {"axis": axis, "descending": descending})
        index = remember(_VERDICTS, key, axis_of("sort", axis, x.ndim))
    if x.dtype.itemsize < 4:
        check_storage("sort", x.dtype, x.context)
    return _picks("sort", x, index, x.shape[index], x.shape, bool(descending), out)


def _sort_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    sort(ins[0], axis=at["axis"], descending=at["descending"], out=(outs[0], outs[1]))


def _sort_reference(a: list[Any], at: dict[str, Any], s: Any) -> list[np.ndarray]:
    axis = at["axis"]
    return list(topk_reference(a[0], np.shape(a[0])[axis], axis, at["descending"]))


define("sort", ("x",), {"axis": -1, "descending": False}, rule=_sort_rule,
       reference=_sort_reference, lower=_sort_lower, eager=sort)


def hardmax(x: Tensor, *, axis: int = -1, out: Tensor | None = None) -> Tensor:
    """1 at the first maximum of ``x`` along ``axis``, 0 elsewhere (ONNX's Hardmax).

    A NaN counts as the maximum (numpy's argmax: the first NaN gets the 1).

    Args:
        x: float32, float16, bfloat16 or int32, at least 1-D.
        axis: the dimension searched (negative counts from the end).
        out: optional output of x's shape and dtype.

    Returns:
        x's shape and dtype.

    Raises:
        VkumdTypeError: non-tensor x or one of another dtype, a non-int axis, out of another
            dtype.
        VkumdValueError: 0-d x, an axis out of range, out of the wrong shape.
    """
    op = "hardmax"
    x = check_tensor(op, x, "x")
    key = (x.shape, x.dtype.name, axis, type(axis))
    index = recall(_VERDICTS, (op, *key))
    if index is None:
        concrete_rule(op, (x,), {"axis": axis})
        index = remember(_VERDICTS, (op, *key), axis_of(op, axis, x.ndim))
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    out = output(op, x.context, out, x.shape, x.dtype, (x,))
    if out.size == 0:
        return out
    cols = x.shape[index]
    plan = hardmax_plan(x.context.caps, TOPK_CODES[x.dtype.name], math.prod(x.shape) // cols,
                        cols)
    along_axis(x, index, out, lambda src, dst: x.context.run(plan, (src, dst, None)))
    return out


def _hardmax_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    _need_type("hardmax", x)
    at_least_1d("hardmax", x)
    axis_of("hardmax", attrs["axis"], x.ndim)
    return [x]


def hardmax_reference(x: np.ndarray, axis: int) -> np.ndarray:
    """float64 one-hot of numpy's argmax along ``axis``."""
    x = np.asarray(x, np.float64)
    if x.size == 0:
        return np.zeros_like(x)
    first = np.expand_dims(np.argmax(x, axis=axis), axis)
    hot = np.zeros_like(x)
    np.put_along_axis(hot, first, 1.0, axis)
    return hot


define("hardmax", ("x",), {"axis": -1}, rule=_hardmax_rule,
       reference=lambda a, at, s: [hardmax_reference(a[0], at["axis"])],
       lower=lambda node, ins, outs: hardmax(ins[0], axis=attrs_of(node)["axis"], out=outs[0]),
       eager=hardmax)
