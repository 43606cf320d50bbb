"""``any`` and ``all``: whether some (every) element over ``dim`` is nonzero, as PyTorch's.

Each takes ``dim`` (an int, a tuple of ints, or None -- the default, every axis) and
``keepdim``, and gives bool, as PyTorch's. They are built from kernels
that exist rather than a kernel of their own: ``any`` is ``l1_norm(x) != 0`` (a sum of
magnitudes is zero only when every one is, and NaN or an overflow to inf is nonzero, as
PyTorch counts NaN true); ``all`` is ``sum(x == 0) == 0`` (the count of zeros; in float16 or
bfloat16 a count past the type's integers still rounds to a nonzero). int32 and bool are first
cast to float32, which keeps zero and nonzero apart. The comparison writes the bool mask.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_tensor, output
from vkumd.framework.ops.contract import concrete_rule
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.compare import eq, ne
from vkumd.framework.opset.reductions import l1_norm, reduced_axes
from vkumd.framework.opset.reductions import sum as sum_
from vkumd.framework.opset.unary import cast, fill
from vkumd.framework.tensor import Tensor

# What x may be: the floats the reductions take, and int32 and bool (cast to float32 first).
_TAKES = ("float32", "float16", "bfloat16", "int32", "bool")
_NUMPY = {"any": np.any, "all": np.all}


def _rule(op: str) -> Any:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        if x.dtype.name not in _TAKES:
            raise VkumdTypeError(f"{op}: x is {x.dtype.name}; {op} takes {', '.join(_TAKES)} "
                                 "(a uint8 or int8 mask: cast it to bool first)")
        axes = reduced_axes(op, attrs["dim"], x.ndim)
        keep = flag(op, attrs["keepdims"], "keepdims")
        shape = tuple((1 if keep else None) if i in axes else s for i, s in enumerate(x.shape))
        return [TensorType(tuple(s for s in shape if s is not None), dtypes.bool_)]
    return rule


def _reference(op: str) -> Any:
    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        x = np.asarray(a[0], np.float64)
        axis = reduced_axes(op, attrs["dim"], x.ndim)
        return [np.asarray(_NUMPY[op](x != 0, axis=axis, keepdims=attrs["keepdims"]),
                           np.float64)]
    return reference


def _reduce(op: str, x: Any, dim: Any, keepdim: Any, out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    dim = tuple(dim) if isinstance(dim, list) else dim
    (result,) = concrete_rule(op, (x,), {"dim": dim, "keepdims": keepdim})
    # A uint8 out= takes the same bytes (the mask's type before bool was stored).
    mask = dtypes.uint8 if isinstance(out, Tensor) and out.dtype is dtypes.uint8 else \
        dtypes.bool_
    out = output(op, x.context, out, result.shape, mask, (x,))
    if out.size == 0:
        return out
    if x.size == 0:  # any of nothing is false, all of nothing true: 0 != 0 and 0 == 0
        zeros = fill(x.context.empty(out.shape, dtypes.float32), 0.0)  # on the device, so
        try:  # that a captured graph records it
            return (eq if op == "all" else ne)(zeros, zeros, out=out)
        finally:
            zeros.release()
    if x.ndim == 0:  # the one element, seen as a vector (the reductions want an axis)
        dim, keepdim = None, False
    seen = x.alias((1,)) if x.ndim == 0 else x
    floats = cast(seen, "float32") if x.dtype.name in ("int32", "bool") else seen
    zero = fill(x.context.empty((1,) * len(out.shape), floats.dtype), 0.0)
    temps = [zero] + ([floats] if floats is not x else [])
    if seen is not x and seen is not floats:
        temps.append(seen)
    try:
        if op == "any":
            summary = l1_norm(floats, dim, keepdim)
            temps.append(summary)
            return ne(summary, zero, out=out)
        zeros = eq(floats, zero)
        temps.append(zeros)
        count = sum_(zeros, dim, keepdim)
        temps.append(count)
        return eq(count, zero, out=out)
    finally:
        for t in temps:
            t.release()  # back to the pool once the launches have run


def any(x: Tensor, dim: Any = None, keepdim: bool = False, *,  # noqa: A001
        keepdims: bool | None = None, out: Tensor | None = None) -> Tensor:
    """Whether any element of ``x`` over ``dim`` is nonzero (NaN counts as nonzero).

    Args:
        x: float32, float16, bfloat16, int32 or bool (0-d too, as PyTorch).
        dim: an axis, a tuple of axes, or None for every axis (the default).
        keepdim: keep the reduced axes, as 1 (``keepdims``, numpy's name, is accepted too).
        out: optional bool (or uint8) output of the result's shape.

    Returns:
        bool of ``x.shape`` without the reduced axes (with them as 1 under keepdim); an
        empty reduced set gives False.

    Raises:
        VkumdTypeError: x of another dtype, out not bool or uint8, a non-bool keepdim, a dim that is
            not an int, a tuple of ints or None.
        VkumdValueError: an axis out of range or named twice, out of the wrong shape.
    """
    return _reduce("any", x, dim, keepdim if keepdims is None else keepdims, out)


def all(x: Tensor, dim: Any = None, keepdim: bool = False, *,  # noqa: A001
        keepdims: bool | None = None, out: Tensor | None = None) -> Tensor:
    """Whether every element of ``x`` over ``dim`` is nonzero (NaN counts as nonzero).

    Args, returns and errors as :func:`any`; an empty reduced set gives True.
    """
    return _reduce("all", x, dim, keepdim if keepdims is None else keepdims, out)


def _lower(eager: Any) -> Any:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        at = attrs_of(node)
        eager(ins[0], at["dim"], keepdims=at["keepdims"], out=outs[0])
    return lower


for _op, _eager in (("any", any), ("all", all)):
    define(_op, ("x",), {"dim": None, "keepdims": False}, rule=_rule(_op),
           reference=_reference(_op), lower=_lower(_eager), eager=_eager)
