"""``bitcast``: a tensor's bits read as another type of the same width (ONNX's BitCast), a
view of the same memory: no copy, no launch."""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.graph.operands import Types, only
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor
from vkumd.framework.tensor import Tensor


def check_widths(source: dtypes.DType, target: dtypes.DType) -> None:
    """Refuse a bitcast between types of different widths.

    Raises:
        VkumdTypeError: the widths differ (naming both and what to do).
    """
    if source.bits != target.bits:
        raise VkumdTypeError(f"bitcast: {source.name} ({source.bits} bits) to {target.name} "
                             f"({target.bits} bits): a bitcast reads the same bits as another "
                             "type, so both must have the same width; use cast() to convert "
                             "values")


def bitcast(t: Tensor, dtype: Any) -> Tensor:
    """``t``'s bits read as ``dtype`` (same shape), as ONNX's BitCast and numpy's ``view``
    between types of one width: a tensor viewing ``t``'s memory, never a copy (writes
    through either show in the other).

    Args:
        t: any tensor.
        dtype: a type of ``t``'s width in bits (float32, int32, uint32; float16, bfloat16,
            int16, uint16; int8, uint8, the float8 formats and float8_e8m0; int4, uint4,
            float4_e2m1; int2, uint2; float64, uint64).

    Raises:
        VkumdTypeError: the widths differ, or ``dtype`` is not a vkumd type.
        CapabilityMissing: the device cannot store ``dtype``.
    """
    check_tensor("bitcast", t, "the tensor")
    target = dtypes.dtype(dtype)
    check_widths(t.dtype, target)
    check_storage("bitcast", target, t.context)
    if target is t.dtype:
        return t.as_strided(t.shape, t.element_strides, t.element_offset)
    return t.as_strided(t.shape, t.element_strides, t.element_offset, target)


def _rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    source = only(ins)
    target = dtypes.dtype(attrs["dtype"])
    if attrs["source"] is not None and source.dtype.name != attrs["source"]:
        raise VkumdTypeError(f"bitcast: the input is {source.dtype.name}; the node says "
                             f"source={attrs['source']!r}")
    check_widths(source.dtype, target)
    return [TensorType(source.shape, target)]


def reinterpret(values: np.ndarray, source: dtypes.DType, target: dtypes.DType
                ) -> np.ndarray:
    """Values of ``source`` (as numpy holds them) read as ``target``'s (the reference)."""
    bits = dtypes.to_storage(np.asarray(values).astype(source.numpy), source)
    if source.is_packed or target.is_packed:
        return np.reshape(dtypes.from_storage(bits, target, np.shape(values)), np.shape(values))
    return dtypes.from_storage(bits.view(target.storage), target)


def _reference(a: list[np.ndarray], attrs: dict[str, Any], s: Any) -> list[np.ndarray]:
    target = dtypes.dtype(attrs["dtype"])
    if attrs["source"] is None:
        raise VkumdTypeError("bitcast: the float64 reference reads the input's bits, so the "
                             "node needs source= (the input's dtype name)")
    return [np.asarray(reinterpret(a[0], dtypes.dtype(attrs["source"]), target), np.float64)]


def _host(ctx: Any, xs: list[Any], attrs: dict[str, Any], shapes: Any) -> Any:
    return bitcast(xs[0], attrs["dtype"])


# source: the input's dtype name, which the float64 reference needs to rebuild the bits (a
# reference sees values only); None where the node is made without it (traced code).
define("bitcast", ("x",), {"dtype": REQUIRED, "source": None}, rule=_rule,
       reference=_reference, view=True, host=_host, eager=bitcast)
