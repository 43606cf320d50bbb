"""Ops whose output size depends on the input's values -- ``nonzero``, ``unique``,
``masked_select``, ``compress`` -- run as host steps.

No kernel can size such an output before it runs, and every later launch needs that size,
so each of these reads its inputs back to the host (``Tensor.numpy()``: a synchronisation
with the device and a transfer), computes in numpy and uploads the result. Each record's
``host_step`` is that numpy function, keeping the input's dtype (indices int64), shared by
the eager function, the float64 reference and the ONNX runner, which runs a model in
segments around such a node (:mod:`vkumd.framework.frontends.onnx.segments`). A graph
cannot hold one: the rule refuses, naming the eager function.

Order and equality follow numpy (and ONNX): ``unique`` sorts ascending with NaNs last and
collapses them into one (numpy's ``equal_nan``); unsorted, the values come in order of first
occurrence (ONNX's Unique with ``sorted=0``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.operands import Types, axis_of, flag
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import broadcast, check_context, check_tensor
from vkumd.framework.tensor import Tensor

HostStep = Callable[[list[np.ndarray], dict[str, Any]], list[np.ndarray]]


def _in_no_graph(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    """The rule of a host-step op: a graph's values have sizes known before it runs."""
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        raise VkumdValueError(
            f"{op}: the size of its output depends on the input's values, so a graph cannot "
            f"hold it; call vkumd.ops.{op} eagerly, outside vkumd.compile (a host step: it "
            "reads the input back, a synchronisation and a transfer); an ONNX model runs in "
            "segments around such a node")
    return rule


def _reference(fn: HostStep) -> Callable[[list[Any], dict[str, Any], Any], list[np.ndarray]]:
    """The float64 reference of a host step: the same numpy function on float64 arrays."""
    def reference(arrays: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
        ins = [None if a is None else np.asarray(a, np.float64) for a in arrays]
        return [np.asarray(r, np.float64) for r in fn(ins, attrs)]  # type: ignore[arg-type]
    return reference


def _upload(ctx: Any, array: np.ndarray, like: dtypes.DType | None) -> Tensor:
    """A host result as a tensor: of ``like`` (a value), or int32 (an index or count)."""
    if like is None:
        return ctx.tensor(np.ascontiguousarray(array, np.int32), dtype=dtypes.int32)
    return ctx.tensor(np.ascontiguousarray(array), dtype=like)


# --- nonzero ---------------------------------------------------------------------------

def nonzero_arrays(arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """``[n, ndim]`` int64 indices of the nonzero entries, in row-major order (NaN counts as
    nonzero)."""
    return [np.argwhere(arrays[0]).astype(np.int64)]


def nonzero(x: Tensor, *, as_tuple: bool = False) -> Tensor | tuple[Tensor, ...]:
    """The indices of the nonzero entries of ``x`` (``torch.nonzero``), a host step.

    The result's size depends on x's values, so x is read back to the host (a
    synchronisation and a transfer), numpy finds the entries and the indices are uploaded.

    Args:
        x: a tensor of any dtype and shape; NaN counts as nonzero.
        as_tuple: give one 1-D index tensor per dimension instead (``torch.nonzero``'s
            ``as_tuple=True``, numpy's ``nonzero``).

    Returns:
        int32 ``[n, x.ndim]`` indices in row-major order (``n`` may be 0), or with
        ``as_tuple`` a tuple of ``x.ndim`` int32 ``[n]`` tensors.

    Raises:
        VkumdTypeError: x not a tensor; as_tuple not a bool.
        VkumdValueError: x released.
    """
    x = check_tensor("nonzero", x, "x")
    flag("nonzero", as_tuple, "as_tuple")
    (found,) = nonzero_arrays([x.numpy()], {})
    if as_tuple:
        return tuple(_upload(x.context, found[:, d], None) for d in range(x.ndim))
    return _upload(x.context, found, None)


define("nonzero", ("x",), {"as_tuple": False}, rule=_in_no_graph("nonzero"),
       reference=_reference(nonzero_arrays), host_step=nonzero_arrays, eager=nonzero)


# --- unique ----------------------------------------------------------------------------

def unique_arrays(arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """``(values, first indices, inverse, counts)``, as ONNX's Unique.

    ``attrs``: ``dim`` (None: over the flattened input) and ``sorted`` (False: in order of
    first occurrence); the others choose what the eager function returns. Indices are
    int64; the inverse is 1-D (the flattened input's length, or the axis's).
    """
    x, axis = arrays[0], attrs["dim"]
    flat = x.reshape(-1) if axis is None else x
    along = 0 if axis is None else axis
    values, first, inverse, counts = np.unique(flat, return_index=True, return_inverse=True,
                                               return_counts=True, axis=axis)
    inverse = inverse.reshape(-1)
    if not attrs["sorted"]:
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        first, counts, inverse = first[order], counts[order], rank[inverse]
        values = np.take(flat, first, axis=along)
    return [values, first.astype(np.int64), inverse.astype(np.int64), counts.astype(np.int64)]


def _unique_axis(x: Tensor, dim: Any) -> int | None:
    if dim is None:
        return None
    if x.ndim == 0:
        raise VkumdValueError("unique: dim must be None for a 0-d x (it has no dimensions)")
    return axis_of("unique", dim, x.ndim)


def unique(x: Tensor, *, sorted: bool = True, return_inverse: bool = False,
           return_counts: bool = False, dim: int | None = None
           ) -> Tensor | tuple[Tensor, ...]:
    """The distinct values of ``x`` (``torch.unique``), a host step.

    x is read back to the host (a synchronisation and a transfer), numpy's ``unique`` finds
    the values and they are uploaded. NaNs collapse into one, sorted last (numpy and ONNX;
    torch keeps each NaN apart).

    Args:
        x: a tensor of any dtype and shape.
        sorted: ascending order; False: order of first occurrence (ONNX's ``sorted=0``).
        return_inverse: also give, per entry of x, the index of its value in the result.
        return_counts: also give how often each value occurs.
        dim: the distinct slices along this dimension instead of values (None: over the
            flattened x).

    Returns:
        The values (x's dtype; 1-D, or x's shape with ``dim`` shortened), followed by the
        int32 inverse (x's shape, or ``[x.shape[dim]]``) and the int32 counts when asked,
        as a tuple when either is asked.

    Raises:
        VkumdTypeError: x not a tensor, flags not bools, a dim that is not an int.
        VkumdValueError: x released, dim out of range.
    """
    x = check_tensor("unique", x, "x")
    for value, what in ((sorted, "sorted"), (return_inverse, "return_inverse"),
                        (return_counts, "return_counts")):
        flag("unique", value, what)
    axis = _unique_axis(x, dim)
    values, _, inverse, counts = unique_arrays([x.numpy()], {"dim": axis, "sorted": sorted})
    out = _upload(x.context, values, x.dtype)
    if not (return_inverse or return_counts):
        return out
    results = [out]
    if return_inverse:
        shape = x.shape if axis is None else (x.shape[axis],)
        results.append(_upload(x.context, inverse.reshape(shape), None))
    if return_counts:
        results.append(_upload(x.context, counts, None))
    return tuple(results)


define("unique", ("x",), {"sorted": True, "return_inverse": False, "return_counts": False,
                         "dim": None}, rule=_in_no_graph("unique"),
       reference=_reference(unique_arrays), host_step=unique_arrays, eager=unique)


# --- compress and masked_select ----------------------------------------------------------

def compress_arrays(arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """The slices of ``x`` along ``axis`` where ``condition`` is nonzero (ONNX's Compress,
    ``numpy.compress``; axis None: of the flattened x). A condition shorter than the axis
    leaves the rest out."""
    x, condition = arrays[0], arrays[1]
    check_condition("compress", np.shape(x), np.shape(condition), attrs["axis"])
    return [np.compress(np.asarray(condition).reshape(-1) != 0, x, axis=attrs["axis"])]


def check_condition(op: str, x_shape: tuple[int, ...], cond_shape: tuple[int, ...],
                    axis: Any) -> int | None:
    """The axis as an index (None: flattened), after refusing a condition that is not 1-D
    or is longer than what it selects from.

    Raises:
        VkumdTypeError: an axis that is not an int.
        VkumdValueError: an axis out of range, a condition of another rank or too long.
    """
    index = None if axis is None else axis_of(op, axis, max(len(x_shape), 1))
    if len(cond_shape) != 1:
        raise VkumdValueError(f"{op}: condition has shape {format_shape(cond_shape)}; it must "
                              "be 1-D (one flag per slice)")
    length = int(np.prod(x_shape)) if index is None else x_shape[index]
    if cond_shape[0] > length:
        where = "x's size" if index is None else f"the length of axis {index}"
        raise VkumdValueError(f"{op}: condition has {cond_shape[0]} entries, more than {where} "
                              f"({length}, of x's shape {format_shape(x_shape)}); give at "
                              "most that many")
    return index


def compress(x: Tensor, condition: Tensor, *, axis: int | None = None) -> Tensor:
    """The slices of ``x`` along ``axis`` where ``condition`` is nonzero (ONNX's Compress,
    ``numpy.compress``), a host step: both are read back (a synchronisation and a transfer)
    and the result uploaded.

    Args:
        x: a tensor of any dtype, at least 1-D when axis is given.
        condition: a 1-D tensor of any dtype (nonzero selects), at most as long as the axis
            (x's size when axis is None); the slices past its end are left out.
        axis: the dimension selected along; None: the flattened x.

    Returns:
        x's dtype: 1-D when axis is None, else x's shape with ``axis`` of the selected count.

    Raises:
        VkumdTypeError: non-tensors, a non-int axis.
        VkumdValueError: released tensors or tensors of different contexts, an axis out of
            range, a condition that is not 1-D or too long.
    """
    x = check_tensor("compress", x, "x")
    condition = check_tensor("compress", condition, "condition")
    check_context("compress", x, condition, "condition")
    index = check_condition("compress", x.shape, condition.shape, axis)
    (picked,) = compress_arrays([x.numpy(), condition.numpy()],
                                {"axis": index})
    return _upload(x.context, picked, x.dtype)


define("compress", ("x", "condition"), {"axis": None}, rule=_in_no_graph("compress"),
       reference=_reference(compress_arrays), host_step=compress_arrays, eager=compress)


def masked_select_arrays(arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """The entries of ``x`` where ``mask`` is nonzero, both broadcast to one shape, in
    row-major order (``torch.masked_select``)."""
    x, mask = np.broadcast_arrays(arrays[0], arrays[1])
    return [x[mask != 0]]


def masked_select(x: Tensor, mask: Tensor) -> Tensor:
    """The entries of ``x`` where ``mask`` is nonzero, as a 1-D tensor
    (``torch.masked_select``), a host step: both are read back (a synchronisation and a
    transfer) and the result uploaded.

    Args:
        x: a tensor of any dtype.
        mask: a tensor of any dtype (nonzero selects; a vkumd bool is uint8 0/1, and a
            comparison's 1/0 in x's dtype works as it is), broadcasting with x.

    Returns:
        1-D, x's dtype, the selected entries in row-major order of the broadcast shape.

    Raises:
        VkumdTypeError: non-tensors.
        VkumdValueError: released tensors or tensors of different contexts, shapes that do
            not broadcast.
    """
    x = check_tensor("masked_select", x, "x")
    mask = check_tensor("masked_select", mask, "mask")
    check_context("masked_select", x, mask, "mask")
    broadcast("masked_select", x.shape, mask.shape)
    (picked,) = masked_select_arrays([x.numpy(),
                                      mask.numpy()], {})
    return _upload(x.context, picked, x.dtype)


define("masked_select", ("x", "mask"), {}, rule=_in_no_graph("masked_select"),
       reference=_reference(masked_select_arrays), host_step=masked_select_arrays,
       eager=masked_select)



# --- non_max_suppression -----------------------------------------------------------------

def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """``[n, 4]`` boxes as ``(y_min, x_min, y_max, x_max)`` in float64: from corners in
    either order ``[y1, x1, y2, x2]``, or from ``[x_center, y_center, width, height]``."""
    b = np.asarray(boxes, np.float64)
    if center_point_box:
        x, y, half_w, half_h = b[:, 0], b[:, 1], b[:, 2] / 2, b[:, 3] / 2
        return np.stack([y - half_h, x - half_w, y + half_h, x + half_w], axis=1)
    return np.stack([np.minimum(b[:, 0], b[:, 2]), np.minimum(b[:, 1], b[:, 3]),
                     np.maximum(b[:, 0], b[:, 2]), np.maximum(b[:, 1], b[:, 3])], axis=1)


def _overlaps(box: np.ndarray, kept: np.ndarray, iou_threshold: float) -> bool:
    """Whether ``box`` overlaps any of ``kept`` (corner rows) by more than the threshold
    (an empty intersection or a box of no area never does)."""
    if kept.size == 0:
        return False
    height = np.minimum(box[2], kept[:, 2]) - np.maximum(box[0], kept[:, 0])
    width = np.minimum(box[3], kept[:, 3]) - np.maximum(box[1], kept[:, 1])
    inter = np.where((height > 0) & (width > 0), height * width, 0.0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (kept[:, 2] - kept[:, 0]) * (kept[:, 3] - kept[:, 1])
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    iou = np.divide(inter, union, out=np.zeros_like(inter), where=valid)
    return bool(np.any(valid & (iou > iou_threshold)))


def nms_arrays(arrays: list[np.ndarray], attrs: dict[str, Any]) -> list[np.ndarray]:
    """``[n, 3]`` int64 ``(batch, class, box)`` of the boxes ONNX's NonMaxSuppression keeps:
    per batch and class, boxes by descending score (lower index first among equals), each
    kept unless it overlaps a kept one by IoU above ``iou_threshold``, at most
    ``max_output_boxes_per_class``; a ``score_threshold`` (None: none) drops boxes scoring
    at most it."""
    boxes, scores = np.asarray(arrays[0]), np.asarray(arrays[1], np.float64)
    limit, iou = int(attrs["max_output_boxes_per_class"]), float(attrs["iou_threshold"])
    floor = attrs["score_threshold"]
    picked: list[tuple[int, int, int]] = []
    for batch in range(boxes.shape[0]):
        corners = _corners(boxes[batch], attrs["center_point_box"])
        for cls in range(scores.shape[1]):
            row = scores[batch, cls]
            order = np.argsort(-row, kind="stable")
            if floor is not None:
                order = order[row[order] > float(floor)]
            kept: list[int] = []
            for index in order:
                if len(kept) >= limit:
                    break
                if not _overlaps(corners[index], corners[kept], iou):
                    kept.append(int(index))
                    picked.append((batch, cls, int(index)))
    return [np.array(picked, np.int64).reshape(-1, 3)]


def non_max_suppression(boxes: Tensor, scores: Tensor, *, max_output_boxes_per_class: int,
                        iou_threshold: float = 0.0, score_threshold: float | None = None,
                        center_point_box: int = 0) -> Tensor:
    """The boxes kept by greedy non-maximum suppression (ONNX's NonMaxSuppression), a host
    step: boxes and scores are read back (a synchronisation and a transfer), numpy selects,
    and the indices are uploaded.

    Args:
        boxes: ``[batches, boxes, 4]`` float tensor: ``[y1, x1, y2, x2]`` corners (either
            order), or ``[x_center, y_center, width, height]`` with ``center_point_box=1``.
        scores: ``[batches, classes, boxes]`` float tensor.
        max_output_boxes_per_class: at most this many boxes per batch and class (0: none).
        iou_threshold: a box overlapping a kept one by more than this is dropped.
        score_threshold: boxes scoring at most this are dropped (None: none are).
        center_point_box: 0 or 1, the box format.

    Returns:
        int32 ``[n, 3]``: ``(batch, class, box)`` per kept box, by batch, class, then
        descending score.

    Raises:
        VkumdTypeError: non-tensors.
        VkumdValueError: released tensors or tensors of different contexts, shapes that do
            not match, a negative limit, a center_point_box other than 0 or 1.
    """
    op = "non_max_suppression"
    boxes = check_tensor(op, boxes, "boxes")
    scores = check_tensor(op, scores, "scores")
    check_context(op, boxes, scores, "scores")
    b, s = boxes.shape, scores.shape
    if len(b) != 3 or b[2] != 4 or len(s) != 3 or s[0] != b[0] or s[2] != b[1]:
        raise VkumdValueError(f"{op}: boxes {format_shape(b)} and scores {format_shape(s)} "
                              "must be [batches, boxes, 4] and [batches, classes, boxes]")
    if isinstance(max_output_boxes_per_class, bool) or not isinstance(
            max_output_boxes_per_class, int) or max_output_boxes_per_class < 0:
        raise VkumdValueError(f"{op}: max_output_boxes_per_class={max_output_boxes_per_class!r};"
                              " give an int >= 0")
    if center_point_box not in (0, 1) or isinstance(center_point_box, bool):
        raise VkumdValueError(f"{op}: center_point_box={center_point_box!r}; give 0 or 1")
    attrs = {"max_output_boxes_per_class": max_output_boxes_per_class,
             "iou_threshold": float(iou_threshold), "center_point_box": center_point_box,
             "score_threshold": None if score_threshold is None else float(score_threshold)}
    (picked,) = nms_arrays([boxes.numpy(), scores.numpy()], attrs)
    return _upload(boxes.context, picked, None)


define("non_max_suppression", ("boxes", "scores"),
       {"max_output_boxes_per_class": REQUIRED, "iou_threshold": 0.0, "score_threshold": None,
        "center_point_box": 0}, rule=_in_no_graph("non_max_suppression"),
       reference=_reference(nms_arrays), host_step=nms_arrays, eager=non_max_suppression)
