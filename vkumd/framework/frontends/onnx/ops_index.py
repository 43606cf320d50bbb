"""Converters of the index operators: GatherElements, ScatterElements (and the older
Scatter), ScatterND and Trilu onto their vkumd ops; Tile, OneHot, DepthToSpace and
SpaceToDepth as compositions of existing ops (concat, comparisons and an embedding lookup,
reshape and permute), so no kernel of their own.

Indices are int32 on the device (vkumd narrows int64, range-checked for known arrays); the
kernels count negative indices from the end and never read or write outside a tensor for an
index still out of range (a gather gives zeros, a scatter drops the update), where ONNX
calls such an index an error.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Dim, Value


def indices(st: State, name: str) -> Value:
    """An index input as int32 (known int64 arrays are narrowed, range-checked).

    Raises:
        Unsupported: indices of a type other than int32 or int64.
    """
    ids = st.value(name)
    if ids.dtype.name != "int32":
        raise Unsupported(f"indices of type {ids.dtype.name} (ONNX allows int32 and int64)")
    return ids


@converter("GatherElements", attrs=("axis",))
def gather_elements(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                    ) -> list[Bound | None]:
    """``vkumd.ops.gather_elements`` (out-of-range indices give zeros)."""
    return [st.b.gather_elements(st.value(node.input[0]), indices(st, node.input[1]),
                                 axis=attrs.get("axis", 0))]


@converter("ScatterElements", "Scatter", attrs=("axis", "reduction"))
def scatter_elements(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                     ) -> list[Bound | None]:
    """``vkumd.ops.scatter_elements``: duplicates applied in order (the last wins under
    ``none``), out-of-range indices dropped."""
    return [st.b.scatter_elements(st.value(node.input[0]), indices(st, node.input[1]),
                                  st.value(node.input[2]), axis=attrs.get("axis", 0),
                                  reduction=attrs.get("reduction", "none"))]


@converter("ScatterND", attrs=("reduction",))
def scatter_nd(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``vkumd.ops.scatter_nd``: duplicates applied in order, out-of-range tuples dropped."""
    return [st.b.scatter_nd(st.value(node.input[0]), indices(st, node.input[1]),
                            st.value(node.input[2]), reduction=attrs.get("reduction", "none"))]


@converter("Trilu", attrs=("upper",))
def trilu(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``vkumd.ops.trilu``; a ``k`` input must be known at import (a model feeding it is
    specialized on its value)."""
    k = st.ints(node.input[1], "Trilu's k") if st.present(node, 1) else [0]
    if len(k) != 1:
        raise Unsupported(f"k of {len(k)} values (ONNX takes a scalar)")
    return [st.b.trilu(st.value(node.input[0]), k=k[0], upper=bool(attrs.get("upper", 1)))]


def _repeat(st: State, x: Value, axis: int, times: int) -> Value:
    """``x`` repeated ``times`` along ``axis``: concats of doublings, log2(times) of them."""
    parts: list[Value] = []
    block = x
    while times:
        if times & 1:
            parts.append(block)
        times >>= 1
        if times:
            block = st.b.concat([block, block], axis)
    return parts[0] if len(parts) == 1 else st.b.concat(parts, axis)


@converter("Tile")
def tile(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Concats of copies along each repeated axis (stored bits copied unchanged); the
    repeats must be known at import (a model feeding them is specialized on them)."""
    x = st.value(node.input[0])
    repeats = st.ints(node.input[1], "Tile's repeats")
    if len(repeats) != len(x.shape) or any(r < 0 for r in repeats):
        raise Unsupported(f"repeats {repeats} for a {len(x.shape)}-d input (ONNX needs one "
                          "non-negative count per dimension)")
    if 0 in repeats:
        raise Unsupported("a repeat count of 0 (an empty result)")
    for axis, times in enumerate(repeats):
        if times > 1:
            x = _repeat(st, x, axis, times)
    return [x]


@converter("OneHot", attrs=("axis",))
def one_hot(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``values[1]`` where an index equals its position along the new axis (a negative index
    counting from ``depth``), ``values[0]`` elsewhere: a comparison with ``arange(depth)``
    picks row 1 or 0 of ``values`` by an embedding lookup, which copies the values' bits
    (any dtype vkumd's gathers take). ``depth`` must be known at import (a model feeding it is
    specialized on it)."""
    if st.known(node.input[1]) is None:
        raise NeedsConstant("OneHot's depth must be known at import", node.input[1])
    depth_value = st.scalar(node.input[1])
    if depth_value is None:
        raise Unsupported("a depth of other than one number")
    depth = int(depth_value)
    if depth < 1:
        raise Unsupported(f"depth {depth_value} (it must be at least 1)")
    ids = st.value(node.input[0])
    values = st.value(node.input[2])
    if tuple(values.shape) != (2,):
        raise Unsupported(f"values of shape {tuple(values.shape)} (ONNX takes [off, on])")
    rank = len(ids.shape)
    axis = attrs.get("axis", -1)
    if not -rank - 1 <= axis <= rank:
        raise Unsupported(f"axis {axis} for a {rank}-d indices (the output has {rank + 1})")
    axis %= rank + 1
    kind = ids.dtype.name
    if kind not in ("float32", "float16", "bfloat16", "int32"):
        raise Unsupported(f"indices of type {kind}")
    steps = np.arange(depth).reshape((depth,) + (1,) * (rank - axis))
    at = st.b.reshape(ids, tuple(ids.shape[:axis]) + (1,) + tuple(ids.shape[axis:]))
    one = st.constant(np.ones((), np.float32), "float32")
    zero = st.constant(np.zeros((), np.float32), "float32")
    # Two comparisons: with k and with k - depth (negative indices); at most one holds.
    hits = st.b.where(st.b.eq(at, st.constant(steps, kind)), one,
                      st.b.where(st.b.eq(at, st.constant(steps - depth, kind)), one, zero))
    rows = st.b.cast(hits, "int32")
    picked = st.b.embedding(rows, st.b.reshape(values, (2, 1)))
    return [st.b.reshape(picked, tuple(rows.shape))]


def _nchw(st: State, name: str, op: str) -> tuple[Value, Any, int, int, int]:
    x = st.value(name)
    if len(x.shape) != 4:
        raise Unsupported(f"a {len(x.shape)}-d input ({op} takes NCHW)")
    n, c, h, w = x.shape
    if any(isinstance(d, Dim) for d in (c, h, w)):
        raise Unsupported("symbolic channels or spatial sizes")
    return x, n, int(c), int(h), int(w)


def _block(attrs: dict[str, Any]) -> int:
    b = attrs.get("blocksize")
    if not isinstance(b, int) or b < 1:
        raise Unsupported(f"blocksize {b!r} (a positive int is required)")
    return b


def _mode(attrs: dict[str, Any]) -> str:
    mode = attrs.get("mode", "DCR")
    if mode not in ("DCR", "CRD"):
        raise Unsupported(f"mode {mode!r} (DCR or CRD)")
    return mode


@converter("DepthToSpace", attrs=("blocksize", "mode"))
def depth_to_space(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """Channels moved into blocks of the spatial dimensions: a reshape, a permute and a
    reshape (DCR: channels as ``[b, b, C/b^2]``; CRD: as ``[C/b^2, b, b]``)."""
    x, n, c, h, w = _nchw(st, node.input[0], "DepthToSpace")
    b = _block(attrs)
    if c % (b * b):
        raise Unsupported(f"{c} channels are not a multiple of blocksize^2 = {b * b}")
    rest = c // (b * b)
    if _mode(attrs) == "DCR":
        split, order = (n, b, b, rest, h, w), (0, 3, 4, 1, 5, 2)
    else:
        split, order = (n, rest, b, b, h, w), (0, 1, 4, 2, 5, 3)
    moved = st.b.permute(st.b.reshape(x, split), order)
    return [st.b.reshape(moved, (n, rest, h * b, w * b))]


@converter("SpaceToDepth", attrs=("blocksize", "mode"))
def space_to_depth(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """Blocks of the spatial dimensions moved into channels: a reshape, a permute and a
    reshape (DCR: channels as ``[b, b, C]``; CRD: as ``[C, b, b]``)."""
    x, n, c, h, w = _nchw(st, node.input[0], "SpaceToDepth")
    b = _block(attrs)
    if h % b or w % b:
        raise Unsupported(f"spatial size {h}x{w} is not a multiple of blocksize {b}")
    order = (0, 3, 5, 1, 2, 4) if _mode(attrs) == "DCR" else (0, 1, 3, 5, 2, 4)
    moved = st.b.permute(st.b.reshape(x, (n, c, h // b, b, w // b, b)), order)
    return [st.b.reshape(moved, (n, c * b * b, h // b, w // b))]


@converter("ReverseSequence", attrs=("batch_axis", "time_axis"))
def reverse_sequence(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                     ) -> list[Bound | None]:
    """A ``gather_elements`` along the time axis by a constant index built from the known
    ``sequence_lens`` (fed lengths specialize the model)."""
    x = st.value(node.input[0])
    lengths = st.ints(node.input[1], "sequence_lens")
    batch_axis, time_axis = int(attrs.get("batch_axis", 1)), int(attrs.get("time_axis", 0))
    if sorted((batch_axis, time_axis)) != [0, 1]:
        raise Unsupported(f"batch_axis={batch_axis}, time_axis={time_axis}: ONNX takes 0 and 1")
    if any(isinstance(d, Dim) for d in x.shape):
        raise Unsupported(f"x has symbolic dimensions {x.shape}; bind them")
    shape = tuple(int(d) for d in x.shape)
    steps, batch = shape[time_axis], shape[batch_axis]
    if len(lengths) != batch or any(not 0 <= n <= steps for n in lengths):
        raise Unsupported(f"sequence_lens={lengths} for a batch of {batch} and {steps} steps")
    t = np.arange(steps)[:, None]
    n = np.array(lengths)[None, :]
    index = np.where(t < n, n - 1 - t, t)  # [time, batch]
    if time_axis == 1:
        index = index.T
    index = np.broadcast_to(index.reshape(index.shape + (1,) * (len(shape) - 2)), shape)
    return [st.b.gather_elements(x, st.constant(index.astype(np.int32), "int32"),
                                 axis=time_axis)]
