"""Converters of ONNX's arithmetic, activation and comparison operators.

Each returns the node's outputs (graph values or, when every input is known at import time,
numpy arrays computed here, which is how shape arithmetic folds).
"""

from __future__ import annotations

from typing import Any

import ml_dtypes  # onnx's own dependency: its packed and float8 arrays are ml_dtypes'
import numpy as np
import onnx

from vkumd.compiler.kernels.limits import INTEGER_DTYPES
from vkumd.errors import VkumdTypeError
from vkumd.framework import dtypes
from vkumd.framework.float8 import FORMATS
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import (
    IR_DTYPES,
    Bound,
    State,
    converter,
    ir_dtype,
    tidy,
)
from vkumd.framework.opset.bitcast import check_widths
from vkumd.framework.opset.packed import check_packed_pair
from vkumd.framework.opset.unary import FLOAT8_PARTNERS
from vkumd.framework.packed import FORMATS as PACKED_FORMATS
from vkumd.framework.packed import ML_DTYPES_NAMES, floats_to_codes, ints_to_codes

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Equal": "eq",
           "Less": "lt", "LessOrEqual": "le", "Greater": "gt", "GreaterOrEqual": "ge"}
_FOLD = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal,
         "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater,
         "GreaterOrEqual": np.greater_equal}
_UNARY = {"Sqrt": "sqrt", "Exp": "exp", "Erf": "erf", "Tanh": "tanh", "Sigmoid": "sigmoid",
          "Relu": "relu", "HardSwish": "hardswish"}


def _fold_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == object or b.dtype == object:
        return np.vectorize(lambda x, y: x // y, otypes=[object])(a, b)  # exact (Dim // int)
    if a.dtype.kind in "iu":
        # ONNX integer division truncates toward zero, as C does.
        return np.trunc(np.divide(a, b)).astype(a.dtype)
    # 0-d operands divide to a numpy scalar, which tidy would box as an object array.
    return np.asarray(np.divide(a, b))


def _as_scale(st: State, node: onnx.NodeProto) -> Bound | None:
    """A float ``Mul`` by a one-element constant (either side), or ``Div`` by one, as the
    ``scale`` op a native model would write (``x / c`` becomes ``x * (1/c)``, within 1 ulp)."""
    if node.op_type not in ("Mul", "Div"):
        return None
    sides = [(0, 1)] if node.op_type == "Div" else [(0, 1), (1, 0)]
    for var, const in sides:
        c = st.scalar(node.input[const])
        if c is None or st.known(node.input[var]) is not None:
            continue
        x = st.value(node.input[var])
        grown = len(st.shape(node.input[const])) > len(x.shape)
        if x.dtype.name not in ("float32", "float16", "bfloat16") or grown or c == 0.0:
            continue
        return st.b.scale(x, c if node.op_type == "Mul" else 1.0 / c)
    return None


@converter(*_BINARY)
def binary(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Add, Sub, Mul, Div and the comparisons, with numpy broadcasting."""
    x, y = node.input[0], node.input[1]
    a, b = st.known(x), st.known(y)
    if a is not None and b is not None:
        if node.op_type == "Div":
            return [tidy(_fold_div(a, b))]
        out = np.asarray(_FOLD[node.op_type](a, b))
        return [tidy(out) if out.dtype == object else out]
    op = _BINARY[node.op_type]
    scaled = _as_scale(st, node)
    if scaled is not None:
        return [scaled]
    va, vb = st.value(x), st.value(y)
    if op == "div" and va.dtype.name in INTEGER_DTYPES:
        return [st.b.div(va, vb, rounding="trunc")]
    return [st.b.op(op, va, vb)]


@converter(*_UNARY)
def unary(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Sqrt, Exp, Erf, Tanh, Sigmoid, Relu, HardSwish: one IR op each."""
    return [st.b.op(_UNARY[node.op_type], st.value(node.input[0]))]


@converter("Neg")
def neg(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``-x`` as ``scale(x, -1)`` (folded for known shapes); float64 as ``neg`` (the scale
    kernel takes the 32- and 16-bit types)."""
    known = st.known(node.input[0])
    if known is not None:
        # A 0-d float array negates to a numpy scalar, which tidy would box as an object.
        return [tidy(-known) if known.dtype == object else np.asarray(-known)]
    x = st.value(node.input[0])
    if x.dtype.name == "float64":
        return [st.b.op("neg", x)]
    return [st.b.scale(x, -1.0)]


@converter("Pow")
def power(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``x ** y`` with numpy broadcasting: ``x``, ``x * x``, ``sqrt(x)`` for a constant float
    exponent of 1, 2 or 0.5, else ``pow`` (an integer exponent of a float base cast to the
    base's type; folded when both are known)."""
    base, exponent = st.known(node.input[0]), st.known(node.input[1])
    if base is not None and exponent is not None and base.dtype != object \
            and exponent.dtype != object:
        with np.errstate(all="ignore"):
            return [np.asarray(np.power(base, exponent)).astype(base.dtype)]
    x = st.value(node.input[0])
    floats = x.dtype.name in ("float32", "float16", "bfloat16")
    scalar = st.scalar(node.input[1])
    if floats and scalar == 1.0:
        return [x]
    if floats and scalar == 2.0:
        return [st.b.mul(x, x)]
    if floats and scalar == 0.5:
        return [st.b.sqrt(x)]
    if exponent is not None:
        if exponent.dtype == object:
            raise Unsupported("an exponent of symbolic sizes")
        if not floats and not np.all(np.mod(exponent, 1) == 0):
            raise Unsupported(f"an integer base ({x.dtype.name}) with a non-integer exponent")
        return [st.b.pow(x, st.constant(exponent, x.dtype.name))]
    y = st.value(node.input[1])
    if y.dtype.name != x.dtype.name:
        if not floats or y.dtype.name not in INTEGER_DTYPES:
            raise Unsupported(f"the base is {x.dtype.name} and the exponent {y.dtype.name}: "
                              "vkumd takes one type, or a float base with an integer exponent")
        y = st.b.cast(y, x.dtype.name)
    return [st.b.pow(x, y)]


@converter("Mod", attrs=("fmod",))
def mod(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The remainder with the divisor's sign (``fmod=0``, integers or floats), or with the
    dividend's (``fmod=1``, C's fmod), with numpy broadcasting."""
    truncated = attrs.get("fmod", 0)
    if truncated not in (0, 1):
        raise Unsupported(f"fmod={truncated} (ONNX takes 0 or 1)")
    a, b = st.known(node.input[0]), st.known(node.input[1])
    if a is not None and b is not None and a.dtype != object and b.dtype != object:
        with np.errstate(divide="ignore", invalid="ignore"):
            return [np.asarray((np.fmod if truncated else np.mod)(a, b))]
    return [st.b.op("fmod" if truncated else "remainder", st.value(node.input[0]),
                    st.value(node.input[1]))]


@converter("Gelu", attrs=("approximate",))
def gelu(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """GELU, exact (erf) or its tanh approximation."""
    mode = attrs.get("approximate", "none")
    if mode not in ("none", "tanh"):
        raise Unsupported(f"approximate={mode!r} is unknown")
    x = st.value(node.input[0])
    return [st.b.gelu(x) if mode == "none" else st.b.gelu_tanh(x)]


@converter("Where")
def where(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``where(cond, a, b)`` (cond bool, or an integer type: nonzero selects a)."""
    known = [st.known(n) for n in node.input]
    if all(k is not None for k in known):
        cond, a, b = known
        return [tidy(np.where(cond, a, b))]
    return [st.b.where(*(st.value(n) for n in node.input))]


@converter("Cast", attrs=("to", "saturate", "round_mode"))
def cast(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Cast to a stored type (to bool: whether the value is nonzero)."""
    return [_cast_to(st, node.input[0], attrs["to"], attrs, node.output[0])]


# The ONNX element type of a graph value, from its IR dtype: int32 stores INT32 and INT64
# alike (the same values: indices and shapes); int64 stores INT64 data; every other IR dtype
# stores one ONNX type.
_ONNX_OF_IR = {**{name: elem for elem, name in IR_DTYPES.items() if name != "int32"},
               "int32": onnx.TensorProto.INT32, "int64": onnx.TensorProto.INT64}


def like_type(st: State, name: str) -> int:
    """The ONNX element type CastLike converts to: that of the tensor named ``name`` (a
    run-time int32 one is INT32: vkumd stores INT64 as int32 too, the same values).

    Raises:
        Unsupported: ``name`` is of a type vkumd does not store.
    """
    known = st.known(name)
    if known is not None and known.dtype != object:
        return onnx.helper.np_dtype_to_tensor_dtype(known.dtype)
    if known is not None:  # a shape with symbolic dimensions: ONNX's int64
        return onnx.TensorProto.INT64
    dtype = st.dtype(name)
    if dtype in _ONNX_OF_IR:
        return _ONNX_OF_IR[dtype]
    raise Unsupported(f"CastLike to a {dtype} tensor: no ONNX type is known for it; use Cast")


@converter("CastLike", attrs=("saturate", "round_mode"))
def cast_like(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Cast to the element type of the second input (``target_type``), as Cast does."""
    target = like_type(st, node.input[1])
    return [_cast_to(st, node.input[0], target, attrs, node.output[0])]


def _cast_to(st: State, name: str, target: int, attrs: dict[str, Any], result: str = ""
             ) -> Bound:
    """``name`` converted to ONNX element type ``target`` (Cast's and CastLike's body); to
    int64 where ``result`` carries data (``st.int64_data``), else INT64 as int32."""
    round_mode = attrs.get("round_mode", "up")
    if round_mode != "up" and target != onnx.TensorProto.FLOAT8E8M0:
        raise Unsupported(f"round_mode={round_mode!r} is not supported")
    known = st.known(name)
    if known is not None and known.dtype == object:
        if target not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            raise Unsupported("a shape with symbolic dimensions cast to a non-integer type")
        return known
    want = ("int64" if target == onnx.TensorProto.INT64 and result in st.int64_data
            else ir_dtype(target))
    saturate = bool(attrs.get("saturate", 1))
    if known is not None:
        np_type = onnx.helper.tensor_dtype_to_np_dtype(target)
        if want in PACKED_FORMATS:  # packed.py's rules, ml_dtypes' and ONNX's
            return _packed_constant(known, want, saturate, round_mode)
        if want in FORMATS and saturate:  # ONNX's rule: clamp, then round to nearest even
            limit = FORMATS[want].max
            return np.clip(known.astype(np.float32), -limit, limit).astype(np_type)
        return known.astype(np_type)
    x = st.value(name)
    if x.dtype.name == want:
        return x
    ends = (x.dtype.name, want)
    if any(e in FORMATS for e in ends) and not all(e in FLOAT8_PARTNERS for e in ends):
        raise Unsupported(f"Cast from {ends[0]} to {ends[1]}: the float8 formats convert to "
                          "and from the float types only")
    if any(e in PACKED_FORMATS for e in ends):
        try:
            check_packed_pair(dtypes.dtype(ends[0]), dtypes.dtype(ends[1]))
        except VkumdTypeError as exc:
            raise Unsupported(str(exc)) from None
        return st.b.cast(x, want, saturate=saturate, round_mode=round_mode)
    return st.b.cast(x, want, saturate=saturate)


def _packed_constant(known: np.ndarray, want: str, saturate: bool, round_mode: str
                     ) -> np.ndarray:
    """A known array cast to packed type ``want``, as ml_dtypes' array of it."""
    fmt = PACKED_FORMATS[want]
    if fmt.is_int and known.dtype.kind in "iub":
        codes = ints_to_codes(known, fmt)
    else:
        codes = floats_to_codes(np.asarray(known, np.float32), fmt, saturate, round_mode)
    ml_name = next(k for k, v in ML_DTYPES_NAMES.items() if v == want)
    return codes.reshape(known.shape).view(getattr(ml_dtypes, ml_name))


@converter("Sum", "Mean")
def variadic_sum(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The elementwise sum (mean) of one or more inputs with numpy broadcasting: a chain of
    ``add`` (then a ``scale`` by ``1/n``), which elementwise fusion makes one kernel."""
    names = [n for n in node.input if n]
    if not names:
        raise Unsupported("no inputs (ONNX needs at least one)")
    known = [st.known(n) for n in names]
    if all(k is not None for k in known):
        total = known[0]
        for k in known[1:]:
            total = total + k
        if node.op_type == "Mean":
            total = total / len(names)
        return [tidy(np.asarray(total, dtype=known[0].dtype))]
    values = [st.value(n) for n in names]
    if node.op_type == "Mean" and values[0].dtype.name not in ("float32", "float16",
                                                                 "bfloat16"):
        raise Unsupported(f"Mean of {values[0].dtype.name} tensors (ONNX's Mean is of floats)")
    total = values[0]
    for v in values[1:]:
        total = st.b.add(total, v)
    if node.op_type == "Mean" and len(values) > 1:
        total = st.b.scale(total, 1.0 / len(values))
    return [total]


@converter("BitCast", attrs=("to",))
def bit_cast(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The input's bits read as type ``to`` of the same width: a view (``opset/bitcast.py``);
    a known input is reinterpreted here, as numpy's ``view``."""
    target = attrs["to"]
    if target == onnx.TensorProto.INT64:
        raise Unsupported("BitCast to INT64: vkumd stores INT64 as int32, so its bits are not "
                          "INT64's")
    want = ir_dtype(target)
    known = st.known(node.input[0])
    if known is not None and known.dtype != object:
        np_type = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(target))
        if np_type.itemsize != known.dtype.itemsize:
            raise Unsupported(f"BitCast from {known.dtype} to {np_type}: the widths differ")
        return [known.view(np_type)]
    x = st.value(node.input[0])
    try:
        check_widths(x.dtype, dtypes.dtype(want))
    except VkumdTypeError as exc:
        raise Unsupported(str(exc)) from None
    if x.dtype.name == want:
        return [x]
    return [st.b.bitcast(x, dtype=want, source=x.dtype.name)]
