"""The aten ops that cut, join, fill, compare and pick (handlers as in :mod:`.aten_map`):
``slice``, ``select``, ``cat``, ``stack``, ``split``, ``unbind``, ``roll``, the ``zeros``/
``ones``/``full`` family, comparisons, ``where``, ``masked_fill``, ``logical_not``, ``topk``,
``sort``, ``max``/``min`` along a dim, ``index_select`` and ``baddbmm``. Registered into
:data:`~.aten_map.HANDLERS` on import.

Each maps onto IR ops vkumd already has (``slice``, ``concat``, ``split``, the comparisons,
``where``, ``topk``, ``sort``, the reductions, ``embedding``, ``matmul``); fills become
constants, so their shapes must be static. Comparisons give bool, as torch's; indices come
back int32 (torch's int64, as :mod:`.dims` maps it).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch
from torch import fx

from vkumd.compiler.kernels.limits import TOPK_MAX_K
from vkumd.framework.frontends.torch.aten_map import arg, aten, meta, on
from vkumd.framework.frontends.torch.dims import IR_DTYPES, dim_of, is_static, shape_of
from vkumd.framework.graph.ir import Value

# torch writes "to the end" as the largest int64; anything past the axis is the same.
_TO_END = sys.maxsize


def _static_axis(node: fx.Node, dim: int) -> int | None:
    """The length of ``dim`` of the node's first input, or None when it is symbolic."""
    src = meta(node.args[0])
    if src is None:
        return None
    size = dim_of(src.shape[dim])
    return size if isinstance(size, int) else None


# -- cutting ---------------------------------------------------------------------------------

def _slice_check(node: fx.Node) -> str | None:
    dim = int(arg(node, 1, "dim", 0))
    start, end = arg(node, 2, "start"), arg(node, 3, "end")
    step = arg(node, 4, "step", 1)
    if not all(v is None or isinstance(v, int) for v in (start, end, step)):
        return "slice bounds computed at run time"
    if step != 1:  # the IR's slice has no device form for other steps yet
        return f"a slice with step {step}"
    if _static_axis(node, dim) is None and ((start or 0) < 0 or end not in (None, _TO_END)):
        return "a slice of a symbolic axis other than x[a:]"
    return None


def _bounds(length: int | None, start: int | None, end: int | None) -> tuple[int, int | None]:
    """torch's clamped [start, end) on an axis of ``length`` (None: symbolic, start >= 0)."""
    start = start or 0
    if length is None:
        return start, None
    if start < 0:
        start += length
    if end is None or end >= _TO_END:
        end = length
    elif end < 0:
        end += length
    start = min(max(start, 0), length)
    return start, min(max(end, start), length)


@on(aten.slice.Tensor, check=_slice_check)
def _slice(cv: Any, node: fx.Node, x: Value, dim: int = 0, start: int | None = None,
           end: int | None = None, step: int = 1) -> Value:
    dim = dim % len(x.shape)
    begin, stop = _bounds(_static_axis(node, dim), start, end)
    if stop is not None and begin == 0 and stop == _static_axis(node, dim) and step == 1:
        return x
    return cv.b.slice(x, dim, begin, stop, step)


def _select_check(node: fx.Node) -> str | None:
    if _static_axis(node, int(node.args[1])) is None:
        return "selects along a symbolic axis"
    return None


@on(aten.select.int, check=_select_check)
def _select(cv: Any, node: fx.Node, x: Value, dim: int, index: int) -> Value:
    dim = dim % len(x.shape)
    index = index % _static_axis(node, dim)
    row = cv.b.slice(x, dim, index, index + 1)
    return cv.b.reshape(row, list(shape_of(meta(node).shape)))


def _split_check(node: fx.Node) -> str | None:
    if _static_axis(node, int(arg(node, 2, "dim", 0))) is None:
        return "splits a symbolic axis"
    return None


def _pieces(cv: Any, node: fx.Node, x: Value, sizes: list[int], dim: int) -> tuple[Value, ...]:
    sizes = [s for s in sizes if s > 0] if len(sizes) > 1 else sizes
    if len(sizes) == 1:
        return (x,)
    return tuple(cv.b.split(x, sizes, dim))


@on(aten.split.Tensor, check=_split_check)
def _split(cv: Any, node: fx.Node, x: Value, size: int, dim: int = 0) -> tuple[Value, ...]:
    length = _static_axis(node, dim)
    sizes = [min(size, length - s) for s in range(0, length, size)] or [0]
    return _pieces(cv, node, x, sizes, dim)


@on(aten.split_with_sizes.default, check=_split_check)
def _split_sizes(cv: Any, node: fx.Node, x: Value, sizes: Any, dim: int = 0
                 ) -> tuple[Value, ...]:
    return _pieces(cv, node, x, [int(s) for s in sizes], dim)


def _unbind_check(node: fx.Node) -> str | None:
    if _static_axis(node, int(arg(node, 1, "dim", 0))) is None:
        return "unbinds a symbolic axis"
    return None


@on(aten.unbind.int, check=_unbind_check)
def _unbind(cv: Any, node: fx.Node, x: Value, dim: int = 0) -> tuple[Value, ...]:
    dim = dim % len(x.shape)
    length = _static_axis(node, dim)
    rest = [d for i, d in enumerate(x.shape) if i != dim]
    parts = (x,) if length == 1 else cv.b.split(x, [1] * length, dim)
    return tuple(cv.b.reshape(p, rest) for p in parts)


def _roll_check(node: fx.Node) -> str | None:
    dims = arg(node, 2, "dims", [])
    if len(dims) == 0:
        return "rolls the flattened tensor"
    val = meta(node)
    if val is None or not is_static(val.shape):
        return "rolls a symbolic shape"
    return None


@on(aten.roll.default, check=_roll_check)
def _roll(cv: Any, node: fx.Node, x: Value, shifts: Any, dims: Any = ()) -> Value:
    for shift, dim in zip(shifts, dims, strict=True):
        dim = dim % len(x.shape)
        length = int(x.shape[dim])
        shift %= length
        if shift:
            x = cv.b.concat([cv.b.slice(x, dim, length - shift, length),
                             cv.b.slice(x, dim, 0, length - shift)], dim)
    return x


# -- joining ---------------------------------------------------------------------------------

def _join_check(node: fx.Node) -> str | None:
    parts = node.args[0]
    if not isinstance(parts, (list, tuple)) or not parts:
        return "joins no tensors"
    val = meta(node)
    if val is None or val.dtype not in IR_DTYPES:
        return "joins a dtype vkumd does not store"
    if any(meta(p) is not None and meta(p).numel() == 0 and meta(p).dim() == 1 for p in parts):
        return "joins torch's legacy empty tensors"
    return None


@on(aten.cat.default, check=_join_check)
def _cat(cv: Any, node: fx.Node, parts: Any, dim: int = 0) -> Value:
    values = [cv.promote(node, p) for p in parts]
    return values[0] if len(values) == 1 else cv.b.concat(values, dim)


@on(aten.stack.default, check=_join_check)
def _stack(cv: Any, node: fx.Node, parts: Any, dim: int = 0) -> Value:
    out = list(shape_of(meta(node).shape))
    dim = dim % len(out)
    one = out[:dim] + [1] + out[dim + 1:]
    values = [cv.b.reshape(cv.promote(node, p), one) for p in parts]
    return values[0] if len(values) == 1 else cv.b.concat(values, dim)


# -- fills -----------------------------------------------------------------------------------

def _fill_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not is_static(val.shape):
        return "fills a symbolic shape"
    if val.dtype not in IR_DTYPES:
        return f"fills {val.dtype}"
    return None


def _fill(value: Any) -> Any:
    def handle(cv: Any, node: fx.Node, *args: Any, **kwargs: Any) -> Value:
        val = meta(node)
        number = value if value is not None else args[1]
        data = np.full([int(d) for d in val.shape], number)
        return cv.b.constant(data, IR_DTYPES[val.dtype], name=str(node.target).split(".")[1])
    return handle


for _target, _value in ((aten.zeros_like.default, 0), (aten.ones_like.default, 1),
                        (aten.zeros.default, 0), (aten.ones.default, 1),
                        (aten.full_like.default, None), (aten.full.default, None),
                        (aten.new_zeros.default, 0), (aten.new_ones.default, 1)):
    on(_target, check=_fill_check)(_fill(_value))


# -- comparing and choosing -------------------------------------------------------------------

def _operands(cv: Any, node: fx.Node, a: Any, b: Any) -> tuple[Any, Any]:
    """Both sides of a comparison in the type torch compares them in."""
    types = [meta(v).dtype for v in node.args[:2]
             if isinstance(v, fx.Node) and meta(v) is not None]
    if len(types) == 2 and types[0] != types[1]:
        common = torch.promote_types(*types)
        a, b = cv.cast_to(a, common), cv.cast_to(b, common)
    return a, b


def _compare_check(node: fx.Node) -> str | None:
    for v in node.args[:2]:
        val = meta(v) if isinstance(v, fx.Node) else None
        if isinstance(v, fx.Node) and (val is None or val.dtype not in IR_DTYPES):
            return "compares a dtype vkumd does not store"
        if not isinstance(v, (fx.Node, int, float, bool)):
            return "compares with a computed number"
    return None


def _compare(op: str) -> Any:
    def handle(cv: Any, node: fx.Node, a: Any, b: Any) -> Value:
        return cv.b.compare(op, *_operands(cv, node, a, b))
    return handle


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    on(getattr(aten, _name).Tensor, getattr(aten, _name).Scalar,
       check=_compare_check)(_compare(_name))


@on(aten.logical_not.default, check=_compare_check)
def _logical_not(cv: Any, node: fx.Node, x: Value) -> Value:
    return cv.b.eq(x, 0)


def _where_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or val.dtype not in IR_DTYPES:
        return "chooses a dtype vkumd does not store"
    return None


def _as_mask(cv: Any, mask: Value) -> Value:
    return cv.cast_to_ir(mask, "bool")


@on(aten.where.self, aten.where.ScalarOther, aten.where.ScalarSelf, aten.where.Scalar,
    check=_where_check)
def _where(cv: Any, node: fx.Node, cond: Value, a: Any, b: Any) -> Value:
    a, b = cv.promote(node, a), cv.promote(node, b)
    if not isinstance(a, Value) and not isinstance(b, Value):  # two numbers: type one
        a = cv.b.constant(np.asarray(a), IR_DTYPES[meta(node).dtype], name="choice")
    return cv.b.where(_as_mask(cv, cond), a, b)


@on(aten.masked_fill.Scalar, aten.masked_fill.Tensor, check=_where_check)
def _masked_fill(cv: Any, node: fx.Node, x: Value, mask: Value, value: Any) -> Value:
    return cv.b.where(_as_mask(cv, mask), cv.promote(node, value), x)


# -- picking ---------------------------------------------------------------------------------

def _float_input(node: fx.Node) -> str | None:
    src = meta(node.args[0])
    if src is None or not src.dtype.is_floating_point:
        return "needs a floating-point input"
    return None


def _topk_check(node: fx.Node) -> str | None:
    k = arg(node, 1, "k")
    if not isinstance(k, int):
        return "k computed at run time"
    if k > TOPK_MAX_K:
        return f"k={k} is over the kernel's {TOPK_MAX_K}"
    return _float_input(node)


@on(aten.topk.default, check=_topk_check)
def _topk(cv: Any, node: fx.Node, x: Value, k: int, dim: int = -1, largest: bool = True,
          sorted: bool = True) -> tuple[Value, Value]:
    return cv.b.topk(x, k=int(k), axis=int(dim), largest=bool(largest), sorted=True)


def _sort_check(node: fx.Node) -> str | None:
    length = _static_axis(node, int(arg(node, 1, "dim", -1)))
    if length is None or length > TOPK_MAX_K:
        return f"sorts more than {TOPK_MAX_K} entries or a symbolic axis"
    return _float_input(node)


@on(aten.sort.default, check=_sort_check)
def _sort(cv: Any, node: fx.Node, x: Value, dim: int = -1, descending: bool = False
          ) -> tuple[Value, Value]:
    return cv.b.sort(x, axis=int(dim), descending=bool(descending))


def _extreme(reduce: str, pick: str) -> Any:
    # max.dim / min.dim: the values and the index of the first extreme, as torch gives them.
    def handle(cv: Any, node: fx.Node, x: Value, dim: int, keepdim: bool = False
               ) -> tuple[Value, Value]:
        return (cv.b.op(reduce, x, dim=int(dim), keepdims=bool(keepdim)),
                cv.b.op(pick, x, axis=int(dim), keepdims=bool(keepdim)))
    return handle


on(aten.max.dim, check=_float_input)(_extreme("max", "argmax"))
on(aten.min.dim, check=_float_input)(_extreme("min", "argmin"))


def _index_select_check(node: fx.Node) -> str | None:
    src = meta(node.args[0])
    if src is None or src.dim() != 2 or int(node.args[1]) not in (0, -2):
        return "selects rows of a matrix only"
    return _float_input(node)


@on(aten.index_select.default, check=_index_select_check)
def _index_select(cv: Any, node: fx.Node, x: Value, dim: int, index: Value) -> Value:
    # Rows of a matrix by index: the embedding lookup (out-of-range ids read zeros).
    return cv.b.embedding(cv.cast_to_ir(index, "int32"), x)


def _baddbmm_check(node: fx.Node) -> str | None:
    val = meta(node)
    if val is None or not val.dtype.is_floating_point:
        return "needs floating-point tensors"
    if any(not isinstance(node.kwargs.get(k, 1), (int, float)) for k in ("beta", "alpha")):
        return "beta and alpha must be numbers"
    return None


@on(aten.baddbmm.default, check=_baddbmm_check)
def _baddbmm(cv: Any, node: fx.Node, acc: Value, a: Value, b: Value, *,
             beta: float = 1, alpha: float = 1) -> Value:
    product = cv.b.matmul(a, b, alpha=float(alpha))
    if beta == 0:
        return product
    return cv.b.add(product, acc if beta == 1 else cv.b.scale(acc, float(beta)))
