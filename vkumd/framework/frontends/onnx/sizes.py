"""The size of a node's result, known before the node is computed on the host.

ONNX's own shape inference, run on the one node with the values of its small inputs, says
how many bytes each result will take. The importer asks before folding a node
(:mod:`.fold`) and :mod:`.derived` before computing a value from the sizes, so a result past
:func:`~vkumd.settings.fold_limit` is refused before it is allocated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import onnx
from onnx import defs, helper, numpy_helper, shape_inference

# Inputs up to this many elements are handed to shape inference as values (shapes, axes,
# repeats, bounds); bigger ones only as types.
_VALUE_ELEMENTS = 4096


def _type(bound: Any) -> onnx.TypeProto:
    """The TypeProto of an array, or of anything with ``shape`` (ints or symbols) and
    ``dtype`` (a value computed from the sizes)."""
    dtype = np.dtype(np.int64) if bound.dtype == object else np.dtype(bound.dtype)
    dims = [int(d) if isinstance(d, (int, np.integer)) else None for d in bound.shape]
    return helper.make_tensor_type_proto(helper.np_dtype_to_tensor_dtype(dtype), dims)


def result_bytes(node: onnx.NodeProto, bound: Mapping[str, Any], opset: int | None
                 ) -> int | None:
    """The bytes of the node's results, or None when inference cannot tell (an unknown
    operator, a symbolic or data-dependent size).

    Args:
        node: the node.
        bound: its inputs by name: arrays, or objects with ``shape`` and ``dtype``.
        opset: the model's default-domain opset (None: the newest).
    """
    try:
        schema = (defs.get_schema(node.op_type, opset, node.domain) if opset is not None
                  else defs.get_schema(node.op_type, node.domain))
        types, values = {}, {}
        for name in node.input:
            if not name:
                continue
            value = bound[name]
            types[name] = _type(value)
            if (isinstance(value, np.ndarray) and value.dtype != object
                    and value.size <= _VALUE_ELEMENTS):
                values[name] = numpy_helper.from_array(value, name)
        imports = [helper.make_opsetid("", opset)] if opset is not None else None
        outputs = shape_inference.infer_node_outputs(schema, node, types, values,
                                                     opset_imports=imports)
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


def over_limit(size: int, limit: int) -> str:
    """The refusal's words for a result of ``size`` bytes past ``limit``."""
    return (f"its result would take {size} bytes of host memory, more than the fold limit "
            f"of {limit} bytes; raise VKUMD_FOLD_LIMIT if the model is trusted and the "
            "memory is there")
