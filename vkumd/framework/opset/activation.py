"""Elementwise float functions: the activations relu, gelu (erf), gelu_tanh and silu, which
have kernels of their own and are GEMM epilogues, and exp, sqrt, tanh, erf, sigmoid,
hardswish, softplus, softsign and mish, which run as generated kernels (the unary math set
is :mod:`~vkumd.framework.opset.unary_math`'s, the activations with parameters
:mod:`~vkumd.framework.opset.activation_params`').

Every one computes in float32 and rounds once to the tensor's type; the activations'
code is ``shaders/include/activation.glsl``'s, shared by the GEMM epilogue and the generated
kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.compiler.kernels.activation import activation_plan
from vkumd.compiler.kernels.limits import ACTIVATIONS, DOUBLE_UNARY_OPS
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.framework.graph.operands import Types, need_float, only
from vkumd.framework.graph.reference import ACTIVATIONS as REFERENCE_ACTIVATIONS
from vkumd.framework.graph.reference import erf, quiet
from vkumd.framework.graph.registry import Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_float, output
from vkumd.framework.opset.common import one_step, unary, unary_eager
from vkumd.framework.tensor import Tensor


def _float_rule(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    # The ops with a double kernel take float64 too (the device check is the eager one's).
    double = op in DOUBLE_UNARY_OPS

    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        if not (double and x.dtype.name == "float64"):
            need_float(op, x)
        return [x]
    return rule


def _reference(fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    # errstate: sqrt of a negative is NaN and exp overflows to inf, as in float32 kernels.
    return lambda a, attrs, s: [quiet(fn, a[0])]


def _run(op: str, x: Tensor, out: Tensor | None) -> Tensor:
    x = check_float(op, x)
    out = output(op, x.context, out, x.shape, x.dtype)
    if out.size == 0:
        return out
    plan = activation_plan(x.context.caps, ACTIVATIONS[op], ROW_CODES[x.dtype.name], x.size)
    x.context.run(plan, (x, out))
    return out


def relu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``max(x, 0)`` elementwise.

    Args:
        x: float32, float16 or bfloat16 tensor of any shape.
        out: optional output of x's shape and dtype.

    Returns:
        The result, x's shape and dtype.

    Raises:
        VkumdTypeError: x not a float tensor, or out of another dtype.
        VkumdValueError: out of another shape.
    """
    return _run("relu", x, out)


def gelu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x * Phi(x)`` with the exact normal CDF (through erf, absolute error < 2e-7).

    Args and errors as :func:`relu`.
    """
    return _run("gelu", x, out)


def gelu_tanh(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, the tanh approximation of GELU.

    Args and errors as :func:`relu`.
    """
    return _run("gelu_tanh", x, out)


def silu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x * sigmoid(x)`` (also called swish).

    Args and errors as :func:`relu`.
    """
    return _run("silu", x, out)


def _activation(eager: Callable[..., Tensor], glsl: str) -> None:
    op = eager.__name__
    define(op, ("x",), rule=_float_rule(op), reference=_reference(REFERENCE_ACTIVATIONS[op]),
           inplace=True, elementwise=Elementwise(1, glsl), epilogue=op in ACTIVATIONS,
           lower=unary(eager), eager=eager)


_activation(relu, "max({a}, 0.0)")
_activation(gelu, "vkumd_gelu({a})")
_activation(gelu_tanh, "vkumd_gelu_tanh({a})")
_activation(silu, "vkumd_silu({a})")


def _math(op: str, fn: Callable[[np.ndarray], np.ndarray], glsl: str, doc: str) -> None:
    define(op, ("x",), rule=_float_rule(op), reference=_reference(fn), inplace=True,
           elementwise=Elementwise(1, glsl), lower=one_step, eager=unary_eager(op, doc))


_math("exp", np.exp, "exp({a})", "``e ** x`` elementwise.")
_math("sqrt", np.sqrt, "sqrt({a})", "The square root of x elementwise (NaN below 0).")
_math("tanh", np.tanh, "vkumd_tanh({a})", "The hyperbolic tangent of x elementwise.")
_math("erf", erf, "vkumd_erf_accurate({a})", "The error function of x elementwise.")
_math("sigmoid", lambda x: 1.0 / (1.0 + np.exp(-x)), "vkumd_sigmoid({a})",
      "``1 / (1 + e ** -x)`` elementwise.")
_math("hardswish", lambda x: x * np.clip(x / 6.0 + 0.5, 0.0, 1.0),
      "({a} * clamp({a} / 6.0 + 0.5, 0.0, 1.0))",
      "``x * clip(x / 6 + 1/2, 0, 1)`` elementwise: MobileNetV3's hard swish.")


def _mish(x: np.ndarray) -> np.ndarray:
    # -inf * tanh(0) is NaN; mish's limit there is -0.
    return np.where(x == -np.inf, -0.0, x * np.tanh(np.logaddexp(0.0, x)))


_math("softplus", lambda x: np.logaddexp(0.0, x), "vkumd_softplus({a})",
      "``log(1 + e ** x)`` elementwise, without overflow.")
_math("softsign", lambda x: np.where(np.isinf(x), np.sign(x), x / (1.0 + np.abs(x))),
      "vkumd_softsign({a})", "``x / (1 + |x|)`` elementwise (+-1 at +-inf).")
_math("mish", _mish, "vkumd_mish({a})", "``x tanh(softplus(x))`` elementwise.")
