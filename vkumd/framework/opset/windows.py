"""Windows along one axis: slice (Python's clamping; steps >= 1), concat and split. They
lower to the strided copies eager code runs (:func:`vkumd.ops.slice`, :func:`vkumd.ops.concat`);
a slice with a step has no single launch, so it runs on the host (it moves stored values
only, so that is exact)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, as_dim, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, axis_of, same_dtype
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops import slicing as ops
from vkumd.framework.opset.common import attrs_of, host_tensor
from vkumd.framework.tensor import Tensor


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
    ops.concat(ins, attrs_of(node)["axis"], out=outs[0])


def _concat_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    return host_tensor(ctx, xs[0].dtype, np.concatenate([x.numpy() for x in xs],
                                                        attrs["axis"]))


define("concat", ("xs*",), {"axis": REQUIRED}, rule=_concat_rule,
       reference=lambda a, attrs, s: [np.concatenate(a, axis=attrs["axis"])],
       lower=_concat_lower, host=_concat_host, eager=ops.concat)


def _split_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
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
    # ops.split allocates its pieces; the graph's pieces already have their tensors, so
    # each is the same window copy written into its own output.
    x = ins[0]
    axis = attrs_of(node)["axis"] % x.ndim
    start = 0
    for piece in outs:
        stop = start + piece.shape[axis]
        ops.slice(x, [start], [stop], [axis], out=piece)
        start = stop


def _split_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> list[Tensor]:
    axis = attrs["axis"] % xs[0].ndim
    cuts = np.cumsum([s[axis] for s in shapes])[:-1]
    return [host_tensor(ctx, xs[0].dtype, part) for part in np.split(xs[0].numpy(), cuts, axis)]


define("split", ("x",), {"axis": REQUIRED, "sizes": REQUIRED}, rule=_split_rule,
       reference=_split_reference, lower=_split_lower, host=_split_host)


def _slice_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    axis = axis_of("slice", attrs["axis"], x.ndim)
    start, stop, step = attrs["start"], attrs["stop"], attrs["step"]
    start = 0 if start is None else start
    for what, v in (("start", start), ("stop", stop), ("step", step)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
            raise VkumdTypeError(f"slice: {what} must be an int or None, not {v!r}")
    if step is None or step < 1:
        raise VkumdValueError(f"slice: step must be >= 1, got {step}")
    size = dims.resolve(x.shape[axis])
    if isinstance(size, int):
        length: int | Dim = len(range(*slice(start, stop, step).indices(size)))
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
    start, stop, _ = builtins.slice(at["start"], at["stop"], at["step"]).indices(x.shape[axis])
    ops.slice(x, [start], [max(start, stop)], [axis], out=outs[0])


def _slice_steps(node: Node) -> str | None:
    step = attrs_of(node)["step"]
    if step != 1:
        return (f"slice with step {step} has no recorded form yet (the copy kernel reads "
                "unit steps); it runs on the host")
    return None


def _slice_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    x = xs[0]
    return host_tensor(ctx, x.dtype, _slice_reference([x.numpy()], attrs, shapes)[0])


define("slice", ("x",), {"axis": REQUIRED, "start": 0, "stop": None, "step": 1},
       rule=_slice_rule, reference=_slice_reference, lower=_slice_lower,
       refuse=_slice_steps, host=_slice_host, eager=ops.slice)
