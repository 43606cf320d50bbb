"""Converters of the layout and shape operators.

Shape arithmetic is done here, at import time: ``Shape`` gives a known vector (ints and
symbolic dims), and Gather, Concat, Slice, Unsqueeze, Cast and the arithmetic ops fold it, so
the ``Shape -> Gather -> Concat -> Reshape`` chains exporters write end as one reshape.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import NeedsConstant, OnHost, Unsupported
from vkumd.framework.frontends.onnx.fold import check_fold
from vkumd.framework.frontends.onnx.state import Bound, State, converter, is_symbolic, tidy
from vkumd.framework.graph import Dim, Value, product

_INT64_MAX = np.iinfo(np.int64).max


def _axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < ndim:
        raise Unsupported(f"axis {axis} is out of range for {ndim} dimensions")
    return axis % ndim


def _axes(st: State, node: onnx.NodeProto, attrs: dict[str, Any], index: int = 1
          ) -> list[int] | None:
    """``axes`` from the attribute (older opsets) or the input at ``index``; None if absent."""
    if "axes" in attrs:
        return list(attrs["axes"])
    if st.present(node, index):
        return st.ints(node.input[index], "axes")
    return None


def _reshape(st: State, name: str, shape: tuple[int | Dim, ...]) -> Bound:
    known = st.known(name)
    if known is not None:
        if any(isinstance(d, Dim) for d in shape):
            raise Unsupported("reshaping a known array to a symbolic shape")
        return known.reshape(shape)
    x = st.value(name)
    return x if tuple(x.shape) == tuple(shape) else st.b.reshape(x, shape)


@converter("Identity")
def identity(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The input itself."""
    return [st.env[node.input[0]]]


@converter("Constant", attrs=("value", "value_float", "value_floats", "value_int",
                              "value_ints"))
def constant(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A known array from the node's one attribute."""
    if "value" in attrs:
        return [numpy_helper.to_array(attrs["value"])]
    if "value_float" in attrs:
        return [np.asarray(attrs["value_float"], np.float32)]
    if "value_floats" in attrs:
        return [np.asarray(attrs["value_floats"], np.float32)]
    if "value_int" in attrs:
        return [np.asarray(attrs["value_int"], np.int64)]
    if "value_ints" in attrs:
        return [np.asarray(attrs["value_ints"], np.int64)]
    raise Unsupported("a Constant without a value")


@converter("Shape", attrs=("start", "end"), derived=True)
def shape(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The input's shape as a known vector (symbolic dims kept)."""
    dims = list(st.shape(node.input[0]))
    picked = dims[slice(attrs.get("start", 0), attrs.get("end"))]
    vector = np.empty(len(picked), dtype=object)  # filled in place: numpy would unpack Dims
    vector[:] = picked
    return [tidy(vector)]


@converter("Size", derived=True)
def size(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The input's element count as a known int64 scalar (symbolic when a dimension is)."""
    count = np.empty((), dtype=object)  # filled in place, as Shape's vector is
    count[()] = product(list(st.shape(node.input[0])))
    return [tidy(count)]


@converter("Reshape", attrs=("allowzero",))
def reshape(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Reshape to a known shape; a 0 copies the input's dimension (unless allowzero)."""
    target = st.dims(node.input[1], "Reshape's shape")
    src = st.shape(node.input[0])
    if not attrs.get("allowzero", 0):
        target = [src[i] if (isinstance(d, int) and d == 0) else d
                  for i, d in enumerate(target)]
    if -1 in [d for d in target if isinstance(d, int)]:
        known = product(src)
        rest = product([d for d in target if not (isinstance(d, int) and d == -1)])
        if isinstance(known, int) and isinstance(rest, int) and rest:
            target = [known // rest if (isinstance(d, int) and d == -1) else d
                      for d in target]
    if st.known(node.input[0]) is not None:
        return [_reshape(st, node.input[0], tuple(target))]
    x = st.value(node.input[0])
    return [st.b.reshape(x, target)]


@converter("Flatten", attrs=("axis",))
def flatten(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``[prod(shape[:axis]), prod(shape[axis:])]``."""
    src = st.shape(node.input[0])
    axis = attrs.get("axis", 1)
    axis = axis + len(src) if axis < 0 else axis
    if not 0 <= axis <= len(src):
        raise Unsupported(f"axis {attrs.get('axis')} is out of range")
    return [_reshape(st, node.input[0], (product(src[:axis]), product(src[axis:])))]


@converter("Unsqueeze", attrs=("axes",))
def unsqueeze(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Insert dimensions of one."""
    axes = _axes(st, node, attrs)
    if axes is None:
        raise Unsupported("Unsqueeze needs axes")
    src = list(st.shape(node.input[0]))
    ndim = len(src) + len(axes)
    out: list[int | Dim] = []
    new = {_axis(a, ndim) for a in axes}
    rest = iter(src)
    for i in range(ndim):
        out.append(1 if i in new else next(rest))
    return [_reshape(st, node.input[0], tuple(out))]


@converter("Squeeze", attrs=("axes",))
def squeeze(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Drop dimensions of one (all of them when no axes are given)."""
    src = st.shape(node.input[0])
    axes = _axes(st, node, attrs)
    drop = ({i for i, d in enumerate(src) if d == 1} if axes is None
            else {_axis(a, len(src)) for a in axes})
    if any(src[i] != 1 for i in drop):
        raise Unsupported(f"squeezing axes {sorted(drop)} of shape {src}, not all of size 1")
    return [_reshape(st, node.input[0], tuple(d for i, d in enumerate(src) if i not in drop))]


@converter("Transpose", attrs=("perm",))
def transpose(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A permutation (default: reversed axes)."""
    ndim = len(st.shape(node.input[0]))
    perm = list(attrs.get("perm", range(ndim - 1, -1, -1)))
    known = st.known(node.input[0])
    if known is not None:
        return [np.transpose(known, perm)]
    x = st.value(node.input[0])
    return [x if perm == list(range(ndim)) else st.b.permute(x, perm)]


@converter("Concat", attrs=("axis",))
def concat(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Join along ``axis``; known pieces (shape vectors) join at import time."""
    names = [n for n in node.input if n]
    knowns = [st.known(n) for n in names]
    if all(k is not None for k in knowns):
        ndim = knowns[0].ndim
        return [tidy(np.concatenate(knowns, axis=_axis(attrs["axis"], ndim)))]
    values = [st.value(n) for n in names]
    axis = _axis(attrs["axis"], len(values[0].shape))
    values = [v for v in values if v.shape[axis] != 0] or values[:1]
    return [values[0] if len(values) == 1 else st.b.concat(values, axis)]


def _split_sizes(st: State, node: onnx.NodeProto, attrs: dict[str, Any], length: Any
                 ) -> list[Any]:
    if "split" in attrs:
        return list(attrs["split"])
    if st.present(node, 1):
        return st.ints(node.input[1], "split")
    parts = attrs.get("num_outputs", len(node.output))
    if not isinstance(length, int):
        if parts == 1:
            return [length]
        raise Unsupported("an even Split of a symbolic axis")
    chunk = -(-length // parts)
    return [min(chunk, length - i * chunk) for i in range(parts)]


@converter("Split", attrs=("axis", "split", "num_outputs"))
def split(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Cut along ``axis`` by explicit sizes or into equal parts (the last may be shorter)."""
    src = st.shape(node.input[0])
    axis = _axis(attrs.get("axis", 0), len(src))
    sizes = _split_sizes(st, node, attrs, src[axis])
    known = st.known(node.input[0])
    if known is not None:
        return list(np.split(known, np.cumsum(sizes)[:-1], axis=axis))
    x = st.value(node.input[0])
    if len(sizes) == 1:
        return [x]
    return list(st.b.split(x, sizes, axis))


def _slice_axis(st: State, x: Bound, axis: int, start: int, end: int, step: int) -> Bound:
    size = x.shape[axis]
    if step == 0:
        raise Unsupported("a Slice step of 0")
    stop: int | None = None if end >= _INT64_MAX // 2 else end
    if isinstance(size, int):
        lo, hi, _ = slice(start, stop, step).indices(size)
        if lo == 0 and hi == size and step == 1:
            return x
        # A negative step that runs past the first element has no stop index (-1 would count
        # from the end).
        stop = None if hi < 0 else hi
        start = lo
    if isinstance(x, np.ndarray):
        index = [slice(None)] * x.ndim
        index[axis] = slice(start, stop, step)
        return x[tuple(index)]
    return st.b.slice(x, axis, start, stop, step)


@converter("Slice", attrs=("starts", "ends", "axes"))
def slice_(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Slices along several axes (any nonzero steps), one IR slice per axis."""
    if "starts" in attrs:
        starts, ends = list(attrs["starts"]), list(attrs["ends"])
        axes = list(attrs.get("axes", range(len(starts))))
        steps = [1] * len(starts)
    else:
        starts = st.ints(node.input[1], "starts")
        ends = st.ints(node.input[2], "ends")
        axes = (st.ints(node.input[3], "axes") if st.present(node, 3)
                else list(range(len(starts))))
        steps = st.ints(node.input[4], "steps") if st.present(node, 4) else [1] * len(starts)
    known = st.known(node.input[0])
    x: Bound = known if known is not None else st.value(node.input[0])
    ndim = len(x.shape)
    for axis, start, end, step in zip(axes, starts, ends, steps, strict=True):
        x = _slice_axis(st, x, _axis(axis, ndim), start, end, step)
    return [tidy(x) if isinstance(x, np.ndarray) else x]


@converter("Gather", attrs=("axis",), derived=True)
def gather(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """An embedding lookup (2-D table, run-time or size-derived ids, axis 0), a
    ``gather_nd`` of the axis moved first for other run-time ids, slices for known indices,
    or folded when both sides are known."""
    if isinstance(st.env[node.input[0]], Derived):
        raise OnHost("a gather from a size-derived table")
    data, indices = st.known(node.input[0]), st.known(node.input[1])
    src = st.shape(node.input[0])
    axis = _axis(attrs.get("axis", 0), len(src))
    if data is not None and indices is not None:
        return [tidy(np.take(data, indices.astype(np.int64), axis=axis))]
    if indices is None:
        ids = st.value(node.input[1])
        if ids.dtype.name != "int32":
            raise Unsupported(f"indices of type {ids.dtype.name}")
        if axis == 0 and len(src) == 2:
            return [st.b.embedding(ids, st.value(node.input[0]))]
        return [_gather_axis(st, st.value(node.input[0]), ids, axis)]
    x = st.value(node.input[0])
    idx = [int(i) for i in indices.reshape(-1)]
    size = src[axis]
    pieces: list[Value] = []
    for i in idx:
        if isinstance(size, int):
            i = i + size if i < 0 else i
            if not 0 <= i < size:
                raise Unsupported(f"index {i} is out of range for axis {axis} of {size}")
        stop = None if i == -1 else i + 1
        pieces.append(st.b.slice(x, axis, i, stop))
    out = pieces[0] if len(pieces) == 1 else st.b.concat(pieces, axis)
    want = tuple(src[:axis]) + tuple(indices.shape) + tuple(src[axis + 1:])
    return [out if tuple(out.shape) == want else st.b.reshape(out, want)]


def _gather_axis(st: State, data: Value, ids: Value, axis: int) -> Value:
    """``take(data, ids, axis)`` for run-time ids: the axis moved first, a ``gather_nd`` of
    one-entry tuples (negative ids count from the end; ids out of range give zeros), and
    the picked dimensions moved back to where the axis was."""
    rank, k = len(data.shape), len(ids.shape)
    moved = data if axis == 0 else st.b.permute(
        data, [axis] + [d for d in range(rank) if d != axis])
    picked = st.b.gather_nd(moved, st.b.reshape(ids, (*ids.shape, 1)))
    if axis == 0 or k == 0:
        return picked
    order = [*range(k, k + axis), *range(k), *range(k + axis, k + rank - 1)]
    return st.b.permute(picked, order)


@converter("ConstantOfShape", attrs=("value",))
def constant_of_shape(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                      ) -> list[Bound | None]:
    """A known array of a known, non-symbolic shape."""
    dims = st.ints(node.input[0], "ConstantOfShape's shape")
    fill = (numpy_helper.to_array(attrs["value"]).reshape(-1) if "value" in attrs
            else np.zeros(1, np.float32))
    if any(d < 0 for d in dims) or fill.size != 1:
        raise Unsupported(f"shape {dims} and a value of {fill.size} elements (ONNX needs "
                          "non-negative dims and one value)")
    check_fold(tuple(dims), fill.dtype)
    return [np.full(dims, fill[0], dtype=fill.dtype)]


@converter("Range")
def range_(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``start + i * delta`` for ``i < max(ceil((limit - start) / delta), 0)``, folded at
    import: the output's length is the inputs' values, so they must be known then."""
    known = [st.known(n) for n in node.input[:3]]
    if len(node.input) != 3:
        raise Unsupported("Range takes start, limit and delta")
    unknown = [n for n, k in zip(node.input, known, strict=False) if k is None]
    if unknown:
        why = ("start, limit and delta must be known at import time (constants, or computed "
               "from static shapes): the length of the output depends on their values, and "
               "vkumd sizes every tensor before running")
        if len(unknown) == 1:
            # One bound from the inputs (a window's size): the model is imported again per
            # distinct value of the inputs it comes from (OnnxModel specializes it).
            raise NeedsConstant(why, unknown[0])
        raise Unsupported(why)
    start, limit, delta = (tidy(k) for k in known)
    if any(is_symbolic(v) for v in (start, limit, delta)):
        # Computed from each call's sizes on the host (a derived input), where it can be.
        raise OnHost("a range over a symbolic size")
    if any(v.size != 1 for v in (start, limit, delta)):
        raise Unsupported("start, limit and delta must be scalars")
    first, last, step = (v.reshape(()) for v in (start, limit, delta))
    if step == 0:
        raise Unsupported("delta is 0 (an endless sequence)")
    count = max(int(np.ceil((float(last) - float(first)) / float(step))), 0)
    check_fold((count,), start.dtype)
    if start.dtype.kind in "iu":
        return [(int(first) + np.arange(count, dtype=np.int64) * int(step)).astype(start.dtype)]
    return [(float(first) + np.arange(count) * float(step)).astype(start.dtype)]


# A graph value's numpy type, from its IR dtype (int64 inputs are stored as int32, whose
# integers an identity matrix of them holds the same).
_NUMPY_OF_IR = {"float32": np.float32, "float16": np.float16, "int32": np.int32,
                "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
                "bfloat16": onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16)}


@converter("EyeLike", attrs=("dtype", "k"))
def eye_like(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """A known 2-D array of the input's static shape: ones on diagonal ``k``, else zeros, of
    type ``dtype`` (default the input's)."""
    shape = st.shape(node.input[0])
    if len(shape) != 2 or any(isinstance(d, Dim) for d in shape):
        raise Unsupported(f"EyeLike of shape {list(shape)}: it takes a 2-D input of static "
                          "shape (the result is a constant)")
    if "dtype" in attrs:
        np_type = onnx.helper.tensor_dtype_to_np_dtype(attrs["dtype"])
    else:
        known = st.known(node.input[0])
        np_type = known.dtype if known is not None else _NUMPY_OF_IR[st.dtype(node.input[0])]
    check_fold(tuple(shape), np.dtype(np_type))
    return [np.eye(shape[0], shape[1], k=int(attrs.get("k", 0)), dtype=np_type)]


@converter("Expand")
def expand(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Broadcast to a known shape: folded for known data, else an add of zeros."""
    dims = st.dims(node.input[1], "Expand's shape")
    known = st.known(node.input[0])
    src = st.shape(node.input[0])
    width = max(len(src), len(dims))
    a = (1,) * (width - len(src)) + tuple(src)
    b = (1,) * (width - len(dims)) + tuple(dims)
    out = tuple(x if y == 1 else y for x, y in zip(a, b, strict=True))
    if known is not None and not any(isinstance(d, Dim) for d in out):
        check_fold(out, known.dtype)
        return [np.broadcast_to(known, out).copy()]
    x = st.value(node.input[0])
    if out == tuple(x.shape):
        return [x]
    if any(isinstance(d, Dim) for d in out):
        raise Unsupported(f"expanding {tuple(src)} to the symbolic shape {out}")
    check_fold(out, np.dtype(np.float32))  # the zeros added below are a host array
    return [st.b.add(x, st.constant(np.zeros(out, np.float32), x.dtype.name))]
