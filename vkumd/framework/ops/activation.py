"""Standalone activation functions: relu, gelu (erf), gelu_tanh and silu.

Each is computed in float32 (``shaders/include/activation.glsl``, the code the GEMM epilogue
applies) and rounded once to the tensor's type; any shape, float32, float16 or bfloat16.
"""

from __future__ import annotations

from vkumd.compiler.kernels import ACTIVATIONS
from vkumd.compiler.kernels.activation import activation_plan
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.framework.ops.checks import check_float, output
from vkumd.framework.tensor import Tensor


def _activation(op: str, x: Tensor, out: Tensor | None) -> Tensor:
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
    return _activation("relu", x, out)


def gelu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x * Phi(x)`` with the exact normal CDF (through erf, absolute error < 2e-7).

    Args and errors as :func:`relu`.
    """
    return _activation("gelu", x, out)


def gelu_tanh(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``, the tanh approximation of GELU.

    Args and errors as :func:`relu`.
    """
    return _activation("gelu_tanh", x, out)


def silu(x: Tensor, *, out: Tensor | None = None) -> Tensor:
    """``x * sigmoid(x)`` (also called swish).

    Args and errors as :func:`relu`.
    """
    return _activation("silu", x, out)


__all__ = ["gelu", "gelu_tanh", "relu", "silu"]
