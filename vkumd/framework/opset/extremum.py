"""The elementwise maximum and minimum of two tensors: ``maximum`` and ``minimum`` (numpy's,
torch's and ONNX's Max/Min: NaN propagates). Floats run as generated elementwise kernels and
so fuse with their neighbours; integers (int8 to uint64) in the binary kernel, exactly, and
float64 there too, in double.

NaN is found from the bits, not with ``isnan()`` or ``max()``: without the
SignedZeroInfNanPreserve execution mode a driver may assume floats are never NaN, and GLSL's
``max`` may return either operand when one is NaN (``shaders/include/rows.glsl``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import INTEGER_DTYPES
from vkumd.errors import VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.operands import Types, need_float, same_dtype
from vkumd.framework.graph.registry import OPS, Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_pair, check_storage, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.arith import run_binary
from vkumd.framework.opset.common import binary
from vkumd.framework.opset.unary import binary_dtypes
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}
# The types the binary kernel computes (exactly; float64 in double, NaN kept): the integers,
# the wider and unsigned ones and float64, none of which the generated kernels take.
IN_BINARY_KERNEL = (*INTEGER_DTYPES, "float64")
_NAN = "((floatBitsToUint({x}) & 0x7FFFFFFFu) > 0x7F800000u)"


def _glsl(fn: str) -> str:
    either = f"({_NAN.format(x='{a}')} || {_NAN.format(x='{b}')})"
    return f"({either} ? uintBitsToFloat(0x7FC00000u) : {fn}({{a}}, {{b}}))"


def _run(op: str, a: Tensor, b: Tensor, out: Tensor | None) -> Tensor:
    if isinstance(a, Tensor) and isinstance(b, Tensor) and a.dtype.name in IN_BINARY_KERNEL:
        return run_binary(op, a, b, out, op[:3])
    context = check_pair(op, a, b)
    key = (op, a.shape, a.dtype.name, b.shape, b.dtype.name)
    result = recall(_VERDICTS, key)
    if result is None:
        (result,) = concrete_rule(op, (a, b), {})
        result = remember(_VERDICTS, key, result)
    if result.dtype.itemsize < 4:
        check_storage(op, result.dtype, context)
    out = output(op, context, out, tuple(result.shape), result.dtype)
    if out.size == 0:
        return out
    # The generated kernels' family declares the fused op's eager function; it imports the
    # op families, so it is found through its record.
    return OPS["fused_elementwise"].eager([a, b], ((op, 0, 1),), dtype=result.dtype, out=out)


def maximum(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """The larger of ``a`` and ``b`` elementwise, with numpy broadcasting; NaN where either
    is NaN (numpy's ``maximum``, ONNX's Max).

    Args:
        a: a float32, float16, bfloat16, float64 or integer tensor.
        b: a tensor of a's dtype and context, broadcastable with a.
        out: optional output of the broadcast shape and the operands' dtype.

    Returns:
        The result.

    Raises:
        VkumdTypeError: an operand of another type, operands of different dtypes, out of
            another dtype.
        VkumdValueError: shapes that do not broadcast, operands of different contexts, out
            of another shape.
    """
    return _run("maximum", a, b, out)


def minimum(a: Tensor, b: Tensor, *, out: Tensor | None = None) -> Tensor:
    """The smaller of ``a`` and ``b`` elementwise; as :func:`maximum` otherwise."""
    return _run("minimum", a, b, out)


def _rule(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        a, b = ins
        assert a is not None and b is not None  # required inputs, checked by the registry
        if a.dtype.name not in IN_BINARY_KERNEL:
            need_float(op, a, "a")
        dtype = same_dtype(op, ("a", a), ("b", b))
        try:
            shape = dims.broadcast(a.shape, b.shape)
        except VkumdValueError as exc:
            raise VkumdValueError(f"{op}: a {format_shape(a.shape)} and b "
                                  f"{format_shape(b.shape)} do not broadcast ({exc})") from None
        return [TensorType(shape, dtype)]
    return rule


for _op, _eager, _fn in (("maximum", maximum, np.maximum), ("minimum", minimum, np.minimum)):
    define(_op, ("a", "b"), rule=_rule(_op),
           reference=(lambda f: lambda a, attrs, s: [f(a[0], a[1])])(_fn),
           inplace=True, elementwise=Elementwise(2, _glsl(_op[:3])), lower=binary(_eager),
           refuse=binary_dtypes, eager=_eager)
