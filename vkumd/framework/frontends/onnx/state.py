"""What a converter sees while a model is imported: the names bound so far and helpers.

Every ONNX tensor name is bound either to a graph :class:`~vkumd.framework.graph.Value` or
to a *known* numpy array: an initializer, a ``Constant``, or a result computed at import time
(shape arithmetic: ``Shape -> Gather -> Concat -> Reshape``). Known arrays keep ONNX's own
dtype (int64 stays int64); shape vectors with symbolic dimensions are object arrays of ints
and :class:`~vkumd.framework.graph.Dim`. A known array becomes a weight only when a node of
the graph reads it. A name may also be bound to a :class:`~.derived.Derived`: computed from
the symbolic sizes when the model is called, a graph input once a device node reads it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import helper

from vkumd.framework import dtypes
from vkumd.framework.frontends.onnx.derived import Derived
from vkumd.framework.frontends.onnx.errors import NeedsConstant, Unsupported
from vkumd.framework.graph import Dim, GraphBuilder, Value
from vkumd.framework.packed import ML_DTYPES_NAMES

Bound = Value | np.ndarray | Derived
Converter = Callable[["State", onnx.NodeProto, dict[str, Any]], list[Bound | None]]

_INT32 = np.iinfo(np.int32)
# Known arrays up to this many elements are shapes, axes or scalars to converters.
SHAPE_LIKE = 64

# ONNX element types vkumd stores, and as what. INT64 is narrowed to int32 (indices, shapes:
# values are range-checked) unless it carries data, which is int64 (int64_values.py, read
# from State.int64_data); bool is bool, as vkumd's comparisons give.
IR_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT: "float32", onnx.TensorProto.FLOAT16: "float16",
    onnx.TensorProto.BFLOAT16: "bfloat16", onnx.TensorProto.INT32: "int32",
    onnx.TensorProto.INT64: "int32", onnx.TensorProto.INT8: "int8",
    onnx.TensorProto.UINT8: "uint8", onnx.TensorProto.BOOL: "bool",
    # Stored as they are (kernels take what the device's features allow: elementwise.py).
    onnx.TensorProto.INT16: "int16", onnx.TensorProto.UINT16: "uint16",
    onnx.TensorProto.UINT32: "uint32", onnx.TensorProto.UINT64: "uint64",
    onnx.TensorProto.DOUBLE: "float64",
}
# The float8 formats: a byte each, read back as float32 (vkumd/framework/float8.py).
FLOAT8_IR_DTYPES: dict[int, str] = {
    onnx.TensorProto.FLOAT8E4M3FN: "float8_e4m3fn",
    onnx.TensorProto.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    onnx.TensorProto.FLOAT8E5M2: "float8_e5m2",
    onnx.TensorProto.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
}
IR_DTYPES.update(FLOAT8_IR_DTYPES)
# The packed types: elements packed into bytes, read back as int8, uint8 or float32
# (vkumd/framework/packed.py).
PACKED_IR_DTYPES: dict[int, str] = {
    onnx.TensorProto.INT4: "int4", onnx.TensorProto.UINT4: "uint4",
    onnx.TensorProto.INT2: "int2", onnx.TensorProto.UINT2: "uint2",
    onnx.TensorProto.FLOAT4E2M1: "float4_e2m1", onnx.TensorProto.FLOAT8E8M0: "float8_e8m0",
}
IR_DTYPES.update(PACKED_IR_DTYPES)


def type_name(elem_type: int) -> str:
    """ONNX's name of an element type (``FLOAT``, ``INT64``...)."""
    return onnx.TensorProto.DataType.Name(elem_type)


def ir_dtype(elem_type: int) -> str:
    """The IR dtype that stores ONNX ``elem_type``.

    Raises:
        Unsupported: a type vkumd does not store (float64, strings, complex, int4...).
    """
    if elem_type not in IR_DTYPES:
        raise Unsupported(f"{type_name(elem_type)} tensors are not supported (vkumd stores "
                          "float32, float16, bfloat16, float64, int32, int16, int8, uint32, "
                          "uint16, uint8, uint64, bool, the float8 formats, int4, uint4, int2, "
                          "uint2, float4_e2m1, float8_e8m0, int64 (as int32 for indices))")
    return IR_DTYPES[elem_type]


@dataclass(frozen=True)
class ConverterSpec:
    """A registered converter and the attributes it understands."""

    fn: Converter
    attrs: frozenset[str]
    derived: bool = False


CONVERTERS: dict[str, ConverterSpec] = {}


def converter(*op_types: str, attrs: Iterable[str] = (), derived: bool = False
              ) -> Callable[[Converter], Converter]:
    """Decorator: ``fn`` converts nodes of ``op_types``; any attribute not in ``attrs`` is
    refused (so an attribute vkumd ignores cannot change a result silently). A node whose
    inputs are all known or :class:`~.derived.Derived` is computed on the host (a Derived)
    unless ``derived`` says the converter takes Derived inputs itself."""

    def wrap(fn: Converter) -> Converter:
        for op in op_types:
            CONVERTERS[op] = ConverterSpec(fn, frozenset(attrs), derived)
        return fn

    return wrap


def node_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """The node's attributes as Python values (strings decoded)."""
    out: dict[str, Any] = {}
    for a in node.attribute:
        value = helper.get_attribute_value(a)
        if a.type == onnx.AttributeProto.FLOAT:
            # ONNX stores float attributes as float32; the shortest decimal that rounds to
            # the same float32 is what the author wrote (epsilon 1e-12, not 9.99999996e-13).
            value = float(str(np.float32(value)))
        out[a.name] = value.decode() if isinstance(value, bytes) else value
    return out


def tidy(array: Any) -> np.ndarray:
    """An object array of plain ints becomes int64 (so numpy arithmetic on it is fast)."""
    if not isinstance(array, np.ndarray):  # numpy hands back one element of an object array
        boxed = np.empty((), dtype=object)
        boxed[()] = array
        array = boxed
    if array.dtype == object and all(isinstance(v, (int, np.integer)) for v in array.flat):
        return array.astype(np.int64)
    return array


def is_symbolic(array: np.ndarray) -> bool:
    """Whether a known array holds symbolic dimensions."""
    return array.dtype == object


class State:
    """The bindings of one import and the helpers converters share.

    Args:
        builder: the builder the graph is made with.
        opset: the model's default-domain opset version.
    """

    def __init__(self, builder: GraphBuilder, opset: int) -> None:
        self.b = builder
        self.opset = opset
        self.env: dict[str, Bound] = {}
        self.onnx_types: dict[str, int] = {}
        self._weights: dict[str, Value] = {}
        # Graph input name -> the ONNX name of the Derived it is filled from.
        self.derived_inputs: dict[str, str] = {}
        # Set while converting a node whose result is past the fold limit: known arrays
        # bigger than shape-like vectors then read as unknown, so the converter emits device
        # work (on weights) instead of computing the result on the host.
        self.device_only = False
        # Set by the importer: convert one node, recording refusals (list) and the names
        # they make unusable (set); control flow inlines its subgraphs' nodes through it.
        self.convert_node: Callable[[onnx.NodeProto, list[Any], set[str]], None] | None = None
        # INT64 values that carry data, computed as int64 (the importer fills it from
        # int64_values.int64_data_values); every other INT64 value is narrowed to int32.
        self.int64_data: frozenset[str] = frozenset()

    def bind(self, name: str, value: Bound) -> None:
        """Bind an ONNX name to a value or a known array."""
        self.env[name] = value

    def present(self, node: onnx.NodeProto, i: int) -> bool:
        """Whether the node's input ``i`` is given (ONNX writes an absent one as ``""``)."""
        return i < len(node.input) and node.input[i] != ""

    def known(self, name: str) -> np.ndarray | None:
        """The array bound to ``name`` when it is known at import time, else None (and None
        for all but small arrays while :attr:`device_only` is set)."""
        bound = self.env[name]
        if not isinstance(bound, np.ndarray):
            return None
        if self.device_only and bound.dtype != object and bound.size > SHAPE_LIKE:
            return None
        return bound

    def shape(self, name: str) -> tuple[int | Dim, ...]:
        """The shape of what ``name`` is bound to."""
        bound = self.env[name]
        return tuple(bound.shape) if isinstance(bound, np.ndarray) else tuple(bound.shape)

    def dtype(self, name: str) -> str:
        """The IR dtype of what ``name`` is bound to (a known array: as it would be stored)."""
        bound = self.env[name]
        if isinstance(bound, Value):
            return bound.dtype.name
        if isinstance(bound, Derived):
            return self._storage(np.empty(0, bound.dtype))[1]
        return self._storage(bound)[1]

    def ints(self, name: str, what: str) -> list[int]:
        """A known vector (or scalar) of plain ints.

        Raises:
            Unsupported: ``name`` is computed at run time or holds symbolic dimensions.
        """
        array = self.known(name)
        if array is None:
            raise NeedsConstant(f"{what} must be a constant (it is computed at run time)", name)
        array = tidy(array)
        if is_symbolic(array) or array.dtype.kind not in "iub":
            raise Unsupported(f"{what} must hold integers known at import time, got "
                              f"{array.tolist()}")
        return [int(v) for v in array.reshape(-1)]

    def dims(self, name: str, what: str) -> list[int | Dim]:
        """A known vector of ints and symbolic dimensions (a shape).

        Raises:
            Unsupported: ``name`` is computed at run time.
        """
        array = self.known(name)
        if array is None:
            raise NeedsConstant(f"{what} must be known at import time (a constant or "
                                "computed from shapes); it is computed at run time", name)
        return [v if isinstance(v, Dim) else int(v) for v in array.reshape(-1)]

    def scalar(self, name: str) -> float | None:
        """The single number a known input holds, or None (unknown, or several values)."""
        array = self.known(name)
        if array is None or array.size != 1 or is_symbolic(array):
            return None
        return float(array.reshape(-1)[0])

    def value(self, name: str) -> Value:
        """``name`` as a graph value; a known array becomes a weight (once per name).

        Raises:
            Unsupported: an array of a type vkumd does not store, int64 values outside int32,
                or a shape with symbolic dimensions used as a tensor.
        """
        bound = self.env[name]
        if isinstance(bound, Value):
            return bound
        if isinstance(bound, Derived):
            if name not in self._weights:
                dt = self._storage(np.empty(0, bound.dtype))[1]
                input_name = self.b.graph.unique_name(name or "derived")
                self._weights[name] = self.b.input(input_name, bound.shape, dt)
                self.derived_inputs[input_name] = name
            return self._weights[name]
        if name not in self._weights:
            data, dt = self._storage(bound, name in self.int64_data)
            weight_name = self.b.graph.unique_name(name or "const")
            self._weights[name] = self.b.weight(weight_name, data, dt)
        return self._weights[name]

    def constant(self, data: np.ndarray, dtype: str) -> Value:
        """A fresh unnamed constant of IR ``dtype``."""
        return self.b.constant(np.asarray(data), dtype)

    @staticmethod
    def _storage(array: np.ndarray, int64_data: bool = False) -> tuple[np.ndarray, str]:
        if is_symbolic(tidy(array)):
            raise Unsupported(f"the shape {array.tolist()} has symbolic dimensions and cannot "
                              "be used as a tensor")
        array = tidy(array)
        kind, size = array.dtype.kind, array.dtype.itemsize
        if int64_data and array.dtype == np.int64:
            return array, "int64"  # data, not indices: stored exactly (int64_values.py)
        if kind == "b":
            return array, "bool"
        if kind in "iu" and (size == 8 or (kind == "u" and size > 1) or size == 2):
            if array.size and (array.min() < _INT32.min or array.max() > _INT32.max):
                raise Unsupported(f"{array.dtype} values outside int32's range cannot be "
                                  "stored (vkumd narrows int64 to int32)")
            return array.astype(np.int32), "int32"
        if array.dtype.name == "bfloat16" or array.dtype.name in FLOAT8_IR_DTYPES.values():
            return array.astype(np.float32), array.dtype.name  # exact; stored back as bits
        if array.dtype.name in ML_DTYPES_NAMES:  # ml_dtypes' packed types: unpacked exactly
            name = ML_DTYPES_NAMES[array.dtype.name]
            return array.astype(dtypes.dtype(name).numpy), name
        try:
            return array, dtypes.dtype(array.dtype).name
        except Exception as exc:
            raise Unsupported(f"{array.dtype} tensors are not supported") from exc
