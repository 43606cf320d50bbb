"""``cumsum`` and ``cumprod``: running sums and products along any axis, inclusive or
exclusive, forward or reversed (ONNX's CumSum and CumProd, torch's cumsum and cumprod).

The scan kernel (``shaders/scan.comp``) works along rows; another axis is moved last first
(:func:`~vkumd.framework.opset.along_axis.along_axis`). float64 (with shaderFloat64) takes
``axis_double.comp``, which scans any axis in place, sequentially in double.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.double import EXCLUSIVE, REVERSE, axis_double_plan
from vkumd.compiler.kernels.limits import SCAN_DTYPES, SCAN_MAX_ELEMENTS
from vkumd.compiler.kernels.scan import SCAN_CODES, scan_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, at_least_1d, axis_of, flag, only
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.along_axis import along_axis
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

# The axis as an index by (op, x's shape and dtype name, the attributes and their types):
# calls the rule accepted.
_VERDICTS: Verdicts = {}
# The types the ops take: the scan kernel's, and float64 in the double kernel.
_TYPES = (*SCAN_DTYPES, "float64")


def _scan(op: str, kind: str, x: Tensor, axis: Any, exclusive: Any, reverse: Any,
          out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    key = (op, x.shape, x.dtype.name, axis, type(axis), exclusive, type(exclusive), reverse,
           type(reverse))
    index = recall(_VERDICTS, key)
    if index is None:
        concrete_rule(op, (x,), {"axis": axis, "exclusive": exclusive, "reverse": reverse})
        index = remember(_VERDICTS, key, axis_of(op, axis, x.ndim))
    if x.dtype.itemsize != 4:
        check_storage(op, x.dtype, x.context)
    out = output(op, x.context, out, x.shape, x.dtype, (x,))
    if out.size == 0:
        return out
    cols = x.shape[index]
    if x.dtype.name == "float64":
        flags = (EXCLUSIVE if exclusive else 0) | (REVERSE if reverse else 0)
        plan = axis_double_plan(x.context.caps, op, math.prod(x.shape[:index]), cols,
                                math.prod(x.shape[index + 1:]), flags=flags)
        x.context.run(plan, (x, out))
        return out
    plan = scan_plan(x.context.caps, SCAN_CODES[x.dtype.name], kind, math.prod(x.shape) // cols,
                     cols, bool(exclusive), bool(reverse))
    along_axis(x, index, out, lambda src, dst: x.context.run(plan, (src, dst)))
    return out


_ARGS = """Args:
        x: float32, float16, bfloat16, int32 or float64, at least 1-D (floats combine in
            float32, float64 in double with shaderFloat64; int32 wraps on overflow, as
            numpy's int32 does).
        axis: the dimension scanned (negative counts from the end); another than the last
            is moved last first (two copies).
        exclusive: leave each element out of its own result (the first is {identity}).
        reverse: scan from the end of the axis.
        out: optional output of ``x``'s shape and dtype.

    Returns:
        x's shape and dtype.

    Raises:
        VkumdTypeError: non-tensor x or one of another dtype, a non-int axis, flags that are
            not bools, out of another dtype.
        VkumdValueError: 0-d x, an axis out of range, more than 2^32 - 1 elements, out of
            the wrong shape or the same memory as x.
        CapabilityMissing: float64 on a device without shaderFloat64."""


def cumsum(x: Tensor, *, axis: int = -1, exclusive: bool = False, reverse: bool = False,
           out: Tensor | None = None) -> Tensor:
    """The running sum of ``x`` along ``axis`` (numpy's ``cumsum``; ONNX's CumSum).

    {args}
    """
    return _scan("cumsum", "sum", x, axis, exclusive, reverse, out)


def cumprod(x: Tensor, *, axis: int = -1, exclusive: bool = False, reverse: bool = False,
            out: Tensor | None = None) -> Tensor:
    """The running product of ``x`` along ``axis`` (numpy's ``cumprod``; ONNX's CumProd).

    {args}
    """
    return _scan("cumprod", "prod", x, axis, exclusive, reverse, out)


cumsum.__doc__ = (cumsum.__doc__ or "").format(args=_ARGS.format(identity="0"))
cumprod.__doc__ = (cumprod.__doc__ or "").format(args=_ARGS.format(identity="1"))


def _rule(op: str):  # noqa: ANN202  (a rule of the registry's signature)
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        if x.dtype.name not in _TYPES:
            raise VkumdTypeError(f"{op}: x is {x.dtype.name}, which is not supported; {op} "
                                 f"takes {', '.join(_TYPES)} (cast() converts)")
        at_least_1d(op, x)
        axis_of(op, attrs["axis"], x.ndim)
        flag(op, attrs["exclusive"], "exclusive")
        flag(op, attrs["reverse"], "reverse")
        size = dims.resolve(product(x.shape))
        if isinstance(size, int) and size > SCAN_MAX_ELEMENTS:
            raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}, more than "
                                  f"{SCAN_MAX_ELEMENTS} elements (32-bit offsets); split it")
        return [x]
    return rule


def scan_reference(x: np.ndarray, combine: Any, identity: float, axis: int, exclusive: bool,
                   reverse: bool) -> np.ndarray:
    """float64 running ``combine`` (``np.cumsum``, ``np.cumprod``) along ``axis``."""
    x = np.asarray(x, np.float64)
    if reverse:
        x = np.flip(x, axis)
    found = combine(x, axis=axis)
    if exclusive:
        index = [slice(None)] * x.ndim
        index[axis] = slice(0, -1)
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        found = np.pad(found[tuple(index)], pad, constant_values=identity)
    return np.flip(found, axis) if reverse else found


def _declare(op: str, combine: Any, identity: float, eager: Any) -> None:
    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        return [scan_reference(a[0], combine, identity, attrs["axis"], attrs["exclusive"],
                               attrs["reverse"])]

    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        at = attrs_of(node)
        eager(ins[0], axis=at["axis"], exclusive=at["exclusive"], reverse=at["reverse"],
              out=outs[0])

    define(op, ("x",), {"axis": -1, "exclusive": False, "reverse": False}, rule=_rule(op),
           reference=reference, lower=lower, eager=eager)


_declare("cumsum", np.cumsum, 0.0, cumsum)
_declare("cumprod", np.cumprod, 1.0, cumprod)
