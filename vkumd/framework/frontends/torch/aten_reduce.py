"""The aten reductions: ``sum``, ``mean``, ``amax``, ``amin``, ``prod``, ``var``, ``std``,
``logsumexp``, ``argmax``, ``argmin``, ``any`` and ``all`` over any set of axes, with
``keepdim``, each one vkumd reduction (``opset/reductions.py`` reads a contiguous run of axes
in place; ``opset/any_all.py`` builds any/all on them).
Registered into :data:`~.aten_map.HANDLERS` on import.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import fx

from vkumd.framework.frontends.torch.aten_map import Handler, arg, aten, meta, on
from vkumd.framework.graph.dims import product
from vkumd.framework.graph.ir import Value


def _input_meta(node: fx.Node) -> Any:
    return meta(node.args[0]) if node.args else None


def _float_reduction(node: fx.Node) -> str | None:
    """Refuse what vkumd's reductions do not take: a non-float or 0-d input, a dtype=."""
    x = _input_meta(node)
    if x is None or not x.dtype.is_floating_point:
        return "needs a floating-point input"
    if x.dim() == 0:
        return "reduces a 0-d tensor"
    if node.kwargs.get("dtype") is not None:
        return "takes a dtype"
    return None


def _dims(dims: Any) -> Any:
    """aten's dim argument as the ops' ``dim``: None or an empty list is every axis."""
    if dims is None or (isinstance(dims, (list, tuple)) and not dims):
        return None
    return tuple(int(d) for d in dims) if isinstance(dims, (list, tuple)) else int(dims)


def _reduce(op: str) -> Handler:
    def handle(cv: Any, node: fx.Node, x: Value, dims: Any = None, keepdim: bool = False,
               *rest: Any, **kwargs: Any) -> Value:
        return cv.b.op(op, x, dim=_dims(dims), keepdims=bool(keepdim))
    return handle


def _reduce_all(op: str) -> Handler:
    def handle(cv: Any, node: fx.Node, x: Value, *rest: Any, **kwargs: Any) -> Value:
        return cv.b.op(op, x, dim=None, keepdims=False)
    return handle


def _dtype_positional(node: fx.Node) -> str | None:
    # sum.dim_IntList / mean.dim / prod.dim_int take dtype as their fourth argument.
    if arg(node, 3, "dtype") is not None:
        return "takes a dtype"
    return _float_reduction(node)


def _dtype_first(node: fx.Node) -> str | None:
    # sum.default / mean.default / prod.default take dtype as their second argument.
    if arg(node, 1, "dtype") is not None:
        return "takes a dtype"
    return _float_reduction(node)


on(aten.sum.dim_IntList, check=_dtype_positional)(_reduce("sum"))
on(aten.mean.dim, check=_dtype_positional)(_reduce("mean"))
on(aten.prod.dim_int, check=_dtype_positional)(_reduce("prod"))
on(aten.sum.default, check=_dtype_first)(_reduce_all("sum"))
on(aten.mean.default, check=_dtype_first)(_reduce_all("mean"))
on(aten.prod.default, check=_dtype_first)(_reduce_all("prod"))
on(aten.amax.default, check=_float_reduction)(_reduce("max"))
on(aten.amin.default, check=_float_reduction)(_reduce("min"))
on(aten.logsumexp.default, check=_float_reduction)(_reduce("logsumexp"))


def _moment(op: str) -> Handler:
    def handle(cv: Any, node: fx.Node, x: Value, dims: Any = None, *rest: Any,
               correction: Any = None, keepdim: bool = False) -> Value:
        return cv.b.op(op, x, dim=_dims(dims), keepdims=bool(keepdim),
                       correction=1 if correction is None else correction)
    return handle


on(aten.var.correction, check=_float_reduction)(_moment("var"))
on(aten.std.correction, check=_float_reduction)(_moment("std"))


def _arg(op: str) -> Handler:
    def handle(cv: Any, node: fx.Node, x: Value, dim: Any = None, keepdim: bool = False
               ) -> Value:
        # int64 indices run as int32, as every int64 does here (dims.py).
        if dim is None:  # over the flattened tensor
            flat = cv.b.op(op, cv.b.reshape(x, (product(x.shape),)), axis=0)
            return cv.b.reshape(flat, (1,) * len(x.shape)) if keepdim else flat
        return cv.b.op(op, x, axis=int(dim), keepdims=bool(keepdim))
    return handle


on(aten.argmax.default)(_arg("argmax"))
on(aten.argmin.default)(_arg("argmin"))


def _unbiased(op: str) -> Handler:
    # var.dim/std.dim(x, dim, unbiased=True, keepdim=False): unbiased is correction 1 or 0.
    def handle(cv: Any, node: fx.Node, x: Value, dims: Any = None, unbiased: bool = True,
               keepdim: bool = False) -> Value:
        return cv.b.op(op, x, dim=_dims(dims), keepdims=bool(keepdim),
                       correction=1 if unbiased else 0)
    return handle


def _unbiased_all(op: str) -> Handler:
    def handle(cv: Any, node: fx.Node, x: Value, unbiased: bool = True) -> Value:
        return cv.b.op(op, x, dim=None, keepdims=False, correction=1 if unbiased else 0)
    return handle


on(aten.var.dim, check=_float_reduction)(_unbiased("var"))
on(aten.std.dim, check=_float_reduction)(_unbiased("std"))
on(aten.var.default, check=_float_reduction)(_unbiased_all("var"))
on(aten.std.default, check=_float_reduction)(_unbiased_all("std"))


def _truth_input(node: fx.Node) -> str | None:
    """Refuse what vkumd's any/all do not take: 8-bit and other inputs that are not float,
    int32 or bool (int64 runs as int32)."""
    x = _input_meta(node)
    if x is None or not (x.dtype.is_floating_point
                         or x.dtype in (torch.int32, torch.int64, torch.bool)):
        return "needs a floating-point, bool or int32/int64 input (vkumd's any/all)"
    return None


on(aten.any.dims, check=_truth_input)(_reduce("any"))
on(aten.all.dims, check=_truth_input)(_reduce("all"))
on(aten.any.dim, check=_truth_input)(_reduce("any"))
on(aten.all.dim, check=_truth_input)(_reduce("all"))
on(aten.any.default, check=_truth_input)(_reduce_all("any"))
on(aten.all.default, check=_truth_input)(_reduce_all("all"))
