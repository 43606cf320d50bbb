"""Converters of the boolean operators, IsNaN, elementwise Max/Min and GatherND.

vkumd's fused elementwise kernel computes in float, with ``where`` taking a bool (or integer)
condition; so the logical operators are written on 0.0/1.0 (``where(a, 1, 0)``) and compared
back to bool, which the elementwise fusion makes one kernel with the ``Where`` that reads the
result (as torch's exported attention masks do).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.limits import INTEGER_DTYPES
from vkumd.framework.frontends.onnx.derived import Derived, concrete, evaluate, probes, symbols_of
from vkumd.framework.frontends.onnx.errors import OnHost, Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Dim, Value

_FLOATS = ("float32", "float16", "bfloat16")


def _unit(st: State, name: str) -> Value:
    """A bool (any integer) input as float32 0.0/1.0."""
    x = st.value(name)
    one = st.constant(np.ones((), np.float32), "float32")
    zero = st.constant(np.zeros((), np.float32), "float32")
    return st.b.where(x, one, zero)


def _to_bool(st: State, x: Value) -> Value:
    return st.b.ne(x, st.constant(np.zeros((), np.float32), x.dtype.name))


@converter("And", "Or", "Xor")
def logical(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``a and b`` as ``a * b != 0``, ``or`` as ``a + b != 0``, ``xor`` as ``a != b``."""
    a, b = _unit(st, node.input[0]), _unit(st, node.input[1])
    if node.op_type == "Xor":
        return [st.b.ne(a, b)]
    return [_to_bool(st, st.b.mul(a, b) if node.op_type == "And" else st.b.add(a, b))]


@converter("Not")
def logical_not(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``not a`` as ``a == 0``."""
    a = _unit(st, node.input[0])
    return [st.b.eq(a, st.constant(np.zeros((), np.float32), "float32"))]


@converter("IsNaN")
def is_nan(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``x != x``, true only for NaN."""
    x = st.value(node.input[0])
    if x.dtype.name not in _FLOATS:
        raise Unsupported(f"IsNaN of {x.dtype.name}")
    return [st.b.ne(x, x)]


@converter("Max", "Min")
def extremum(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The elementwise maximum (minimum) of one or more inputs with numpy broadcasting: a
    chain of ``maximum`` (``minimum``), one fused kernel for floats (NaN propagates), the
    binary kernel for the integers and float64."""
    names = [n for n in node.input if n]
    values = [st.value(n) for n in names]
    if any(v.dtype.name not in (*_FLOATS, *INTEGER_DTYPES, "float64") for v in values):
        raise Unsupported("Max/Min of types other than the floats and integers")
    op = "maximum" if node.op_type == "Max" else "minimum"
    out = values[0]
    for v in values[1:]:
        out = st.b.op(op, out, v)
    return [out]


def _grid_axes(index: np.ndarray, sizes: tuple[int, ...]) -> list[int] | None:
    """For GatherND indices ``[..., r]`` that address every element of a ``sizes`` array in
    order, each component running along one axis of its own (``index[..., k]`` is
    ``arange(sizes[k])`` along axis ``a_k``, constant along the others): the axes; else None."""
    axes: list[int] = []
    for k, size in enumerate(sizes):
        part = index[..., k]
        found = None
        for a in range(part.ndim):
            if part.shape[a] != size:
                continue
            want = np.arange(size).reshape([size if i == a else 1 for i in range(part.ndim)])
            if np.array_equal(part, np.broadcast_to(want, part.shape)):
                found = a
                break
        if found is None or (axes and found <= axes[-1]):
            return None
        axes.append(found)
    return axes


@converter("GatherND", attrs=("batch_dims",), derived=True)
def gather_nd(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """GatherND whose known or size-derived indices pick every element of ``data`` in order,
    spread over axes of their own (``mask[b, j]`` at ``[b, 1, 1, j]``, torch's export of an
    attention mask): a reshape of ``data``. Any other indices (run-time ones included):
    ``vkumd.ops.gather_nd`` (out-of-range tuples give zeros)."""
    batch_dims = attrs.get("batch_dims", 0)
    bound = st.env[node.input[1]]
    if not isinstance(st.env[node.input[0]], Value) and not isinstance(bound, Value):
        raise OnHost("a gather from known or size-derived data")
    if batch_dims == 0 and isinstance(bound, (np.ndarray, Derived)):
        try:
            return [_gather_as_reshape(st, node, bound)]
        except Unsupported:
            pass
    ids = st.value(node.input[1])
    if ids.dtype.name != "int32":
        raise Unsupported(f"indices of type {ids.dtype.name} (ONNX allows int64)")
    return [st.b.gather_nd(st.value(node.input[0]), ids, batch_dims=batch_dims)]


def _gather_as_reshape(st: State, node: onnx.NodeProto, bound: np.ndarray | Derived) -> Value:
    """The GatherND as a reshape of data, for indices that pick all of it in order.

    Raises:
        Unsupported: other indices.
    """
    data = st.value(node.input[0])
    rank = len(data.shape)
    out_shape = tuple(bound.shape[:-1])
    if not bound.shape or bound.shape[-1] != rank:
        raise Unsupported("indices that do not address single elements of data")
    symbols = sorted(set(symbols_of(node.input[1], st.env)).union(
        *(d.symbols for d in data.shape if isinstance(d, Dim))))
    for bindings in probes(symbols) if symbols else ({},):
        index = evaluate(node.input[1], st.env, bindings, {})
        sizes = tuple(int(concrete(np.asarray([d], object), bindings)[0])
                      if isinstance(d, Dim) else int(d) for d in data.shape)
        axes = _grid_axes(np.where(index < 0, index + np.asarray(sizes), index), sizes)
        rest = [d for i, d in enumerate(index.shape[:-1]) if axes is None or i not in axes]
        if axes is None or any(d != 1 for d in rest):
            raise Unsupported("indices other than every element of data, in order, spread "
                              "over axes of size one")
    return st.b.reshape(data, out_shape)


_BITWISE = {"BitwiseAnd": ("bitwise_and", np.bitwise_and),
            "BitwiseOr": ("bitwise_or", np.bitwise_or),
            "BitwiseXor": ("bitwise_xor", np.bitwise_xor)}


@converter(*_BITWISE)
def bitwise(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """BitwiseAnd, BitwiseOr, BitwiseXor of integer tensors, numpy broadcasting (folded when
    both are known)."""
    op, fold = _BITWISE[node.op_type]
    a, b = st.known(node.input[0]), st.known(node.input[1])
    if a is not None and b is not None and a.dtype != object and b.dtype != object:
        return [np.asarray(fold(a, b))]
    return [st.b.op(op, st.value(node.input[0]), st.value(node.input[1]))]


@converter("BitwiseNot")
def bitwise_not(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``~x`` as ``bitwise_xor`` with all ones (folded when known)."""
    known = st.known(node.input[0])
    if known is not None and known.dtype != object:
        return [np.asarray(np.invert(known))]
    x = st.value(node.input[0])
    ones = np.array(-1, np.int64).astype(x.dtype.name)  # 0xFF for uint8: numpy wraps
    return [st.b.op("bitwise_xor", x, st.constant(ones, x.dtype.name))]


@converter("BitShift", attrs=("direction",))
def bit_shift(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``x << y`` or ``x >> y`` (``direction``) of unsigned tensors (uint8 stored)."""
    direction = attrs.get("direction")
    if direction not in ("LEFT", "RIGHT"):
        raise Unsupported(f"direction={direction!r}; ONNX takes 'LEFT' or 'RIGHT'")
    a, b = st.known(node.input[0]), st.known(node.input[1])
    if a is not None and b is not None and a.dtype != object and b.dtype != object:
        fold = np.left_shift if direction == "LEFT" else np.right_shift
        return [np.asarray(fold(a, b))]
    op = "bitwise_left_shift" if direction == "LEFT" else "bitwise_right_shift"
    return [st.b.op(op, st.value(node.input[0]), st.value(node.input[1]))]
