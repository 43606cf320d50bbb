"""Shape rules of the elementwise and row-wise ops.

Elementwise: add, sub, mul, div (numpy broadcasting, one dtype), the comparisons eq, ne, lt,
le, gt, ge (uint8 0/1 results: vkumd has no bool type), where, scale, cast, the
activations gelu, gelu_tanh, relu, silu, and the math functions exp, sqrt, tanh, erf, sigmoid
(for importers; no kernel yet). Row-wise (over the last axis, as vkumd's kernels): softmax,
layer_norm, rms_norm, sum, mean, max.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.registry import REQUIRED, TensorType, register
from vkumd.framework.graph.symbols import DimTable

FLOATS = ("float32", "float16", "bfloat16")
CAST_TARGETS = ("float32", "float16", "bfloat16", "int32")
ROUNDINGS = (None, "floor", "trunc")
INTEGER_CONDITIONS = ("uint8", "int8", "int32")
ACTIVATIONS = (None, "relu", "gelu", "gelu_tanh", "silu")

Types = list[TensorType | None]


def need_float(op: str, t: TensorType, what: str = "x") -> None:
    """Refuse a non-float ``t``."""
    if t.dtype.name not in FLOATS:
        raise VkumdTypeError(f"{op}: {what} is {t.dtype.name}; {op} takes "
                             f"{', '.join(FLOATS)}")


def same_dtype(op: str, *pairs: tuple[str, TensorType | None]) -> dtypes.DType:
    """The one dtype of every present operand; refuse operands that differ."""
    present = [(n, t) for n, t in pairs if t is not None]
    first = present[0][1].dtype
    if any(t.dtype is not first for _, t in present):
        listed = ", ".join(f"{n} {t.dtype.name}" for n, t in present)
        raise VkumdTypeError(f"{op}: operands must share a dtype, got {listed}; insert a cast")
    return first


def real(op: str, value: Any, what: str) -> float:
    """``value`` as a finite float, refusing bools and non-numbers."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"{op}: {what} must be a real number, not {value!r}")
    if not math.isfinite(float(value)):
        raise VkumdValueError(f"{op}: {what} must be finite, got {value}")
    return float(value)


def flag(op: str, value: Any, what: str) -> bool:
    """``value`` as a bool, refusing anything else."""
    if not isinstance(value, bool):
        raise VkumdTypeError(f"{op}: {what} must be True or False, not {value!r}")
    return value


def at_least_1d(op: str, t: TensorType) -> None:
    """Refuse a 0-d ``t`` (the row ops work on the last axis)."""
    if t.ndim == 0:
        raise VkumdValueError(f"{op}: x is 0-d; {op} works over the last dimension")


def _binary(op: str, ins: Types, dims: DimTable) -> TensorType:
    a, b = ins[0], ins[1]
    assert a is not None and b is not None  # required inputs, checked by the registry
    dt = same_dtype(op, ("a", a), ("b", b))
    return TensorType(dims.broadcast(a.shape, b.shape), dt)


def _arith(op: str) -> None:
    @register(op, ("a", "b"), inplace=True)
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [_binary(op, ins, dims)]


for _name in ("add", "sub", "mul"):
    _arith(_name)


@register("div", ("a", "b"), {"rounding": None}, inplace=True)
def _div(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    rounding = attrs["rounding"]
    if rounding not in ROUNDINGS:
        raise VkumdValueError(f"div: rounding={rounding!r}; use None, 'floor' or 'trunc'")
    out = _binary("div", ins, dims)
    if rounding is None and out.dtype is dtypes.int32:
        raise VkumdTypeError("div: int32 true division would need a float result; cast to "
                             "float32 first, or set rounding='floor' or 'trunc'")
    return [out]


def _comparison(op: str) -> None:
    @register(op, ("a", "b"))
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [TensorType(_binary(op, ins, dims).shape, dtypes.uint8)]


for _name in ("eq", "ne", "lt", "le", "gt", "ge"):
    _comparison(_name)


@register("where", ("cond", "a", "b"), inplace=True)
def _where(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    cond, a, b = ins
    assert cond is not None and a is not None and b is not None
    if cond.dtype.name not in INTEGER_CONDITIONS:
        raise VkumdTypeError(f"where: cond is {cond.dtype.name}; it must be one of "
                             f"{', '.join(INTEGER_CONDITIONS)} (nonzero selects a)")
    dt = same_dtype("where", ("a", a), ("b", b))
    return [TensorType(dims.broadcast(cond.shape, a.shape, b.shape), dt)]


@register("scale", ("x",), {"alpha": 1.0}, inplace=True)
def _scale(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    real("scale", attrs["alpha"], "alpha")
    return [x]


@register("cast", ("x",), {"dtype": REQUIRED}, inplace=True)
def _cast(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = ins[0]
    assert x is not None
    target = attrs["dtype"]
    name = target.name if isinstance(target, dtypes.DType) else target
    if name not in CAST_TARGETS:
        raise VkumdTypeError(f"cast: dtype={target!r}; cast converts to "
                             f"{', '.join(CAST_TARGETS)}")
    return [TensorType(x.shape, dtypes.dtype(name))]


def _activation(op: str) -> None:
    @register(op, ("x",), inplace=True)
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = ins[0]
        assert x is not None
        need_float(op, x)
        return [x]


# exp, sqrt, tanh, erf and sigmoid are the IR's for importers (ONNX); no kernel runs them yet.
MATH_OPS = ("exp", "sqrt", "tanh", "erf", "sigmoid")
for _name in ("gelu", "gelu_tanh", "relu", "silu", *MATH_OPS):
    _activation(_name)


@register("softmax", ("x", "mask?"), {"scale": None, "axis": -1})
def _softmax(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, mask = ins
    assert x is not None
    need_float("softmax", x)
    at_least_1d("softmax", x)
    if attrs["axis"] not in (-1, x.ndim - 1):
        raise VkumdValueError(f"softmax: axis={attrs['axis']}; only the last axis (-1) is "
                              "supported, permute first")
    if attrs["scale"] is not None:
        real("softmax", attrs["scale"], "scale")
    if mask is not None:
        same_dtype("softmax", ("x", x), ("mask", mask))
        grown = dims.broadcast(mask.shape, x.shape)
        if not dims.same_shape(grown, x.shape):
            raise VkumdValueError(f"softmax: a mask of shape {format_shape(mask.shape)} does "
                                  f"not broadcast to x's shape {format_shape(x.shape)} "
                                  "without growing it")
    return [x]


def norm_rule(op: str, ins: Types, eps: Any, dims: DimTable) -> list[TensorType]:
    """The rule of a norm over ``(x, weight?, bias?)``: x float, at least 1-D, eps >= 0,
    weight and bias x's dtype and one value per element of a row."""
    x = ins[0]
    assert x is not None
    need_float(op, x)
    at_least_1d(op, x)
    if real(op, eps, "eps") < 0:
        raise VkumdValueError(f"{op}: eps must be >= 0, got {eps}")
    for what, t in zip(("weight", "bias"), ins[1:], strict=False):
        if t is None:
            continue
        same_dtype(op, ("x", x), (what, t))
        if t.ndim != 1 or not dims.same(t.shape[0], x.shape[-1]):
            raise VkumdValueError(f"{op}: {what} has shape {format_shape(t.shape)}; it must "
                                  f"be [{x.shape[-1]}], one value per element of a row")
    return [x]


@register("layer_norm", ("x", "weight?", "bias?"), {"eps": 1e-5})
def _layer_norm(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    return norm_rule("layer_norm", ins, attrs["eps"], dims)


@register("rms_norm", ("x", "weight?"), {"eps": 1e-6})
def _rms_norm(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    return norm_rule("rms_norm", ins, attrs["eps"], dims)


def _reduce(op: str) -> None:
    @register(op, ("x",), {"keepdims": False})
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = ins[0]
        assert x is not None
        need_float(op, x)
        at_least_1d(op, x)
        keep = flag(op, attrs["keepdims"], "keepdims")
        return [TensorType(x.shape[:-1] + ((1,) if keep else ()), x.dtype)]


for _name in ("sum", "mean", "max"):
    _reduce(_name)

ELEMENTWISE_OPS = ("add", "sub", "mul", "div", "eq", "ne", "lt", "le", "gt", "ge", "where",
                   "scale", "cast", "gelu", "gelu_tanh", "relu", "silu", *MATH_OPS)
