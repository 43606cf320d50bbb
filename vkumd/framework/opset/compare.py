"""Comparisons and selection: eq, ne, lt, le, gt, ge (records and eager functions) and where.

Comparisons give bool in a graph, as PyTorch's and ONNX's do; the eager ``vkumd.ops``
comparisons give 1/0 in the operands' dtype, which multiplies straight into arithmetic, or
the mask into a bool (or uint8) ``out``. They broadcast (numpy rules) over operands of one
dtype (bool ones too) and join generated elementwise kernels as program steps.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from vkumd.compiler.kernels.elementwise import (
    BINARY_CODES,
    MASK_CODE,
)
from vkumd.compiler.kernels.elementwise_plan import binary_plan
from vkumd.compiler.kernels.limits import FUSED_OUTPUT_DTYPES, INTEGER_DTYPES
from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, same_dtype
from vkumd.framework.graph.registry import Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import (
    check_dtype,
    check_pair,
    check_storage,
    output,
)
from vkumd.framework.opset.arith import Operand, add, binary_type, mul, run_binary, sub
from vkumd.framework.opset.common import binary, host_tensor, one_step
from vkumd.framework.opset.unary import binary_dtypes, broadcast_shape, cast
from vkumd.framework.tensor import Tensor

INTEGER_CONDITIONS = ("bool", "uint8", "int8", "int32")
# The types a mask out= may have: bool, and uint8 (the bytes it had before bool was stored).
MASK_DTYPES = (dtypes.bool_, dtypes.uint8)


def _compare(op: str, a: Operand, b: Operand, out: Tensor | None) -> Tensor:
    if (isinstance(out, Tensor) and out.dtype in MASK_DTYPES
            and not (isinstance(a, Tensor) and a.dtype is out.dtype)):
        return _compare_mask(op, a, b, out)
    return run_binary(op, a, b, out, op)


def _compare_mask(op: str, a: Any, b: Any, out: Tensor) -> Tensor:
    """``a OP b`` stored as a 1/0 mask in ``out`` (bool, as a graph's, or uint8), from two
    tensors."""
    context = check_pair(op, a, b)
    if a.dtype is not b.dtype:
        raise VkumdTypeError(f"{op}: dtypes differ ({a.dtype.name} and {b.dtype.name}); "
                             "cast one first")
    check_dtype(op, a, "the first operand", BINARY_CODES)
    check_storage(op, out.dtype, context)
    out_shape = broadcast_shape(op, a.shape, b.shape)
    out = output(op, context, out, out_shape, out.dtype)
    if out.size == 0:
        return out
    plan = binary_plan(context.caps, op, BINARY_CODES[a.dtype.name], a.shape, b.shape,
                       out_shape, out=MASK_CODE)
    context.run(plan, (a, b, out))
    return out


def lt(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a < b`` elementwise with numpy broadcasting: 1 where true, 0 where false.

    The result has the operands' dtype (a 0/1 mask of the same type multiplies straight into
    arithmetic, e.g. ``x * lt(x, 0)``), unlike numpy's bool; a bool ``out=`` gives the bool
    mask (a graph's comparison gives bool).
    Floats compare in float32, exactly for every type; any comparison with NaN is false
    except :func:`ne`. Either operand may be a real number, as for :func:`add`.

    Args:
        a: a tensor of float32, float16, bfloat16 or int32 (any type the binary kernel
            takes, and bool, beside a tensor of its type), or a real number.
        b: likewise; two tensors must share a dtype and a context.
        out: optional output of the broadcast shape and the operands' dtype, or bool (two
            tensor operands): the mask, as a graph's comparison gives (uint8 takes the same
            bytes).

    Returns:
        The 0/1 tensor.

    Raises:
        VkumdTypeError: a non-tensor that is not a number; dtypes that differ; an int32
            tensor against a non-integral number.
        VkumdValueError: shapes that do not broadcast; tensors of different contexts.
    """
    return _compare("lt", a, b, out)


def le(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a <= b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("le", a, b, out)


def gt(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a > b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("gt", a, b, out)


def ge(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a >= b`` elementwise, as :func:`lt` (1/0 in the operands' dtype)."""
    return _compare("ge", a, b, out)


def eq(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a == b`` elementwise, as :func:`lt` (1/0 in the operands' dtype; NaN equals
    nothing, and ``-0.0 == 0.0``)."""
    return _compare("eq", a, b, out)


def ne(a: Operand, b: Operand, *, out: Tensor | None = None) -> Tensor:
    """``a != b`` elementwise, as :func:`lt` (1/0 in the operands' dtype; NaN differs from
    everything, itself included)."""
    return _compare("ne", a, b, out)


_COMPARE = {"eq": (eq, np.equal, operator.eq, "=="), "ne": (ne, np.not_equal, operator.ne, "!="),
            "lt": (lt, np.less, operator.lt, "<"), "le": (le, np.less_equal, operator.le, "<="),
            "gt": (gt, np.greater, operator.gt, ">"),
            "ge": (ge, np.greater_equal, operator.ge, ">=")}


def _comparison(op: str) -> None:
    eager, numpy_fn, host_fn, symbol = _COMPARE[op]

    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        return [TensorType(binary_type(op, ins, dims).shape, dtypes.bool_)]

    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        return [numpy_fn(a[0], a[1]).astype(np.float64)]

    def host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
        result = host_fn(xs[0].numpy(), xs[1].numpy())
        return host_tensor(ctx, dtypes.bool_, np.asarray(result, np.bool_))

    # The lowering stores the bool mask straight from the elementwise kernel, which compares
    # every type it takes exactly (int32 too, where a float32 comparison would not be).
    define(op, ("a", "b"), rule=rule, reference=reference, lower=binary(eager),
           refuse=binary_dtypes, host=host, eager=eager,
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


def _where_types(node: Node) -> str | None:
    # The generated select stores floats; the integers select exactly through the binary
    # and conversion kernels (_where_integers); other types move to the host.
    result = node.outputs[0].dtype.name
    if result not in FUSED_OUTPUT_DTYPES and result not in INTEGER_DTYPES:
        return (f"where has no device kernel for {result} (the generated select stores "
                f"{', '.join(FUSED_OUTPUT_DTYPES)}; the integer select "
                f"{', '.join(INTEGER_DTYPES)})")
    return None


def _where_integers(cond: Tensor, a: Tensor, b: Tensor, out: Tensor) -> None:
    """``where(cond, a, b)`` of integers into ``out``, exactly: ``b + (a - b) * m`` with
    ``m`` 1 where ``cond`` is nonzero and 0 elsewhere. The arithmetic wraps, so the result is
    ``a`` or ``b`` bit for bit whatever their values (five launches; a float32 select would
    round integers past 2**24)."""
    temporaries = []
    try:
        wide = cond if cond.dtype is dtypes.int32 else cast(cond, dtypes.int32)
        temporaries += [wide] if wide is not cond else []
        picked = ne(wide, 0)  # 1/0 in int32
        temporaries.append(picked)
        if out.dtype is not dtypes.int32:
            picked = cast(picked, out.dtype)
            temporaries.append(picked)
        diff = sub(a, b)
        temporaries.append(diff)
        step = mul(diff, picked)
        temporaries.append(step)
        add(b, step, out=out)
    finally:
        for t in temporaries:
            t.release()  # its memory returns to the pool once the launches have run


def _where_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    if outs[0].dtype.name in FUSED_OUTPUT_DTYPES:
        one_step(node, ins, outs)
    else:
        _where_integers(ins[0], ins[1], ins[2], outs[0])


def _where_host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Tensor:
    cond, a, b = (x.numpy() for x in xs)
    return host_tensor(ctx, xs[1].dtype, np.where(cond != 0, a, b))  # bool's True is != 0


define("where", ("cond", "a", "b"), inplace=True, rule=_where_rule,
       reference=lambda a, attrs, s: [np.where(a[0] != 0, a[1], a[2]).astype(np.float64)],
       lower=_where_lower, refuse=_where_types, host=_where_host,
       elementwise=Elementwise(3, "({a} != 0.0 ? {b} : {c})", any_type=(0,)))
