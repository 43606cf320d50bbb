"""Reductions over any set of axes: sum, mean, max, min, prod, sum of squares, L1 and L2
norms, logsumexp, log of the sum, variance and standard deviation.

Each op takes ``dim`` (an int, a tuple of ints, or None for every axis; the default -1, the
last axis, is the historical signature) and ``keepdim`` (``keepdims``, numpy's name, is the
record's attribute and is accepted too). Accumulation is in float32 whatever the storage
type (float64 in double, on a device with shaderFloat64: ``axis_double.comp``); the result
has the input's dtype. x is seen as ``[outer, reduced, inner]`` once axes of
size 1 are dropped and neighbouring axes merged, so one launch reduces any contiguous run of
axes in place (``reduce_plan`` picks the row kernel for ``inner == 1``, else the strided
one); only reduced axes separated by a kept one are first moved last (one permute copy).
The eager functions check their arguments with the records' rule, the one the graph applies.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import axis_double_plan
from vkumd.compiler.kernels.reduce import reduce_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, at_least_1d, flag, need_float, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.layout import permuted_view
from vkumd.framework.opset.unary import fill
from vkumd.framework.tensor import Tensor

# What an empty reduction gives, for the ops that have one (the others refuse it).
IDENTITIES = {"sum": 0.0, "prod": 1.0, "sum_square": 0.0, "l1_norm": 0.0, "l2_norm": 0.0,
              "logsumexp": -math.inf, "log_sum": -math.inf}
_CORRECTED = ("var", "std")

# (the launch's facts, the result's shape) by (op, x's shape and dtype name, the attributes
# and their types): calls the op's rule accepted.
_VERDICTS: Verdicts = {}


def reduced_axes(op: str, dim: Any, ndim: int) -> tuple[int, ...]:
    """``dim`` (an int, a sequence of ints or None: every axis) as sorted axis indices.

    Raises:
        VkumdTypeError: a ``dim`` that is not an int, a sequence of ints or None.
        VkumdValueError: an axis out of range, or named twice.
    """
    if dim is None:
        return tuple(range(ndim))
    listed = [dim] if isinstance(dim, (int, np.integer)) else dim
    if not isinstance(listed, (list, tuple)) or any(
            isinstance(d, (bool, np.bool_)) or not isinstance(d, (int, np.integer))
            for d in listed):
        raise VkumdTypeError(f"{op}: dim must be an int, a tuple of ints or None, not {dim!r}")
    axes = []
    for d in listed:
        if not -ndim <= d < ndim:
            raise VkumdValueError(f"{op}: dim {int(d)} is out of range for {ndim} dimensions")
        axes.append(int(d) % ndim)
    if len(set(axes)) != len(axes):
        raise VkumdValueError(f"{op}: dim {tuple(int(d) for d in listed)} names an axis "
                              "twice; list each axis once")
    return tuple(sorted(axes))


def _runs(shape: tuple[int, ...], axes: tuple[int, ...]) -> list[tuple[bool, int]]:
    """``shape`` as runs of (reduced?, size), axes of size 1 dropped, neighbours merged."""
    runs: list[tuple[bool, int]] = []
    for i, size in enumerate(shape):
        if size == 1:
            continue
        reduced = i in axes
        if runs and runs[-1][0] == reduced:
            runs[-1] = (reduced, runs[-1][1] * size)
        else:
            runs.append((reduced, size))
    return runs


def _launch_facts(shape: tuple[int, ...], axes: tuple[int, ...]
                  ) -> tuple[tuple[int, ...] | None, int, int, int]:
    """(the permutation to apply first or None, outer, reduced, inner) for ``shape``."""
    runs = _runs(shape, axes)
    reduced_runs = [i for i, (reduced, _) in enumerate(runs) if reduced]
    count = math.prod(shape[a] for a in axes)
    if len(reduced_runs) <= 1:
        at = reduced_runs[0] if reduced_runs else len(runs)
        inner = math.prod(size for _, size in runs[at + 1:])
        return None, math.prod(size for _, size in runs[:at]), count, inner
    order = tuple(d for d in range(len(shape)) if d not in axes) + axes
    return order, math.prod(shape) // count, count, 1


def _rule(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        if x.dtype.name != "float64":  # float64 has the double kernel
            need_float(op, x)
        at_least_1d(op, x)
        axes = reduced_axes(op, attrs["dim"], x.ndim)
        keep = flag(op, attrs["keepdims"], "keepdims")
        if op in _CORRECTED:
            c = attrs["correction"]
            if isinstance(c, (bool, np.bool_)) or not isinstance(c, (int, float, np.number)):
                raise VkumdTypeError(f"{op}: correction must be a number, not {c!r}")
        count = dims.resolve(product(tuple(x.shape[a] for a in axes)))
        rest = dims.resolve(product(tuple(s for i, s in enumerate(x.shape) if i not in axes)))
        if op not in IDENTITIES and count == 0 and rest != 0:
            raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; the {op} over "
                                  f"the empty axes {axes} is undefined")
        shape = tuple((1 if keep else None) if i in axes else s for i, s in enumerate(x.shape))
        return [TensorType(tuple(s for s in shape if s is not None), x.dtype)]
    return rule


def _logsumexp(a: np.ndarray, axis: Any, keepdims: bool) -> np.ndarray:
    top = np.max(a, axis=axis, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        found = np.log(np.sum(np.exp(a - shift), axis=axis, keepdims=True)) + shift
    return found if keepdims else np.squeeze(found, axis=axis)


_NUMPY: dict[str, Callable[..., Any]] = {
    "sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod,
    "sum_square": lambda a, axis, keepdims: np.sum(a * a, axis=axis, keepdims=keepdims),
    "l1_norm": lambda a, axis, keepdims: np.sum(np.abs(a), axis=axis, keepdims=keepdims),
    "l2_norm": lambda a, axis, keepdims: np.sqrt(np.sum(a * a, axis=axis, keepdims=keepdims)),
    "logsumexp": _logsumexp,
    "log_sum": lambda a, axis, keepdims: np.log(np.sum(a, axis=axis, keepdims=keepdims)),
}


def _reference(op: str) -> Callable[..., list[np.ndarray]]:
    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        x = np.asarray(a[0], np.float64)
        axis = reduced_axes(op, attrs["dim"], x.ndim)
        keep = attrs["keepdims"]
        with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
            # n - correction <= 0 is numpy's warning; the answer (inf or NaN) is the op's.
            warnings.simplefilter("ignore", RuntimeWarning)
            if op in _CORRECTED:
                fn = np.var if op == "var" else np.std
                found = fn(x, axis=axis, keepdims=keep, ddof=attrs["correction"])
            else:
                found = _NUMPY[op](x, axis=axis, keepdims=keep)
        return [np.asarray(found, np.float64)]
    return reference


def _keep(op: str, keepdim: Any, keepdims: Any) -> Any:
    if keepdims is None:
        return keepdim
    if keepdim is not False and keepdim is not keepdims:
        raise VkumdValueError(f"{op}: keepdim={keepdim!r} and keepdims={keepdims!r} disagree; "
                              "give one of them")
    return keepdims


def _frozen(dim: Any) -> Any:
    return tuple(dim) if isinstance(dim, list) else dim


def reduce(op: str, x: Any, dim: Any, keepdims: Any, out: Tensor | None,
           correction: Any = 1) -> Tensor:
    """Reduction ``op`` (a key of ``reduce.REDUCE_OPS``) of ``x`` over ``dim``: the body of
    every eager reduction, argument checks included (see :func:`sum`)."""
    x = check_tensor(op, x, "x")
    dim = _frozen(dim)
    key = (op, x.shape, x.dtype.name, dim, type(dim), keepdims, type(keepdims), correction,
           type(correction))
    known = recall(_VERDICTS, key)
    if known is None:
        attrs = {"dim": dim, "keepdims": keepdims}
        if op in _CORRECTED:
            attrs["correction"] = correction
        (result,) = concrete_rule(op, (x,), attrs)
        axes = reduced_axes(op, dim, x.ndim)
        known = remember(_VERDICTS, key, (_launch_facts(x.shape, axes), result.shape))
    if x.dtype.itemsize != 4:
        check_storage(op, x.dtype, x.context)
    (order, rows, cols, inner), shape = known
    out = output(op, x.context, out, shape, x.dtype, (x,))
    if out.size == 0:
        return out
    double = x.dtype.name == "float64"
    if cols == 0 and not double:  # the double kernel gives the identity of no element
        return fill(out, IDENTITIES[op])
    denominator = None
    if op in _CORRECTED:
        # builtins' max is shadowed here by the op of that name
        denominator = cols - correction if cols > correction else 0
    moved = x if order is None else permuted_view(x, order)
    try:
        if double:
            plan = axis_double_plan(x.context.caps, op, rows, cols, inner,
                                    denominator=denominator)
        else:
            plan = reduce_plan(x.context.caps, op, ROW_CODES[x.dtype.name], rows, cols, inner,
                               denominator)
        # An empty x has no memory to bind: the kernel reads none of it.
        x.context.run(plan, (out if cols == 0 else moved, out))
    finally:
        if moved is not x:
            moved.release()  # back to the pool once the launch has run
    return out


_SUMMARIES = {
    "sum": "The sum of ``x`` over ``dim`` (an empty set of elements sums to 0).",
    "mean": "The mean of ``x`` over ``dim``.",
    "max": "The maximum of ``x`` over ``dim`` (values holding a NaN give NaN, as numpy).",
    "min": "The minimum of ``x`` over ``dim`` (values holding a NaN give NaN, as numpy).",
    "prod": "The product of ``x`` over ``dim`` (an empty product is 1).",
    "sum_square": "The sum of ``x * x`` over ``dim`` (ONNX's ReduceSumSquare).",
    "l1_norm": "The sum of ``|x|`` over ``dim`` (ONNX's ReduceL1).",
    "l2_norm": "``sqrt(sum(x * x))`` over ``dim`` (ONNX's ReduceL2).",
    "logsumexp": "``log(sum(exp(x)))`` over ``dim``, computed as ``m + log(sum(exp(x - m)))`` "
                 "with m the maximum (an empty one is -inf).",
    "log_sum": "``log(sum(x))`` over ``dim`` (ONNX's ReduceLogSum; an empty one is -inf).",
}


def _eager(op: str) -> Callable[..., Tensor]:
    def eager(x: Tensor, dim: Any = -1, keepdim: bool = False, *, keepdims: bool | None = None,
              out: Tensor | None = None) -> Tensor:
        return reduce(op, x, dim, _keep(op, keepdim, keepdims), out)
    empty = ("an empty reduced set (0 elements)" if op not in IDENTITIES else "")
    eager.__name__ = eager.__qualname__ = op
    eager.__doc__ = f"""{_SUMMARIES[op]}

    Args:
        x: float32, float16, bfloat16 or float64 (with shaderFloat64), at least 1-D.
        dim: an axis, a tuple of axes, or None for every axis (default -1, the last).
        keepdim: keep the reduced axes, as 1 (``keepdims``, numpy's name, is accepted too).
        out: optional output of the result's shape and x's dtype.

    Returns:
        ``x.shape`` without the reduced axes (with them as 1 under keepdim), x's dtype.

    Raises:
        VkumdTypeError: non-float x, out of another dtype, a non-bool keepdim, a dim that is
            not an int, a tuple of ints or None.
        VkumdValueError: 0-d x, an axis out of range or named twice, out of the wrong
            shape{", " + empty if empty else ""}.
        CapabilityMissing: a type the device cannot store (float64 without shaderFloat64).
    """
    return eager


def var(x: Tensor, dim: Any = -1, keepdim: bool = False, *, correction: float = 1,
        keepdims: bool | None = None, out: Tensor | None = None) -> Tensor:
    """The variance of ``x`` over ``dim``: ``sum((x - mean)^2) / (n - correction)`` (two passes,
    no cancellation); ``n - correction <= 0`` gives inf (or NaN for constant values).

    Args:
        x: float32, float16, bfloat16 or float64 (with shaderFloat64), at least 1-D.
        dim: an axis, a tuple of axes, or None for every axis (default -1, the last).
        keepdim: keep the reduced axes, as 1 (``keepdims`` is accepted too).
        correction: subtracted from the count (1: Bessel's, torch's default; 0: numpy's).
        out: optional output of the result's shape and x's dtype.

    Returns:
        ``x.shape`` without the reduced axes (with them as 1 under keepdim), x's dtype.

    Raises:
        VkumdTypeError: as :func:`sum`, and a correction that is not a number.
        VkumdValueError: as :func:`sum`, and an empty reduced set.
    """
    return reduce("var", x, dim, _keep("var", keepdim, keepdims), out, correction)


def std(x: Tensor, dim: Any = -1, keepdim: bool = False, *, correction: float = 1,
        keepdims: bool | None = None, out: Tensor | None = None) -> Tensor:
    """The standard deviation of ``x`` over ``dim``: the square root of :func:`var`.

    Args, returns and errors as :func:`var`.
    """
    return reduce("std", x, dim, _keep("std", keepdim, keepdims), out, correction)


def _lower(op: str, eager: Callable[..., Tensor]) -> Callable[[Node, list[Any], list[Tensor]],
                                                               None]:
    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        at = attrs_of(node)
        extra = {"correction": at["correction"]} if op in _CORRECTED else {}
        eager(ins[0], at["dim"], keepdims=at["keepdims"], out=outs[0], **extra)
    return lower


def _declare(op: str, eager: Callable[..., Tensor]) -> Callable[..., Tensor]:
    attrs: dict[str, Any] = {"dim": -1, "keepdims": False}
    if op in _CORRECTED:
        attrs["correction"] = 1
    define(op, ("x",), attrs, rule=_rule(op), reference=_reference(op), lower=_lower(op, eager),
           eager=eager)
    return eager


sum = _declare("sum", _eager("sum"))  # noqa: A001
mean = _declare("mean", _eager("mean"))
max = _declare("max", _eager("max"))  # noqa: A001
min = _declare("min", _eager("min"))  # noqa: A001
prod = _declare("prod", _eager("prod"))
sum_square = _declare("sum_square", _eager("sum_square"))
l1_norm = _declare("l1_norm", _eager("l1_norm"))
l2_norm = _declare("l2_norm", _eager("l2_norm"))
logsumexp = _declare("logsumexp", _eager("logsumexp"))
log_sum = _declare("log_sum", _eager("log_sum"))
_declare("var", var)
_declare("std", std)
