"""Windows along one axis: slice (Python's clamping; steps >= 1), concat and split, their
records and eager functions, each a strided copy.

A slice is always a copy into a new contiguous tensor, never a view at a byte offset: hazard
tracking keys memory by the ``(VkBuffer, offset)`` of a tensor's allocation, so a view that
started elsewhere in the allocation would not be ordered against work on the whole tensor.
(Writing into a slice is done by :func:`concat`, or by building the tensor from pieces.)

All three run the ``elementwise_unary`` copy with source and destination strides and offsets
(:func:`~vkumd.compiler.kernels.elementwise_plan.window_copy_plan`): stored bits are copied
unchanged (NaN payloads and -0.0 included). Element types: float32, float16, bfloat16 and
int32. In a graph they lower to the same copies; a slice with a step has no single launch,
so it runs on the host (it moves stored values only, so that is exact). The graph's split
takes its sizes as an attribute; the eager :func:`split` also takes a piece length, so no
record carries it.
"""

from __future__ import annotations

import builtins
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.elementwise_plan import window_copy_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, as_dim, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, axis_of, only, same_dtype
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_dtype, check_tensor, output
from vkumd.framework.ops.shape import dim_index
from vkumd.framework.opset.common import attrs_of, host_tensor
from vkumd.framework.strided import copy_into
from vkumd.framework.tensor import Tensor


def _copy_window(src: Tensor, out: Tensor, shape: tuple[int, ...],
                 src_start: Sequence[int], dst_start: Sequence[int]) -> None:
    """Copy the ``shape`` window of ``src`` at ``src_start`` into ``out`` at ``dst_start``."""
    if math.prod(shape) == 0:
        return
    code = ELEMENTWISE_CODES[src.dtype.name]
    plan = window_copy_plan(src.context.caps, code, code, shape, src.shape, tuple(src_start),
                            out.shape, tuple(dst_start))
    src.context.run(plan, (src, out))


def _off_axis(shape: tuple[int, ...], d: int) -> tuple[int, ...]:
    return shape[:d] + shape[d + 1:]


def _ints(op: str, values: Any, what: str) -> list[int]:
    if isinstance(values, (int, np.integer)) and not isinstance(values, bool):
        values = [values]
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise VkumdTypeError(f"{op}: {what} must be a sequence of ints, not {values!r}")
    for v in values:
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            raise VkumdTypeError(f"{op}: {what} must hold ints, got {v!r}")
    return [int(v) for v in values]


def slice(x: Tensor, starts: Sequence[int] | int, stops: Sequence[int] | int,  # noqa: A001
          axes: Sequence[int] | int | None = None, *, out: Tensor | None = None) -> Tensor:
    """``x[starts[0]:stops[0], …]`` along ``axes`` (step 1), copied into a new tensor.

    Starts and stops follow Python's slices: negative ones count from the end, and both are
    clamped to the dimension, so a window past the end is shorter (or empty), never an error.

    Args:
        x: a float32, float16, bfloat16 or int32 tensor.
        starts: the first index kept along each axis.
        stops: one past the last; ``None`` is not accepted here (use the dimension's size).
        axes: the dimensions sliced (default ``0 … len(starts) - 1``); each at most once.
        out: optional output of the window's shape and x's dtype.

    Returns:
        A new contiguous tensor (or ``out``).

    Raises:
        VkumdTypeError: x of an unsupported dtype; starts, stops or axes not ints.
        VkumdValueError: lengths that differ; an axis out of range or repeated; out of the
            wrong shape.
    """
    op = "slice"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", ELEMENTWISE_CODES)
    first, last = _ints(op, starts, "starts"), _ints(op, stops, "stops")
    dims = list(range(len(first))) if axes is None else _ints(op, axes, "axes")
    if not len(first) == len(last) == len(dims):
        raise VkumdValueError(f"{op}: {len(first)} starts, {len(last)} stops and {len(dims)} "
                              "axes; give one of each per sliced axis")
    dims = [dim_index(op, d, x.ndim, "axis") for d in dims]
    if len(set(dims)) != len(dims):
        raise VkumdValueError(f"{op}: axes {tuple(dims)} repeat a dimension")
    begin, shape = [0] * x.ndim, list(x.shape)
    for d, lo, hi in zip(dims, first, last, strict=True):
        lo, hi, _ = builtins.slice(lo, hi).indices(x.shape[d])
        begin[d], shape[d] = lo, max(0, hi - lo)
    out = output(op, x.context, out, tuple(shape), x.dtype, (x,))
    _copy_window(x, out, out.shape, begin, [0] * x.ndim)
    return out


def concat(tensors: Sequence[Tensor], axis: int = 0, *, out: Tensor | None = None) -> Tensor:
    """The tensors joined along ``axis`` (numpy's ``concatenate``): one copy per input.

    Args:
        tensors: a non-empty sequence of tensors of one dtype and context, whose shapes
            agree except along ``axis``.
        axis: the dimension they are joined along (negative counts from the end).
        out: optional output of the joined shape and their dtype.

    Returns:
        A new contiguous tensor (or ``out``).

    Raises:
        VkumdTypeError: not a sequence of tensors; dtypes that differ or are unsupported.
        VkumdValueError: no tensors; 0-d tensors; shapes that disagree off ``axis``;
            different contexts; out of the wrong shape, or one of the inputs.
    """
    op = "concat"
    if isinstance(tensors, Tensor) or not isinstance(tensors, Sequence) or not tensors:
        raise VkumdTypeError(f"{op}: tensors must be a non-empty list or tuple of tensors")
    first = check_tensor(op, tensors[0], "tensors[0]")
    check_dtype(op, first, "tensors[0]", ELEMENTWISE_CODES)
    if first.ndim == 0:
        raise VkumdValueError(f"{op}: 0-d tensors cannot be joined; reshape them to (1,)")
    d = dim_index(op, axis, first.ndim, "axis")
    for i, t in enumerate(tensors[1:], 1):
        check_tensor(op, t, f"tensors[{i}]")
        check_context(op, first, t, f"tensors[{i}]")
        if t.dtype is not first.dtype:
            raise VkumdTypeError(f"{op}: tensors[{i}] is {t.dtype.name} and tensors[0] is "
                                 f"{first.dtype.name}; cast them to one dtype")
        if t.ndim != first.ndim or _off_axis(t.shape, d) != _off_axis(first.shape, d):
            raise VkumdValueError(f"{op}: tensors[{i}] has shape {t.shape} and tensors[0] "
                                  f"{first.shape}; they must agree except along axis {axis}")
    shape = list(first.shape)
    shape[d] = builtins.sum(t.shape[d] for t in tensors)
    out = output(op, first.context, out, tuple(shape), first.dtype, tensors)
    start = [0] * first.ndim
    for t in tensors:
        _copy_window(t, out, t.shape, [0] * t.ndim, start)
        start[d] += t.shape[d]
    return out


def split(x: Tensor, sizes_or_sections: int | Sequence[int], axis: int = 0
          ) -> list[Tensor]:
    """``x`` cut along ``axis`` into pieces, each copied into a new tensor (``torch.split``).

    Args:
        x: a float32, float16, bfloat16 or int32 tensor, at least 1-D.
        sizes_or_sections: an int ``n`` cuts pieces of ``n`` along ``axis`` (the last one
            shorter when ``n`` does not divide the dimension), as ``torch.split``; a sequence
            gives each piece's size, and must add up to the dimension.
        axis: the dimension cut (negative counts from the end).

    Returns:
        The pieces, in order.

    Raises:
        VkumdTypeError: sizes not ints; x of an unsupported dtype.
        VkumdValueError: 0-d x; a size below 1 (an int) or below 0; sizes that do not add
            up to the dimension.
    """
    op = "split"
    x = check_tensor(op, x, "x")
    check_dtype(op, x, "x", ELEMENTWISE_CODES)
    if x.ndim == 0:
        raise VkumdValueError(f"{op}: x is 0-d and has no dimension to cut")
    d = dim_index(op, axis, x.ndim, "axis")
    length = x.shape[d]
    if isinstance(sizes_or_sections, (int, np.integer)) and not isinstance(sizes_or_sections,
                                                                           bool):
        step = int(sizes_or_sections)
        if step < 1:
            raise VkumdValueError(f"{op}: a piece size of {step}; give a size of at least 1")
        sizes = [min(step, length - i) for i in range(0, length, step)] or [0]
    else:
        sizes = _ints(op, sizes_or_sections, "sizes_or_sections")
        if any(s < 0 for s in sizes) or builtins.sum(sizes) != length:
            raise VkumdValueError(f"{op}: sizes {tuple(sizes)} must be >= 0 and add up to "
                                  f"axis {axis}'s {length}")
    pieces, start = [], 0
    for size in sizes:
        shape = x.shape[:d] + (size,) + x.shape[d + 1:]
        piece = x.context.empty(shape, x.dtype)
        begin = [0] * x.ndim
        begin[d] = start
        _copy_window(x, piece, shape, begin, [0] * x.ndim)
        pieces.append(piece)
        start += size
    return pieces


def _concat_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    xs = [t for t in ins if t is not None]
    first = xs[0]
    dt = same_dtype("concat", *((f"xs[{i}]", t) for i, t in enumerate(xs)))
    axis = axis_of("concat", attrs["axis"], first.ndim)
    total: int | Dim = 0
    for i, t in enumerate(xs):
        rest_t = t.shape[:axis] + t.shape[axis + 1:]
        rest_0 = first.shape[:axis] + first.shape[axis + 1:]
        if t.ndim != first.ndim or not dims.same_shape(rest_t, rest_0):
            raise VkumdValueError(f"concat: xs[{i}] has shape {format_shape(t.shape)}, which "
                                  f"differs from xs[0]'s {format_shape(first.shape)} off "
                                  f"axis {attrs['axis']}")
        total = total + t.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return [TensorType(tuple(shape), dt)]


def _concat_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    concat(ins, attrs_of(node)["axis"], out=outs[0])


def _concat_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    return host_tensor(ctx, xs[0].dtype, np.concatenate([x.numpy() for x in xs],
                                                        attrs["axis"]))


define("concat", ("xs*",), {"axis": REQUIRED}, rule=_concat_rule,
       reference=lambda a, attrs, s: [np.concatenate(a, axis=attrs["axis"])],
       lower=_concat_lower, host=_concat_host, eager=concat)


def _split_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    axis = axis_of("split", attrs["axis"], x.ndim)
    sizes = attrs["sizes"]
    if not isinstance(sizes, (tuple, list)) or not sizes:
        raise VkumdTypeError(f"split: sizes must be a non-empty tuple, not {sizes!r}")
    parts = [as_dim(s) for s in sizes]
    if not dims.same(sum(parts[1:], parts[0]), x.shape[axis]):
        raise VkumdValueError(f"split: sizes {tuple(str(p) for p in parts)} do not add up to "
                              f"axis {attrs['axis']}'s {x.shape[axis]}")
    out = []
    for p in parts:
        shape = list(x.shape)
        shape[axis] = p
        out.append(TensorType(tuple(shape), x.dtype))
    return out


def _split_reference(args: list[Any], attrs: dict[str, Any], shapes: Any
                     ) -> list[np.ndarray]:
    axis = attrs["axis"]
    bounds = np.cumsum([s[axis] for s in shapes])[:-1]
    return list(np.split(args[0], bounds, axis=axis))


def _split_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    # split allocates its pieces; the graph's pieces already have their tensors, so
    # each is the same window copy written into its own output.
    x = ins[0]
    axis = attrs_of(node)["axis"] % x.ndim
    start = 0
    for piece in outs:
        stop = start + piece.shape[axis]
        slice(x, [start], [stop], [axis], out=piece)
        start = stop


def _split_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> list[Tensor]:
    axis = attrs["axis"] % xs[0].ndim
    cuts = np.cumsum([s[axis] for s in shapes])[:-1]
    return [host_tensor(ctx, xs[0].dtype, part) for part in np.split(xs[0].numpy(), cuts, axis)]


define("split", ("x",), {"axis": REQUIRED, "sizes": REQUIRED}, rule=_split_rule,
       reference=_split_reference, lower=_split_lower, host=_split_host)


def _slice_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    axis = axis_of("slice", attrs["axis"], x.ndim)
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise VkumdTypeError(f"slice: {what} must be an int or None, not {v!r}")
    if step is None or step == 0:
        raise VkumdValueError(f"slice: step must be a nonzero int, got {step}")
    # None starts at the end for a negative step, as Python's slices.
    start = 0 if start is None and step > 0 else start
    size = dims.resolve(x.shape[axis])
    if isinstance(size, int):
        length: int | Dim = len(range(*builtins.slice(start, stop, step).indices(size)))
    else:
        # A symbolic axis cannot be clamped: the slice is taken to lie inside it.
        if step != 1:
            raise VkumdValueError(f"slice: step {step} along symbolic axis {size} is not "
                                  "supported")
        lo = start if start >= 0 else size + start
        hi = size if stop is None else (stop if stop >= 0 else size + stop)
        length = hi - lo
        if isinstance(length, int) and length < 0:
            raise VkumdValueError(f"slice: [{start}:{stop}] is empty or reversed")
    shape = list(x.shape)
    shape[axis] = length
    return [TensorType(tuple(shape), x.dtype)]


def _slice_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    x = args[0]
    index = [builtins.slice(None)] * x.ndim
    index[attrs["axis"]] = builtins.slice(attrs["start"], attrs["stop"], attrs["step"])
    return [x[tuple(index)]]


def _slice_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    x = ins[0]
    at = attrs_of(node)
    axis = at["axis"] % x.ndim
    step = at["step"]
    if step != 1:
        # Any other step (negative ones too) is a strided view of x, which one strided-copy
        # launch moves into the output.
        index = [builtins.slice(None)] * x.ndim
        index[axis] = builtins.slice(at["start"], at["stop"], step)
        view = x[tuple(index)]
        try:
            copy_into("slice", outs[0], view)
        finally:
            view.release()
        return
    start, stop, _ = builtins.slice(at["start"], at["stop"], step).indices(x.shape[axis])
    slice(x, [start], [max(start, stop)], [axis], out=outs[0])


def _slice_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    x = xs[0]
    return host_tensor(ctx, x.dtype, _slice_reference([x.numpy()], attrs, shapes)[0])


define("slice", ("x",), {"axis": REQUIRED, "start": 0, "stop": None, "step": 1},
       rule=_slice_rule, reference=_slice_reference, lower=_slice_lower,
       host=_slice_host, eager=slice)
