"""Elementwise float functions with parameters, all run as generated kernels: ``clip``,
``hard_sigmoid``, ``leaky_relu``, ``elu``, ``selu``, ``celu``, ``thresholded_relu``, ``swish``,
``shrink`` (numbers as attributes) and ``prelu`` (a slope tensor that broadcasts against x).

The attributes are written into the generated kernel as float32 constants (the elementwise
trait's ``numeric`` params), so each distinct value compiles one kernel, cached as any other.
Every op computes in float32 and rounds once to x's type; the shared GLSL is
``shaders/include/activation.glsl``'s. The defaults are ONNX's (``leaky_relu``'s 0.01 is
also PyTorch's).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.fused_program import step
from vkumd.framework.graph.operands import Types, need_float, only, real, same_dtype
from vkumd.framework.graph.reference import quiet
from vkumd.framework.graph.registry import (
    OPS,
    Elementwise,
    TensorType,
    define,
    float32_refusal,
    outside_float32,
)
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_float, check_pair, check_storage, output
from vkumd.framework.ops.contract import concrete_rule
from vkumd.framework.opset.common import one_step
from vkumd.framework.tensor import Tensor

SELU_ALPHA = 1.67326319217681884765625
SELU_GAMMA = 1.05070102214813232421875


def _number(op: str, attrs: dict[str, Any], name: str, *, infinite: bool = False) -> float:
    """Attribute ``name`` as a float32-representable number (inf allowed where the op takes
    it: ``clip``'s open bounds)."""
    value = real(op, attrs[name], name, finite=False)
    if math.isnan(value) or (not infinite and math.isinf(value)):
        raise VkumdValueError(f"{op}: {name}={attrs[name]!r}; it must be a finite number"
                              + (" or an infinity" if infinite else ""))
    if outside_float32(value):
        raise VkumdValueError(float32_refusal(op, name, attrs[name]))
    return value


def _check_attrs(op: str, attrs: dict[str, Any]) -> None:
    """Refuse attribute values the op has no meaning for (see each op's Raises)."""
    for name in OPS[op].attrs:
        _number(op, attrs, name, infinite=op == "clip")
    if op == "celu" and float(attrs["alpha"]) == 0.0:
        raise VkumdValueError("celu: alpha=0 divides x by zero; CELU needs a nonzero alpha")


def _rule(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        need_float(op, x)
        _check_attrs(op, attrs)
        return [x]
    return rule


def _run(op: str, x: Tensor, out: Tensor | None, **attrs: Any) -> Tensor:
    x = check_float(op, x)
    _check_attrs(op, attrs)
    out = output(op, x.context, out, x.shape, x.dtype)
    if out.size == 0:
        return out
    # The generated kernels' family imports the op families, so it is found by its record.
    program = (step(op, [0], attrs),)
    return OPS["fused_elementwise"].eager([x], program, dtype=x.dtype, out=out)


_ARGS = """
    Args:
        x: float32, float16 or bfloat16 tensor of any shape.
        {params}
        out: optional output of x's shape and dtype.

    Returns:
        The result, x's shape and dtype, computed in float32 and rounded once.

    Raises:
        VkumdTypeError: x not a float tensor, a parameter not a real number, out of another
            dtype.
        VkumdValueError: {values}; out of another shape.
"""


def _doc(summary: str, params: str, values: str = "a parameter not finite or past "
         "float32's range") -> str:
    return summary + "\n" + _ARGS.format(params=params, values=values)


def clip(x: Tensor, *, min: float = -math.inf, max: float = math.inf,
         out: Tensor | None = None) -> Tensor:
    return _run("clip", x, out, min=min, max=max)


def hard_sigmoid(x: Tensor, *, alpha: float = 0.2, beta: float = 0.5,
                 out: Tensor | None = None) -> Tensor:
    return _run("hard_sigmoid", x, out, alpha=alpha, beta=beta)


def leaky_relu(x: Tensor, *, alpha: float = 0.01, out: Tensor | None = None) -> Tensor:
    return _run("leaky_relu", x, out, alpha=alpha)


def elu(x: Tensor, *, alpha: float = 1.0, out: Tensor | None = None) -> Tensor:
    return _run("elu", x, out, alpha=alpha)


def selu(x: Tensor, *, alpha: float = SELU_ALPHA, gamma: float = SELU_GAMMA,
         out: Tensor | None = None) -> Tensor:
    return _run("selu", x, out, alpha=alpha, gamma=gamma)


def celu(x: Tensor, *, alpha: float = 1.0, out: Tensor | None = None) -> Tensor:
    return _run("celu", x, out, alpha=alpha)


def thresholded_relu(x: Tensor, *, alpha: float = 1.0, out: Tensor | None = None) -> Tensor:
    return _run("thresholded_relu", x, out, alpha=alpha)


def swish(x: Tensor, *, alpha: float = 1.0, out: Tensor | None = None) -> Tensor:
    return _run("swish", x, out, alpha=alpha)


def shrink(x: Tensor, *, lambd: float = 0.5, bias: float = 0.0,
           out: Tensor | None = None) -> Tensor:
    return _run("shrink", x, out, lambd=lambd, bias=bias)


clip.__doc__ = _doc(
    "``min(max(x, min), max)`` elementwise (numpy's clip: NaN stays NaN; where min > max\n"
    "    every element is max, as ONNX's Clip says).",
    "min: the lower bound (-inf: none).\n        max: the upper bound (inf: none).",
    "a bound that is NaN or past float32's range")
hard_sigmoid.__doc__ = _doc("``clip(alpha x + beta, 0, 1)`` elementwise.",
                            "alpha: the slope.\n        beta: the offset.")
leaky_relu.__doc__ = _doc("``x`` where ``x >= 0``, else ``alpha x``, elementwise.",
                          "alpha: the slope below zero.")
elu.__doc__ = _doc("``x`` where ``x > 0``, else ``alpha (e^x - 1)``, elementwise.",
                   "alpha: the scale of the negative part.")
selu.__doc__ = _doc("``gamma elu(x, alpha)`` elementwise (the self-normalising defaults).",
                    "alpha: as elu's.\n        gamma: the scale of the whole.")
celu.__doc__ = _doc("``max(x, 0) + min(0, alpha (e^(x / alpha) - 1))`` elementwise.",
                    "alpha: the scale, nonzero.",
                    "alpha zero, not finite or past float32's range")
thresholded_relu.__doc__ = _doc("``x`` where ``x > alpha``, else 0, elementwise.",
                                "alpha: the threshold.")
swish.__doc__ = _doc("``x sigmoid(alpha x)`` elementwise (``silu`` at alpha 1).",
                     "alpha: the sigmoid's slope.")
shrink.__doc__ = _doc("``x + bias`` where ``x < -lambd``, ``x - bias`` where ``x > lambd``,\n"
                      "    else 0, elementwise (ONNX's Shrink: soft at bias = lambd, hard at 0).",
                      "lambd: the half-width of the zeroed band.\n        bias: the shift of "
                      "the rest toward zero.")


def _elu64(x: np.ndarray, alpha: float) -> np.ndarray:
    return np.where(x > 0, x, alpha * np.expm1(np.minimum(x, 0.0)))


def _clip64(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    return np.minimum(np.maximum(x, lo), hi)


_PARAMETRIC: dict[str, tuple[Callable[..., Tensor], dict[str, float], Any, str]] = {
    "clip": (clip, {"min": -math.inf, "max": math.inf},
             lambda x, at: _clip64(x, at["min"], at["max"]), "vkumd_clip({a}, {b}, {c})"),
    "hard_sigmoid": (hard_sigmoid, {"alpha": 0.2, "beta": 0.5},
                     lambda x, at: _clip64(at["alpha"] * x + at["beta"], 0.0, 1.0),
                     "vkumd_clip({a} * {b} + {c}, 0.0, 1.0)"),
    "leaky_relu": (leaky_relu, {"alpha": 0.01},
                   lambda x, at: np.where(x >= 0, x, at["alpha"] * x),
                   "({a} >= 0.0 ? {a} : {a} * {b})"),
    "elu": (elu, {"alpha": 1.0}, lambda x, at: _elu64(x, at["alpha"]), "vkumd_elu({a}, {b})"),
    "selu": (selu, {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA},
             lambda x, at: at["gamma"] * _elu64(x, at["alpha"]), "({c} * vkumd_elu({a}, {b}))"),
    "celu": (celu, {"alpha": 1.0},
             lambda x, at: np.where(x > 0, x, at["alpha"] * np.expm1(np.minimum(x, 0.0)
                                                                     / at["alpha"])),
             "({a} > 0.0 ? {a} : {b} * vkumd_expm1({a} / {b}))"),
    "thresholded_relu": (thresholded_relu, {"alpha": 1.0},
                         lambda x, at: np.where(x > at["alpha"], x, 0.0),
                         "({a} > {b} ? {a} : 0.0)"),
    "swish": (swish, {"alpha": 1.0},
              lambda x, at: 0.5 * x * (1.0 + np.tanh(0.5 * at["alpha"] * x)),  # no overflow
              "({a} * vkumd_sigmoid({a} * {b}))"),
    "shrink": (shrink, {"lambd": 0.5, "bias": 0.0},
               lambda x, at: np.where(x < -at["lambd"], x + at["bias"],
                                      np.where(x > at["lambd"], x - at["bias"], 0.0)),
               "({a} < -{b} ? {a} + {c} : ({a} > {b} ? {a} - {c} : 0.0))"),
}


def _declare(op: str) -> None:
    eager, attrs, fn, glsl = _PARAMETRIC[op]

    def reference(a: list[Any], at: dict[str, Any], s: Any) -> list[np.ndarray]:
        numbers = {k: float(np.float32(at[k])) for k in attrs}  # as the kernel holds them
        return [quiet(lambda x: fn(x, numbers), a[0])]

    define(op, ("x",), dict(attrs), rule=_rule(op), reference=reference, inplace=True,
           elementwise=Elementwise(1, glsl, params=tuple(attrs), numeric=True),
           lower=one_step, eager=eager)


for _op in _PARAMETRIC:
    _declare(_op)


def prelu(x: Tensor, slope: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x`` where ``x >= 0``, else ``slope x``, elementwise; ``slope`` broadcasts to x's shape
    (numpy rules, as ONNX's PRelu: a per-channel slope of an NCHW x is ``(C, 1, 1)``).

    Args:
        x: float32, float16 or bfloat16 tensor.
        slope: a tensor of x's dtype that broadcasts to x's shape.
        out: optional output of x's shape and dtype.

    Returns:
        The result, x's shape and dtype, computed in float32 and rounded once.

    Raises:
        VkumdTypeError: a non-float operand, operands of different dtypes, out of another
            dtype.
        VkumdValueError: a slope that does not broadcast to x's shape, operands of different
            contexts, out of another shape.
    """
    context = check_pair("prelu", x, slope, "x", "slope")
    (result,) = concrete_rule("prelu", (x, slope), {})
    if result.dtype.itemsize < 4:
        check_storage("prelu", result.dtype, context)
    out = output("prelu", context, out, tuple(result.shape), result.dtype)
    if out.size == 0:
        return out
    return OPS["fused_elementwise"].eager([x, slope], (("prelu", 0, 1),), dtype=x.dtype,
                                          out=out)


def _prelu_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, slope = ins
    assert x is not None and slope is not None  # required inputs, checked by the registry
    need_float("prelu", x, "x")
    need_float("prelu", slope, "slope")
    dtype = same_dtype("prelu", ("x", x), ("slope", slope))
    try:
        shape = dims.broadcast(x.shape, slope.shape)
        grows = not dims.same_shape(shape, x.shape)
    except VkumdValueError:
        grows = True
    if grows:
        raise VkumdValueError(f"prelu: slope {format_shape(slope.shape)} does not broadcast to "
                              f"x's shape {format_shape(x.shape)}; give it x's trailing "
                              "dimensions or 1s (a per-channel slope of NCHW x is (C, 1, 1))")
    return [TensorType(x.shape, dtype)]


define("prelu", ("x", "slope"), rule=_prelu_rule,
       reference=lambda a, at, s: [np.broadcast_to(np.where(a[0] >= 0, a[0], a[0] * a[1]),
                                                   s[0]).copy()],
       inplace=True, elementwise=Elementwise(2, "({a} >= 0.0 ? {a} : {a} * {b})"),
       lower=one_step, eager=prelu)
