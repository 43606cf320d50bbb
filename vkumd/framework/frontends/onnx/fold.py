"""How big a node's result would be, found before the importer computes it on the host.

A node whose inputs are all known is folded at import time (computed once, on the host). Its
result can be far bigger than the file (``ConstantOfShape`` of ``[16000, 16000]`` is 1 GiB
from a 152-byte model), so its size is inferred first by ONNX's own shape inference, run on
the one node with the known inputs' values, and folding stops at
:func:`~vkumd.settings.fold_limit` bytes (``VKUMD_FOLD_LIMIT``).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, shape_inference

from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import State, tidy
from vkumd.settings import fold_limit

# Known inputs up to this many elements are handed to shape inference as values (shapes,
# axes, repeats, bounds); bigger ones only as types.
_VALUE_ELEMENTS = 4096


def _type(array: np.ndarray | Derived) -> onnx.TypeProto:
    if isinstance(array, Derived):
        dims = [d if isinstance(d, int) else None for d in array.shape]
        return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(array.dtype), dims)
    dtype = np.dtype(np.int64) if array.dtype == object else array.dtype
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtype), array.shape)


def result_bytes(st: State, node: onnx.NodeProto) -> int | None:
    """The bytes of the node's results, from its known inputs; None when inference cannot
    tell (an unknown operator, a symbolic size)."""
    try:
        schema = defs.get_schema(node.op_type, st.opset, node.domain)
        types, values = {}, {}
        for name in node.input:
            if not name:
                continue
            bound = st.env[name]
            if not isinstance(bound, (np.ndarray, Derived)):
                return None
            types[name] = _type(bound)
            if isinstance(bound, np.ndarray):
                array = tidy(bound)
                if array.dtype != object and array.size <= _VALUE_ELEMENTS:
                    values[name] = numpy_helper.from_array(array, name)
        outputs = shape_inference.infer_node_outputs(
            schema, node, types, values, opset_imports=[helper.make_opsetid("", st.opset)])
        total = 0
        for out in outputs.values():
            tensor = out.tensor_type
            if not tensor.HasField("shape"):
                return None
            dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
            if any(d is None for d in dims):
                return None
            item = np.dtype(helper.tensor_dtype_to_np_dtype(tensor.elem_type)).itemsize
            total += math.prod(dims) * item
        return total
    except Exception:  # noqa: BLE001 -- onnx's inference raises its own and builtins
        return None


def too_big(st: State, node: onnx.NodeProto) -> str | None:
    """Why the node must not be folded (its size and the limit), or None when it may be."""
    size = result_bytes(st, node)
    limit = fold_limit()
    if size is None or size <= limit:
        return None
    return over_limit(size, limit)


def over_limit(size: int, limit: int) -> str:
    """The refusal's words for a result of ``size`` bytes past ``limit``."""
    return (f"its result would take {size} bytes of host memory at import, more than the "
            f"fold limit of {limit} bytes; raise VKUMD_FOLD_LIMIT if the model is trusted "
            "and the memory is there")


def check_fold(shape: tuple[int, ...], dtype: np.dtype) -> None:
    """Refuse, before allocating it, a known array of ``shape`` past the fold limit.

    Raises:
        Unsupported: it is past the limit.
    """
    size = math.prod(shape) * np.dtype(dtype).itemsize
    limit = fold_limit()
    if size > limit:
        raise Unsupported(f"a constant of shape {list(shape)}: {over_limit(size, limit)} "
                          "(vkumd has no device op that creates it)")
