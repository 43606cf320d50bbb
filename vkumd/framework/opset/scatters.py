"""Index scatters, their records and eager functions: ``scatter_elements`` (ONNX
ScatterElements and Scatter, torch's ``scatter``/``scatter_reduce``) and ``scatter_nd`` (ONNX
ScatterND), each with ONNX's reductions: ``none`` (replace), ``add``, ``mul``, ``max``, ``min``.

The result is data's copy with the updates applied. Updates that land on one element are
applied in the order they come, by one invocation (no atomics, see ``shaders/scatter.comp``):
duplicate indices give the sequential result, the last update winning under ``none`` (ONNX
leaves that order undefined), the same on every device and every run. Reductions compute in
the element's type (float32 for the float types, rounding to float16 or bfloat16 after each
update; int32 wraps). A negative index counts from the end of its dimension; an update whose
index is still out of range is dropped (the device cannot refuse it without a round trip).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.index import (
    SCATTER_CODES,
    scatter_elements_dims,
    scatter_elements_plan,
    scatter_nd_plan,
)
from vkumd.compiler.kernels.limits import INDEX_MAX_DIMS, SCATTER_REDUCTIONS
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, axis_of, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_dtype, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.gathers import (
    concrete_shapes,
    data_dtype,
    index_dtype,
    normalized,
    too_many_dims,
    within_data,
)
from vkumd.framework.opset.unary import copy
from vkumd.framework.tensor import Tensor

_VERDICTS: dict[str, Verdicts] = {"scatter_elements": {}, "scatter_nd": {}}
_COMBINE = {"add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}


def _reduction(op: str, reduction: Any) -> str:
    if reduction not in SCATTER_REDUCTIONS:
        raise VkumdValueError(f"{op}: reduction {reduction!r} is not one of "
                              f"{', '.join(SCATTER_REDUCTIONS)}")
    return reduction


def _run(op: str, data: Tensor, indices: Tensor, updates: Tensor, attrs: dict[str, Any],
         out: Tensor | None) -> tuple[Tensor, bool]:
    """Checks shared by the scatters; the output holding data's copy, and whether there is
    any update to apply."""
    check_tensor(op, data, "data")
    for t, name in ((indices, "indices"), (updates, "updates")):
        check_context(op, data, check_tensor(op, t, name), name)
    key = ((data.shape, data.dtype.name), (indices.shape, indices.dtype.name),
           (updates.shape, updates.dtype.name),
           tuple((k, v, type(v)) for k, v in sorted(attrs.items())))
    if recall(_VERDICTS[op], key) is None:
        remember(_VERDICTS[op], key, concrete_rule(op, (data, indices, updates), attrs)[0])
    check_dtype(op, data, "data", SCATTER_CODES)
    # A lowering may hand data's own memory as the output (the record's inplace): the copy
    # is then already there.
    if isinstance(out, Tensor) and out.binding is not None and out.binding == data.binding \
            and out.shape == data.shape and out.dtype is data.dtype:
        return out, updates.size > 0
    out = output(op, data.context, out, data.shape, data.dtype, (data, indices, updates))
    if out.size:
        copy(data, out)
    return out, out.size > 0 and updates.size > 0


def _same_dtype(op: str, data: TensorType, updates: TensorType) -> None:
    if updates.dtype is not data.dtype:
        raise VkumdTypeError(f"{op}: updates are {updates.dtype.name} and data "
                             f"{data.dtype.name}; cast the updates to data's dtype")


# -- scatter_elements --------------------------------------------------------------------


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, *, axis: int = 0,
                     reduction: str = "none", out: Tensor | None = None) -> Tensor:
    """A copy of ``data`` with ``out[p with its axis coordinate replaced by indices[p]] =
    updates[p]`` (or combined with it by ``reduction``) for every position ``p`` of
    ``updates`` (ONNX ScatterElements, torch's ``scatter_reduce``).

    Duplicate indices are applied in order (the last wins under ``none``); an index out of
    range after counting negative ones from the end drops its update.

    Args:
        data: float32, float16, bfloat16 or int32, at least 1-D.
        indices: int32 of updates' shape, data's rank; along every dimension but ``axis``
            no longer than data.
        updates: data's dtype.
        axis: the dimension indexed (negative counts from the end).
        reduction: ``none``, ``add``, ``mul``, ``max`` or ``min``.
        out: optional output of data's shape and dtype (data itself updates it in place).

    Returns:
        data's shape and dtype.

    Raises:
        VkumdTypeError: data of an unsupported dtype; indices not int32; updates of another
            dtype; a non-int axis; out of another dtype.
        VkumdValueError: 0-d data, ranks or shapes that differ, an axis out of range, an
            unknown reduction, more than 6 dimensions the kernel cannot merge, tensors of
            different contexts, out of another shape.
    """
    op = "scatter_elements"
    attrs = {"axis": axis, "reduction": reduction}
    out, work = _run(op, data, indices, updates, attrs, out)
    if work:
        plan = scatter_elements_plan(data.context.caps, SCATTER_CODES[data.dtype.name],
                                     data.shape, indices.shape, axis % data.ndim, reduction)
        data.context.run(plan, (indices, updates, out))
    return out


def _scatter_elements_rule(ins: Types, attrs: dict[str, Any], dims: DimTable
                           ) -> list[TensorType]:
    data, indices, updates = only(ins), ins[1], ins[2]
    assert indices is not None and updates is not None
    op = "scatter_elements"
    data_dtype(op, data, "data")
    index_dtype(op, indices)
    _same_dtype(op, data, updates)
    _reduction(op, attrs["reduction"])
    if data.ndim == 0 or indices.ndim != data.ndim or indices.shape != updates.shape:
        raise VkumdValueError(f"{op}: data {format_shape(data.shape)}, indices "
                              f"{format_shape(indices.shape)} and updates "
                              f"{format_shape(updates.shape)}: indices and updates need one "
                              "shape, of data's rank (at least 1)")
    index = axis_of(op, attrs["axis"], data.ndim)
    within_data(op, data, indices, index, dims)
    return [TensorType(data.shape, data.dtype)]


def _scatter_elements_reference(a: list[Any], attrs: dict[str, Any], s: Any
                                ) -> list[np.ndarray]:
    data, indices, updates = a
    axis = attrs["axis"] % data.ndim
    out = np.array(data, np.float64)
    ids, inside = normalized(indices, data.shape[axis])
    combine = _COMBINE.get(attrs["reduction"])
    for p in np.ndindex(*indices.shape):  # in order: the kernel's sequential result
        if not inside[p]:
            continue
        target = p[:axis] + (int(ids[p]),) + p[axis + 1:]
        out[target] = updates[p] if combine is None else combine(out[target], updates[p])
    return [out]


def _scatter_elements_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    scatter_elements(ins[0], ins[1], ins[2], axis=at["axis"], reduction=at["reduction"],
                     out=outs[0])


def _scatter_elements_refuse(node: Node) -> str | None:
    shapes = concrete_shapes(node)
    if shapes is None:
        return None  # checked when the sizes are bound, by the eager op
    data, indices, _ = shapes
    axis = attrs_of(node)["axis"] % len(data)
    return too_many_dims("scatter_elements",
                         len(scatter_elements_dims(data, indices, axis)), indices)


define("scatter_elements", ("data", "indices", "updates"), {"axis": 0, "reduction": "none"},
       rule=_scatter_elements_rule, reference=_scatter_elements_reference,
       inplace=("data",), lower=_scatter_elements_lower, refuse=_scatter_elements_refuse,
       eager=scatter_elements)


# -- scatter_nd --------------------------------------------------------------------------


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, *, reduction: str = "none",
               out: Tensor | None = None) -> Tensor:
    """A copy of ``data`` with slices written at index tuples (ONNX ScatterND): for indices
    of shape ``[*rest, k]``, ``out[indices[r]] = updates[r]`` (a slice of
    ``data.shape[k:]``), or combined with it by ``reduction``.

    Tuples are applied in order (the last wins under ``none``); a tuple with an entry out of
    range after counting negative ones from the end drops its update. One invocation per
    element of a slice walks every tuple: a scatter of single elements (``k == data.ndim``)
    is one serial loop.

    Args:
        data: float32, float16, bfloat16 or int32, at least 1-D.
        indices: int32, at least 1-D, ``k`` (its last dimension) at most data's rank and 6.
        updates: data's dtype, of shape ``indices.shape[:-1] + data.shape[k:]``.
        reduction: ``none``, ``add``, ``mul``, ``max`` or ``min``.
        out: optional output of data's shape and dtype (data itself updates it in place).

    Returns:
        data's shape and dtype.

    Raises:
        VkumdTypeError: data of an unsupported dtype; indices not int32; updates of another
            dtype; out of another dtype.
        VkumdValueError: 0-d data or indices, tuples longer than data's rank (or than 6),
            updates of the wrong shape, an unknown reduction, tensors of different contexts,
            out of another shape.
    """
    op = "scatter_nd"
    out, work = _run(op, data, indices, updates, {"reduction": reduction}, out)
    if work:
        depth = indices.shape[-1]
        plan = scatter_nd_plan(data.context.caps, SCATTER_CODES[data.dtype.name], data.shape,
                               math.prod(indices.shape[:-1]), depth, reduction)
        # Tuples of no entries leave indices empty, with no memory to bind: the kernel
        # reads none of them, so updates stand in.
        data.context.run(plan, (indices if indices.size else updates, updates, out))
    return out


def _scatter_nd_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    data, indices, updates = only(ins), ins[1], ins[2]
    assert indices is not None and updates is not None
    op = "scatter_nd"
    data_dtype(op, data, "data")
    index_dtype(op, indices)
    _same_dtype(op, data, updates)
    _reduction(op, attrs["reduction"])
    depth = dims.resolve(indices.shape[-1]) if indices.ndim else None
    if data.ndim == 0 or not isinstance(depth, int) or depth > data.ndim \
            or depth > INDEX_MAX_DIMS:
        raise VkumdValueError(f"{op}: indices {format_shape(indices.shape)} into data "
                              f"{format_shape(data.shape)}: index tuples (the last dimension)"
                              f" may hold at most data's rank and {INDEX_MAX_DIMS} entries")
    want = indices.shape[:-1] + data.shape[depth:]
    if len(want) != updates.ndim or any(dims.resolve(a) != dims.resolve(b)
                                        for a, b in zip(want, updates.shape, strict=True)):
        raise VkumdValueError(f"{op}: updates have shape {format_shape(updates.shape)}; "
                              f"indices {format_shape(indices.shape)} into data "
                              f"{format_shape(data.shape)} need {format_shape(want)}")
    return [TensorType(data.shape, data.dtype)]


def _scatter_nd_reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    data, indices, updates = a
    depth = indices.shape[-1]
    out = np.array(data, np.float64)
    combine = _COMBINE.get(attrs["reduction"])
    tuples = indices.reshape(int(np.prod(indices.shape[:-1])), depth)
    slices = updates.reshape((tuples.shape[0],) + data.shape[depth:])
    for t in range(tuples.shape[0]):
        where = []
        for j in range(depth):
            ids, inside = normalized(tuples[t, j:j + 1], data.shape[j])
            where.append(int(ids[0]) if inside[0] else None)
        if None in where:
            continue
        target = tuple(where)
        out[target] = slices[t] if combine is None else combine(out[target], slices[t])
    return [out]


def _scatter_nd_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    scatter_nd(ins[0], ins[1], ins[2], reduction=attrs_of(node)["reduction"], out=outs[0])


define("scatter_nd", ("data", "indices", "updates"), {"reduction": "none"},
       rule=_scatter_nd_rule, reference=_scatter_nd_reference, inplace=("data",),
       lower=_scatter_nd_lower, eager=scatter_nd)
