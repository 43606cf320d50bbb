"""Reductions over the last dimension: sum, mean and max.

Accumulation is in float32 whatever the storage type; the result has the input's dtype and
its shape without the last dimension (or with it as 1 when ``keepdims=True``). The eager
functions check their arguments with the records' rule, the one the graph applies.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.reduce import reduce_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.errors import VkumdValueError
from vkumd.framework.graph.dims import format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import (
    Types,
    at_least_1d,
    flag,
    need_float,
    only,
)
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.unary import fill
from vkumd.framework.tensor import Tensor

# (rows, cols, the result's shape) by (op, x's shape and dtype name, keepdims and its type):
# calls the op's rule accepted.
_VERDICTS: Verdicts = {}


def _reduce(op: str, x: Any, keepdims: Any, out: Tensor | None) -> Tensor:
    x = check_tensor(op, x, "x")
    key = (op, x.shape, x.dtype.name, keepdims, type(keepdims))
    known = recall(_VERDICTS, key)
    if known is None:
        (result,) = concrete_rule(op, (x,), {"keepdims": keepdims})
        known = remember(_VERDICTS, key, (math.prod(x.shape[:-1]), x.shape[-1], result.shape))
    if x.dtype.itemsize < 4:
        check_storage(op, x.dtype, x.context)
    rows, cols, shape = known
    out = output(op, x.context, out, shape, x.dtype)
    if out.size == 0:
        return out
    if cols == 0:
        return fill(out, 0.0)  # an empty sum
    x.context.run(reduce_plan(x.context.caps, op, ROW_CODES[x.dtype.name], rows, cols),
                  (x, out))
    return out


def sum(x: Tensor, *, keepdims: bool = False, out: Tensor | None = None) -> Tensor:  # noqa: A001
    """The sum of ``x`` over its last dimension (an empty one sums to 0).

    Args:
        x: float32, float16 or bfloat16, at least 1-D.
        keepdims: keep the last dimension, as 1.
        out: optional output of the result's shape and x's dtype.

    Returns:
        ``x.shape[:-1]`` (``+ (1,)`` with keepdims), x's dtype.

    Raises:
        VkumdTypeError: non-float x, out of another dtype, non-bool keepdims.
        VkumdValueError: 0-d x, out of the wrong shape.
    """
    return _reduce("sum", x, keepdims, out)


def mean(x: Tensor, *, keepdims: bool = False, out: Tensor | None = None) -> Tensor:
    """The mean of ``x`` over its last dimension.

    Args and errors as :func:`sum`; also VkumdValueError for an empty last dimension.
    """
    return _reduce("mean", x, keepdims, out)


def max(x: Tensor, *, keepdims: bool = False, out: Tensor | None = None) -> Tensor:  # noqa: A001
    """The maximum of ``x`` over its last dimension (a row holding a NaN gives NaN, as numpy).

    Args and errors as :func:`sum`; also VkumdValueError for an empty last dimension.
    """
    return _reduce("max", x, keepdims, out)


def _reduction(eager: Any, fn: Any) -> None:
    op = eager.__name__

    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        need_float(op, x)
        at_least_1d(op, x)
        keep = flag(op, attrs["keepdims"], "keepdims")
        if (op != "sum" and dims.resolve(x.shape[-1]) == 0
                and dims.resolve(product(x.shape[:-1])) != 0):
            raise VkumdValueError(f"{op}: x has shape {format_shape(x.shape)}; the {op} of an "
                                  "empty last dimension is undefined")
        return [TensorType(x.shape[:-1] + ((1,) if keep else ()), x.dtype)]

    def reference(a: list[Any], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
        return [np.asarray(fn(a[0], axis=-1, keepdims=attrs["keepdims"]), np.float64)]

    def lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
        eager(ins[0], keepdims=attrs_of(node)["keepdims"], out=outs[0])

    define(op, ("x",), {"keepdims": False}, rule=rule, reference=reference, lower=lower,
           eager=eager)


for _eager, _fn in ((sum, np.sum), (mean, np.mean), (max, np.max)):
    _reduction(_eager, _fn)
