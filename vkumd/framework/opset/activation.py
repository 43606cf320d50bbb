"""Elementwise float functions: the activations relu, gelu (erf), gelu_tanh and silu, which
have kernels of their own and are GEMM epilogues, and exp, sqrt, tanh, erf, sigmoid and
hardswish, which run as generated kernels.

Every one computes in float32 and rounds once to the tensor's type; the activations'
code is ``shaders/include/activation.glsl``'s, shared by the GEMM epilogue and the generated
kernels.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import ACTIVATIONS
from vkumd.framework.graph.operands import Types, need_float, only
from vkumd.framework.graph.reference import ACTIVATIONS as REFERENCE_ACTIVATIONS
from vkumd.framework.graph.reference import erf, quiet
from vkumd.framework.graph.registry import Elementwise, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops import activation as ops
from vkumd.framework.opset.common import one_step, unary, unary_eager


def _float_rule(op: str) -> Callable[[Types, dict[str, Any], DimTable], list[TensorType]]:
    def rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
        x = only(ins)
        need_float(op, x)
        return [x]
    return rule


def _reference(fn: Callable[[np.ndarray], np.ndarray]) -> Any:
    # errstate: sqrt of a negative is NaN and exp overflows to inf, as in float32 kernels.
    return lambda a, attrs, s: [quiet(fn, a[0])]


def _activation(op: str, glsl: str) -> None:
    define(op, ("x",), rule=_float_rule(op), reference=_reference(REFERENCE_ACTIVATIONS[op]),
           inplace=True, elementwise=Elementwise(1, glsl), epilogue=op in ACTIVATIONS,
           lower=unary(getattr(ops, op)), eager=getattr(ops, op))


_activation("relu", "max({a}, 0.0)")
_activation("gelu", "vkumd_gelu({a})")
_activation("gelu_tanh", "vkumd_gelu_tanh({a})")
_activation("silu", "vkumd_silu({a})")


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
