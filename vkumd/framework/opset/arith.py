"""Elementwise arithmetic, comparisons and selection: add, sub, mul, div, eq, ne, lt, le, gt,
ge, where, scale and cast.

Binary ops broadcast (numpy rules) over operands of one dtype. Comparisons give uint8 1/0
in a graph (vkumd stores no bool; the eager ``vkumd.ops`` comparisons give 1/0 in the
operands' dtype, which multiplies straight into arithmetic). Each op also joins generated
elementwise kernels as a program step (:attr:`OpDef.elementwise`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.limits import FUSED_OUTPUT_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, only, real, same_dtype
from vkumd.framework.graph.reference import round_to
from vkumd.framework.graph.registry import REQUIRED, Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops import elementwise as ops
from vkumd.framework.opset.common import attrs_of, binary, host_tensor, one_step
from vkumd.framework.tensor import Tensor

CAST_TARGETS = ("float32", "float16", "bfloat16", "int32")
ROUNDINGS = (None, "floor", "trunc")
INTEGER_CONDITIONS = ("uint8", "int8", "int32")


def _binary(op: str, ins: Types, dims: DimTable) -> TensorType:
    a, b = only(ins), ins[1]
    assert b is not None  # a required input, checked by the registry
    dt = same_dtype(op, ("a", a), ("b", b))
    return TensorType(dims.broadcast(a.shape, b.shape), dt)


def _kernel_dtypes(node: Node) -> str | None:
    """Why the elementwise kernels cannot run ``node`` (an operand type they do not take)."""
    first = node.inputs[0]
    if first is not None and first.dtype.name not in ELEMENTWISE_CODES:
        return (f"{node.op} has no device kernel for {first.dtype.name} (its kernels take "
                f"{', '.join(ELEMENTWISE_CODES)})")
    return None


def _arith(op: str, eager: Any, reference: Any, glsl: str) -> None:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [_binary(op, ins, dims)]

    define(op, ("a", "b"), rule=rule, reference=reference, inplace=True,
           elementwise=Elementwise(2, glsl), lower=binary(eager), refuse=_kernel_dtypes,
           eager=eager)


_arith("add", ops.add, lambda a, attrs, s: [a[0] + a[1]], "({a} + {b})")
_arith("sub", ops.sub, lambda a, attrs, s: [a[0] - a[1]], "({a} - {b})")
_arith("mul", ops.mul, lambda a, attrs, s: [a[0] * a[1]], "({a} * {b})")


def _div_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    rounding = attrs["rounding"]
    if rounding not in ROUNDINGS:
        raise VkumdValueError(f"div: rounding={rounding!r}; use None, 'floor' or 'trunc'")
    out = _binary("div", ins, dims)
    if rounding is None and out.dtype is dtypes.int32:
        raise VkumdTypeError("div: int32 true division would need a float result; cast to "
                             "float32 first, or set rounding='floor' or 'trunc'")
    return [out]


def _div_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    a, b = args
    with np.errstate(divide="ignore", invalid="ignore"):
        q = a / b
    rounding = attrs["rounding"]
    if rounding is None:
        return [q]
    q = np.floor(q) if rounding == "floor" else np.trunc(q)
    # Integer division by zero gives 0, as the kernel (and numpy's floor_divide) does.
    return [np.where(np.broadcast_to(b, q.shape) == 0, 0.0, q)]


def _div_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.div(ins[0], ins[1], rounding=attrs_of(node)["rounding"], out=outs[0])


define("div", ("a", "b"), {"rounding": None}, rule=_div_rule, reference=_div_reference,
       inplace=True, lower=_div_lower, refuse=_kernel_dtypes, eager=ops.div,
       elementwise=Elementwise(2, "({a} / {b})", params=("rounding",),
                               glsl_params={"floor": "floor({a} / {b})",
                                            "trunc": "trunc({a} / {b})"}))


_COMPARE = {"eq": (np.equal, operator.eq, "=="), "ne": (np.not_equal, operator.ne, "!="),
            "lt": (np.less, operator.lt, "<"), "le": (np.less_equal, operator.le, "<="),
            "gt": (np.greater, operator.gt, ">"), "ge": (np.greater_equal, operator.ge, ">=")}


def _comparison(op: str) -> None:
    numpy_fn, host_fn, symbol = _COMPARE[op]

    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [TensorType(_binary(op, ins, dims).shape, dtypes.uint8)]

    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        return [numpy_fn(a[0], a[1]).astype(np.float64)]

    def host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
        result = host_fn(xs[0].numpy(), xs[1].numpy())
        return host_tensor(ctx, dtypes.uint8, result.astype(np.uint8))

    # The lowering stores the uint8 mask straight from the elementwise kernel, which compares
    # every type it takes exactly (int32 too, where a float32 comparison would not be).
    define(op, ("a", "b"), rule=rule, reference=reference, lower=binary(getattr(ops, op)),
           refuse=_kernel_dtypes, host=host, eager=getattr(ops, op),
           elementwise=Elementwise(2, f"({{a}} {symbol} {{b}} ? 1.0 : 0.0)"))


for _name in _COMPARE:
    _comparison(_name)


def _where_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    cond, a, b = ins
    assert cond is not None and a is not None and b is not None
    if cond.dtype.name not in INTEGER_CONDITIONS:
        raise VkumdTypeError(f"where: cond is {cond.dtype.name}; it must be one of "
                             f"{', '.join(INTEGER_CONDITIONS)} (nonzero selects a)")
    dt = same_dtype("where", ("a", a), ("b", b))
    return [TensorType(dims.broadcast(cond.shape, a.shape, b.shape), dt)]


def _where_floats(node: Node) -> str | None:
    # The generated select stores floats; a select of integers moves them on the host.
    result = node.outputs[0].dtype.name
    if result not in FUSED_OUTPUT_DTYPES:
        return (f"where has no device kernel for {result} (the generated select stores "
                f"{', '.join(FUSED_OUTPUT_DTYPES)})")
    return None


def _where_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    cond, a, b = (x.numpy() for x in xs)
    return host_tensor(ctx, xs[1].dtype, np.where(cond != 0, a, b))


define("where", ("cond", "a", "b"), inplace=True, rule=_where_rule,
       reference=lambda a, attrs, s: [np.where(a[0] != 0, a[1], a[2]).astype(np.float64)],
       lower=one_step, refuse=_where_floats, host=_where_host,
       elementwise=Elementwise(3, "({a} != 0.0 ? {b} : {c})", any_type=(0,)))


def _scale_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    real("scale", attrs["alpha"], "alpha")
    return [only(ins)]


def _scale_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.scale(ins[0], attrs_of(node)["alpha"], out=outs[0])


define("scale", ("x",), {"alpha": 1.0}, inplace=True, rule=_scale_rule,
       reference=lambda a, attrs, s: [a[0] * float(attrs["alpha"])],
       lower=_scale_lower, refuse=_kernel_dtypes, eager=ops.scale,
       elementwise=Elementwise(1, rewrite=lambda refs, at: (
           "mul", refs[0], ("const", float(at["alpha"])))))


def _cast_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    target = attrs["dtype"]
    name = target.name if isinstance(target, dtypes.DType) else target
    if name not in CAST_TARGETS:
        raise VkumdTypeError(f"cast: dtype={target!r}; cast converts to "
                             f"{', '.join(CAST_TARGETS)}")
    return [TensorType(only(ins).shape, dtypes.dtype(name))]


def _cast_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    ops.cast(ins[0], attrs_of(node)["dtype"], out=outs[0])


define("cast", ("x",), {"dtype": REQUIRED}, inplace=True, rule=_cast_rule,
       reference=lambda a, attrs, s: [round_to(a[0], dtypes.dtype(attrs["dtype"]))],
       lower=_cast_lower, refuse=_kernel_dtypes, eager=ops.cast,
       elementwise=Elementwise(1, "{a}", params=("dtype",), glsl_params={
           "float32": "{a}",
           "float16": "unpackHalf2x16(packHalf2x16(vec2({a}, 0.0))).x",
           "bfloat16": "bf16_to_float(float_to_bf16({a}))"}))
