"""Index gathers and triangles, their records and eager functions: ``gather_elements``
(ONNX GatherElements, torch.gather), ``gather_nd`` (ONNX GatherND with batch dimensions) and
``trilu`` (ONNX Trilu, torch.triu/tril).

They copy stored bits (float32, float16, bfloat16, int32) and read int32 indices that the
device checks: a negative index counts from the end of its dimension, and one still out of
range gives zero bits (an error would need the device's indices on the host first; check
them there if it must fail). Nothing is ever read outside the tensors.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.index import (
    gather_elements_dims,
    gather_elements_plan,
    gather_nd_plan,
    trilu_plan,
)
from vkumd.compiler.kernels.limits import INDEX_DTYPES, INDEX_MAX_DIMS
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, axis_of, flag, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_dtype, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.unary import fill
from vkumd.framework.tensor import Tensor

_VERDICTS: dict[str, Verdicts] = {"gather_elements": {}, "gather_nd": {}, "trilu": {}}


def data_dtype(op: str, t: TensorType, what: str) -> None:
    """Refuse a tensor the index kernels do not move (they take 32- and 16-bit types)."""
    if t.dtype.name not in INDEX_DTYPES:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}; {op} takes "
                             f"{', '.join(INDEX_DTYPES)} (cast() converts)")


def index_dtype(op: str, t: TensorType, what: str = "indices") -> None:
    """Refuse indices that are not int32 (vkumd stores int64 indices as int32)."""
    if t.dtype is not dtypes.int32:
        raise VkumdTypeError(f"{op}: {what} are {t.dtype.name}; they must be int32 "
                             "(cast() converts)")


def normalized(indices: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Float64 indices as int64, negative ones counted from ``size``, and where they are in
    range (what the kernels do, for the references)."""
    ids = indices.astype(np.int64)
    ids = np.where(ids < 0, ids + size, ids)
    inside = (ids >= 0) & (ids < size)
    return np.where(inside, ids, 0), inside


def _checked(op: str, inputs: tuple[Tensor, ...], names: tuple[str, ...],
             attrs: dict[str, Any]) -> TensorType:
    """The inputs checked (live, one context, storable dtypes) and the rule's result type,
    memoised per call signature."""
    first = check_tensor(op, inputs[0], names[0])
    for t, name in zip(inputs[1:], names[1:], strict=True):
        check_context(op, first, check_tensor(op, t, name), name)
    key = (tuple((t.shape, t.dtype.name) for t in inputs),
           tuple((k, v, type(v)) for k, v in sorted(attrs.items())))
    known = recall(_VERDICTS[op], key)
    if known is None:
        (result,) = concrete_rule(op, inputs, attrs)
        known = remember(_VERDICTS[op], key, result)
    check_dtype(op, first, names[0], ELEMENTWISE_CODES)  # the device can store it
    return known


# -- gather_elements ---------------------------------------------------------------------


def gather_elements(data: Tensor, indices: Tensor, *, axis: int = 0,
                    out: Tensor | None = None) -> Tensor:
    """``out[p] = data[p with its axis coordinate replaced by indices[p]]`` (ONNX
    GatherElements, ``torch.gather``).

    A negative index counts from the end of the axis; one still outside it gives zero bits
    in ``out`` (never a read outside ``data``).

    Args:
        data: float32, float16, bfloat16 or int32, at least 1-D.
        indices: int32 of data's rank; along every dimension but ``axis`` no longer than
            data's.
        axis: the dimension indexed (negative counts from the end).
        out: optional output of indices' shape and data's dtype.

    Returns:
        indices' shape, data's dtype.

    Raises:
        VkumdTypeError: data of an unsupported dtype; indices not int32; a non-int axis;
            out of another dtype.
        VkumdValueError: 0-d data, ranks that differ, an axis out of range, indices longer
            than data along another dimension, tensors of different contexts, out of
            another shape.
    """
    op = "gather_elements"
    result = _checked(op, (data, indices), ("data", "indices"), {"axis": axis})
    out = output(op, data.context, out, result.shape, data.dtype, (data, indices))
    if out.size == 0:
        return out
    index = axis % data.ndim
    if data.shape[index] == 0:  # every index is out of range
        return fill(out, 0)
    plan = gather_elements_plan(data.context.caps, 8 * data.dtype.itemsize, data.shape,
                                indices.shape, index)
    data.context.run(plan, (data, indices, out))
    return out


def within_data(op: str, data: TensorType, indices: TensorType, axis: int, dims: DimTable
                ) -> None:
    """Refuse indices longer than data along a dimension other than ``axis`` (the
    elementwise gathers and scatters walk indices' shape inside data's)."""
    for d in range(data.ndim):
        n, m = dims.resolve(indices.shape[d]), dims.resolve(data.shape[d])
        if d != axis and isinstance(n, int) and isinstance(m, int) and n > m:
            raise VkumdValueError(f"{op}: indices {format_shape(indices.shape)} are longer "
                                  f"than data {format_shape(data.shape)} along dimension {d}")


def _gather_elements_rule(ins: Types, attrs: dict[str, Any], dims: DimTable
                          ) -> list[TensorType]:
    data, indices = only(ins), ins[1]
    assert indices is not None
    op = "gather_elements"
    data_dtype(op, data, "data")
    index_dtype(op, indices)
    if data.ndim == 0 or indices.ndim != data.ndim:
        raise VkumdValueError(f"{op}: data has shape {format_shape(data.shape)} and indices "
                              f"{format_shape(indices.shape)}; they need one rank, at least 1")
    index = axis_of(op, attrs["axis"], data.ndim)
    within_data(op, data, indices, index, dims)
    return [TensorType(indices.shape, data.dtype)]


def _gather_elements_reference(a: list[Any], attrs: dict[str, Any], s: Any
                               ) -> list[np.ndarray]:
    data, indices = a
    axis = attrs["axis"] % data.ndim
    ids, inside = normalized(indices, data.shape[axis])
    window = tuple(slice(None) if d == axis else slice(0, n)
                   for d, n in enumerate(indices.shape))
    if data.shape[axis] == 0:
        return [np.zeros(indices.shape)]
    picked = np.take_along_axis(data[window], ids, axis)
    return [np.where(inside, picked, 0.0)]


def _gather_elements_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    gather_elements(ins[0], ins[1], axis=attrs_of(node)["axis"], out=outs[0])


def concrete_shapes(node: Node) -> list[tuple[int, ...]] | None:
    """The node's input shapes when every dimension is a number, else None."""
    shapes = [tuple(v.shape) for v in node.inputs if v is not None]
    if all(isinstance(d, int) for shape in shapes for d in shape):
        return shapes
    return None


def too_many_dims(op: str, needed: int, index_shape: tuple[int, ...]) -> str | None:
    """The refusal of a node whose kernel would index ``needed`` dimensions, if too many."""
    if needed <= INDEX_MAX_DIMS:
        return None
    return (f"{op}: indices of shape {index_shape} need {needed} dimensions after merging; "
            f"the kernel takes {INDEX_MAX_DIMS}")


def _gather_elements_refuse(node: Node) -> str | None:
    shapes = concrete_shapes(node)
    if shapes is None:
        return None  # checked when the sizes are bound, by the eager op
    data, indices = shapes
    axis = attrs_of(node)["axis"] % len(data)
    return too_many_dims("gather_elements",
                         len(gather_elements_dims(data, indices, axis)[0]), indices)


define("gather_elements", ("data", "indices"), {"axis": 0}, rule=_gather_elements_rule,
       reference=_gather_elements_reference, lower=_gather_elements_lower,
       refuse=_gather_elements_refuse, eager=gather_elements)


# -- gather_nd ---------------------------------------------------------------------------


def gather_nd(data: Tensor, indices: Tensor, *, batch_dims: int = 0,
              out: Tensor | None = None) -> Tensor:
    """Slices of ``data`` picked by index tuples (ONNX GatherND): for indices of shape
    ``[*batch, *rest, k]``, ``out[b, r] = data[b, indices[b, r, 0], ..., indices[b, r, k-1]]``.

    A negative entry counts from the end of its dimension; a tuple with an entry still out
    of range gives a slice of zero bits (never a read outside ``data``).

    Args:
        data: float32, float16, bfloat16 or int32, at least 1-D.
        indices: int32, at least 1-D, its last dimension ``k`` at most
            ``data.ndim - batch_dims`` (and at most 6); its first ``batch_dims`` dimensions
            equal to data's.
        batch_dims: leading dimensions shared by data and indices.
        out: optional output of shape ``indices.shape[:-1] + data.shape[batch_dims + k:]``.

    Returns:
        That shape, data's dtype.

    Raises:
        VkumdTypeError: data of an unsupported dtype; indices not int32; a non-int
            batch_dims; out of another dtype.
        VkumdValueError: 0-d data or indices, batch_dims out of range or batch dimensions
            that differ, tuples longer than data's remaining rank (or than 6), tensors of
            different contexts, out of another shape.
    """
    op = "gather_nd"
    result = _checked(op, (data, indices), ("data", "indices"), {"batch_dims": batch_dims})
    out = output(op, data.context, out, result.shape, data.dtype, (data, indices))
    if out.size == 0:
        return out
    depth = indices.shape[-1]
    if math.prod(data.shape[batch_dims:batch_dims + depth]) == 0:  # nothing to pick
        return fill(out, 0)
    tuples = math.prod(indices.shape[batch_dims:-1])
    plan = gather_nd_plan(data.context.caps, 8 * data.dtype.itemsize, data.shape,
                          batch_dims, tuples, depth)
    # Tuples of no entries (whole slices) leave indices empty, with no memory to bind: the
    # kernel reads none of them, so data stands in.
    data.context.run(plan, (data, indices if indices.size else data, out))
    return out


def _gather_nd_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    data, indices = only(ins), ins[1]
    assert indices is not None
    op = "gather_nd"
    data_dtype(op, data, "data")
    index_dtype(op, indices)
    batch = attrs["batch_dims"]
    if isinstance(batch, bool) or not isinstance(batch, int):
        raise VkumdTypeError(f"{op}: batch_dims must be an int, not {batch!r}")
    if data.ndim == 0 or indices.ndim == 0 or not 0 <= batch < min(data.ndim, indices.ndim):
        raise VkumdValueError(f"{op}: batch_dims={batch} with data {format_shape(data.shape)} "
                              f"and indices {format_shape(indices.shape)}; both need more "
                              "than batch_dims dimensions")
    depth = dims.resolve(indices.shape[-1])
    if not isinstance(depth, int) or depth > data.ndim - batch or depth > 6:
        raise VkumdValueError(f"{op}: index tuples of {depth} entries into data "
                              f"{format_shape(data.shape)} past {batch} batch dimensions; "
                              "they may hold at most its remaining rank (and at most 6)")
    for d in range(batch):
        if dims.resolve(data.shape[d]) != dims.resolve(indices.shape[d]):
            raise VkumdValueError(f"{op}: data {format_shape(data.shape)} and indices "
                                  f"{format_shape(indices.shape)} differ in batch dimension "
                                  f"{d}")
    return [TensorType(indices.shape[:-1] + data.shape[batch + depth:], data.dtype)]


def _gather_nd_reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    data, indices = a
    batch = attrs["batch_dims"]
    depth = indices.shape[-1]
    lead = int(np.prod(data.shape[:batch]))
    flat_data = data.reshape((lead,) + data.shape[batch:])
    flat_ids = indices.reshape(lead, int(np.prod(indices.shape[batch:-1])), depth)
    slice_shape = data.shape[batch + depth:]
    out = np.zeros((lead, flat_ids.shape[1]) + slice_shape)
    for b in range(lead):
        for t in range(flat_ids.shape[1]):
            where = []
            ok = True
            for j in range(depth):
                ids, inside = normalized(flat_ids[b, t, j:j + 1], data.shape[batch + j])
                ok = ok and bool(inside[0])
                where.append(int(ids[0]))
            if ok:
                out[b, t] = flat_data[(b, *where)]
    return [out.reshape(s[0])]


def _gather_nd_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    gather_nd(ins[0], ins[1], batch_dims=attrs_of(node)["batch_dims"], out=outs[0])


define("gather_nd", ("data", "indices"), {"batch_dims": 0}, rule=_gather_nd_rule,
       reference=_gather_nd_reference, lower=_gather_nd_lower, eager=gather_nd)


# -- trilu -------------------------------------------------------------------------------


def trilu(x: Tensor, *, k: int = 0, upper: bool = True, out: Tensor | None = None) -> Tensor:
    """The upper (``upper``: ``numpy.triu``) or lower (``numpy.tril``) triangle of the last
    two dimensions of ``x`` from diagonal ``k`` on, the other elements zero (ONNX Trilu).

    Args:
        x: float32, float16, bfloat16 or int32, at least 2-D.
        k: the diagonal: 0 the main one, positive above it, negative below.
        upper: keep ``col - row >= k`` (True) or ``col - row <= k`` (False).
        out: optional output of x's shape and dtype.

    Returns:
        x's shape and dtype.

    Raises:
        VkumdTypeError: x of an unsupported dtype; k not an int; upper not a bool; out of
            another dtype.
        VkumdValueError: x under 2-D; out of another shape.
    """
    op = "trilu"
    result = _checked(op, (x,), ("x",), {"k": k, "upper": upper})
    out = output(op, x.context, out, result.shape, x.dtype, (x,))
    if out.size == 0:
        return out
    plan = trilu_plan(x.context.caps, 8 * x.dtype.itemsize, x.shape, int(k), bool(upper))
    x.context.run(plan, (x, out))
    return out


def _trilu_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    data_dtype("trilu", x, "x")
    k = attrs["k"]
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise VkumdTypeError(f"trilu: k must be an int, not {k!r}")
    flag("trilu", attrs["upper"], "upper")
    if x.ndim < 2:
        raise VkumdValueError(f"trilu: x has shape {format_shape(x.shape)}; it needs at least "
                              "2 dimensions (the matrix is the last two)")
    return [TensorType(x.shape, x.dtype)]


def _trilu_reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    pick = np.triu if attrs["upper"] else np.tril
    return [pick(a[0], int(attrs["k"]))]


def _trilu_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    trilu(ins[0], k=at["k"], upper=at["upper"], out=outs[0])


define("trilu", ("x",), {"k": 0, "upper": True}, rule=_trilu_rule,
       reference=_trilu_reference, lower=_trilu_lower, eager=trilu)
