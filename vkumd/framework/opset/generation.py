"""Ops a decoder language model's step needs beyond the transformer encoder's: the gated
feed-forward activation ``swiglu`` (Llama's ``silu(gate) * up``), which runs as a generated
elementwise kernel and so fuses with its neighbours.

Rotary embedding is :mod:`~vkumd.framework.opset.rotary`'s, the cache update
:mod:`~vkumd.framework.opset.kv_cache`'s, ``argmax`` :mod:`~vkumd.framework.opset.argmax`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.operands import Types, need_float, same_dtype
from vkumd.framework.graph.reference import quiet
from vkumd.framework.graph.registry import OPS, Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_pair, check_storage, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import one_step
from vkumd.framework.tensor import Tensor

# The result's type by (gate's shape and dtype name, up's): calls the rule accepted.
_VERDICTS: Verdicts = {}


def _silu(x: np.ndarray) -> np.ndarray:
    return x / (1.0 + np.exp(-x))


def swiglu(gate: Tensor, up: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``silu(gate) * up`` elementwise, with numpy broadcasting: the gated feed-forward
    activation of Llama-family models (``silu(x) = x * sigmoid(x)``).

    Computed in float32 (a generated kernel, which fuses with neighbouring elementwise ops
    in a graph) and rounded once to the operands' type.

    Args:
        gate: float32, float16 or bfloat16 tensor (the gate projection's output).
        up: a tensor of gate's dtype, broadcastable with gate (the up projection's).
        out: optional output of the broadcast shape and the operands' dtype.

    Returns:
        The result.

    Raises:
        VkumdTypeError: a non-float operand, operands of different dtypes, out of another
            dtype.
        VkumdValueError: shapes that do not broadcast, operands of different contexts, out
            of another shape.
    """
    context = check_pair("swiglu", gate, up, "gate", "up")
    key = (gate.shape, gate.dtype.name, up.shape, up.dtype.name)
    result = recall(_VERDICTS, key)
    if result is None:
        (result,) = concrete_rule("swiglu", (gate, up), {})
        result = remember(_VERDICTS, key, result)
    if result.dtype.itemsize < 4:
        check_storage("swiglu", result.dtype, context)
    out = output("swiglu", context, out, tuple(result.shape), result.dtype)
    if out.size == 0:
        return out
    # The generated kernels' family declares the fused op's eager function; it imports the
    # op families, so it is found through its record.
    fused = OPS["fused_elementwise"].eager
    return fused([gate, up], (("swiglu", 0, 1),), dtype=result.dtype, out=out)


def _swiglu_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    gate, up = ins
    assert gate is not None and up is not None  # required inputs, checked by the registry
    need_float("swiglu", gate, "gate")
    need_float("swiglu", up, "up")
    dtype = same_dtype("swiglu", ("gate", gate), ("up", up))
    try:
        shape = dims.broadcast(gate.shape, up.shape)
    except VkumdValueError as exc:
        raise VkumdValueError(f"swiglu: gate {format_shape(gate.shape)} and up "
                              f"{format_shape(up.shape)} do not broadcast ({exc})") from None
    return [TensorType(shape, dtype)]


define("swiglu", ("gate", "up"), rule=_swiglu_rule,
       reference=lambda a, attrs, s: [quiet(_silu, a[0]) * a[1]],
       inplace=True, elementwise=Elementwise(2, "(vkumd_silu({a}) * {b})"), lower=one_step,
       eager=swiglu)
