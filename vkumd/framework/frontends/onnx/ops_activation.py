"""Converters of ONNX's activations with parameters (Clip, HardSigmoid, LeakyRelu, PRelu, Elu,
Selu, Celu, ThresholdedRelu), its one-input math operators, IsInf and SwiGLU.

Each becomes one IR op that runs as a generated elementwise kernel (float tensors), so it
fuses with its neighbours; the attributes become the op's numeric attributes.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.limits import DOUBLE_UNARY_OPS, INTEGER_DTYPES
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter

_FLOATS = ("float32", "float16", "bfloat16")
_INTEGERS = INTEGER_DTYPES
_MATH = {"Abs": "abs", "Ceil": "ceil", "Floor": "floor", "Round": "round", "Sign": "sign",
         "Log": "log", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin",
         "Acos": "acos", "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
         "Acosh": "acosh", "Atanh": "atanh", "Softplus": "softplus", "Softsign": "softsign",
         "Mish": "mish"}
# Each activation's IR op and its attributes with ONNX's defaults (the IR op's names).
_PARAMETRIC: dict[str, tuple[str, dict[str, float]]] = {
    "HardSigmoid": ("hard_sigmoid", {"alpha": 0.2, "beta": 0.5}),
    "LeakyRelu": ("leaky_relu", {"alpha": 0.01}),
    "Elu": ("elu", {"alpha": 1.0}),
    "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
    "Celu": ("celu", {"alpha": 1.0}),
    "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
    "Swish": ("swish", {"alpha": 1.0}),
    "Shrink": ("shrink", {"lambd": 0.5, "bias": 0.0}),
}


def _float_input(st: State, node: onnx.NodeProto) -> Bound:
    x = st.value(node.input[0])
    if x.dtype.name not in _FLOATS:
        raise Unsupported(f"{node.op_type} of {x.dtype.name}: vkumd computes it for float "
                          "tensors only")
    return x


@converter(*_MATH)
def math_unary(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """The one-input math operators: one IR op each, float tensors (float64 too for the ops
    with a double kernel)."""
    op = _MATH[node.op_type]
    x = st.value(node.input[0])
    if x.dtype.name == "float64" and op in DOUBLE_UNARY_OPS:
        return [st.b.op(op, x)]
    return [st.b.op(op, _float_input(st, node))]


@converter(*_PARAMETRIC, attrs=("alpha", "beta", "gamma", "lambd", "bias"))
def parametric(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """HardSigmoid, LeakyRelu, Elu, Selu, Celu, ThresholdedRelu, Swish, Shrink with their
    attributes."""
    op, defaults = _PARAMETRIC[node.op_type]
    unknown = set(attrs) - set(defaults)
    if unknown:
        raise Unsupported(f"attribute {', '.join(sorted(unknown))} is not one of "
                          f"{node.op_type}'s ({', '.join(defaults)})")
    values = {name: float(attrs.get(name, default)) for name, default in defaults.items()}
    return [st.b.op(op, _float_input(st, node), **values)]


def _bound(st: State, node: onnx.NodeProto, attrs: dict[str, Any], index: int, name: str,
           default: float) -> float | Bound:
    """Clip's ``min`` or ``max``: the attribute (opset 6), a constant input as a number, a
    run-time input as a value; absent (or an empty input name) is ``default``."""
    if name in attrs:
        return float(attrs[name])
    if len(node.input) <= index or not node.input[index]:
        return default
    value = st.scalar(node.input[index])
    if value is not None:
        return value
    bound = st.value(node.input[index])
    if tuple(bound.shape) not in ((), (1,)):
        raise Unsupported(f"Clip's {name} has shape {list(bound.shape)}; it must hold a "
                          "single number")
    return bound


@converter("Clip", attrs=("min", "max"))
def clip(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """Clip: ``min``/``max`` as attributes (opset 6) or optional inputs (11+). Constant
    bounds are the ``clip`` op's attributes; a run-time bound is a compare and a select
    (``where(x < min, min, x)``), which fuse with it into one kernel."""
    if st.dtype(node.input[0]) in _INTEGERS:
        return [_integer_clip(st, node)]
    x = _float_input(st, node)
    lo = _bound(st, node, attrs, 1, "min", -math.inf)
    hi = _bound(st, node, attrs, 2, "max", math.inf)
    if isinstance(lo, float) and isinstance(hi, float):
        return [st.b.op("clip", x, min=lo, max=hi)]
    # The lower bound first, then the upper, as min(max(x, lo), hi): hi wins where lo > hi.
    if isinstance(lo, float):
        y = x if lo == -math.inf else st.b.op("clip", x, min=lo)
    else:
        y = st.b.where(st.b.op("lt", x, lo), lo, x)
    if isinstance(hi, float):
        return [y if hi == math.inf else st.b.op("clip", y, max=hi)]
    return [st.b.where(st.b.op("gt", y, hi), hi, y)]


def _integer_clip(st: State, node: onnx.NodeProto) -> Bound:
    """Clip of an integer tensor (opset 12+, bounds as inputs): ``minimum(maximum(x, min),
    max)``, exact in the binary kernel; a constant bound becomes a constant of x's type."""
    out = x = st.value(node.input[0])
    for index, name, op in ((1, "min", "maximum"), (2, "max", "minimum")):
        if not st.present(node, index):
            continue
        known = st.known(node.input[index])
        if known is not None and known.dtype != object and known.size == 1:
            bound = st.constant(np.asarray(known).reshape(()), x.dtype.name)
        else:
            bound = st.value(node.input[index])
            if tuple(bound.shape) not in ((), (1,)):
                raise Unsupported(f"Clip's {name} has shape {list(bound.shape)}; it must hold "
                                  "a single number")
        out = st.b.op(op, out, bound)
    return out


@converter("PRelu")
def prelu(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """PRelu: the slope broadcasts to X (numpy rules), converted to X's type when known."""
    x = _float_input(st, node)
    known = st.known(node.input[1])
    if known is not None:
        slope = st.constant(np.asarray(known, np.float32), x.dtype.name)
    else:
        slope = st.value(node.input[1])
    return [st.b.op("prelu", x, slope)]


@converter("Reciprocal")
def reciprocal(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``1 / x``: the ``reciprocal`` op for floats, a div by a constant one otherwise."""
    x = st.value(node.input[0])
    if x.dtype.name in (*_FLOATS, "float64"):
        return [st.b.op("reciprocal", x)]
    return [st.b.div(st.constant(np.ones((), np.float32), x.dtype.name), x)]


@converter("IsInf", attrs=("detect_positive", "detect_negative"))
def is_inf(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """IsInf as a bool comparison, as the other comparisons: ``|x| == inf``, or ``x == inf``
    / ``x == -inf`` for one sign (neither sign: all false)."""
    x = _float_input(st, node)
    positive = bool(attrs.get("detect_positive", 1))
    negative = bool(attrs.get("detect_negative", 1))
    if positive and negative:
        return [st.b.eq(st.b.op("abs", x), st.constant(np.float32(np.inf), x.dtype.name))]
    target = np.inf if positive else -np.inf if negative else np.nan  # NaN equals nothing
    return [st.b.eq(x, st.constant(np.float32(target), x.dtype.name))]


@converter("SwiGLU", attrs=("alpha",))
def swiglu(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """``a * sigmoid(alpha * a) * b`` of equal shapes (ONNX does not broadcast here): the
    ``swiglu`` op for alpha 1, ``swish`` times b otherwise (one generated kernel either way,
    once fused)."""
    a = _float_input(st, node)
    b = st.value(node.input[1])
    if tuple(a.shape) != tuple(b.shape):
        raise Unsupported(f"SwiGLU of shapes {tuple(a.shape)} and {tuple(b.shape)} (ONNX asks "
                          "for equal shapes; it does not broadcast)")
    alpha = float(attrs.get("alpha", 1.0))
    if alpha == 1.0:
        return [st.b.op("swiglu", a, b)]
    return [st.b.mul(st.b.op("swish", a, alpha=alpha), b)]
