"""Standalone activation functions: relu, gelu (erf), gelu_tanh and silu.

Each is computed in float32 (``shaders/include/activation.glsl``, the code the GEMM epilogue
applies) and rounded once to the tensor's type; any shape, float32, float16 or bfloat16.
"""

from __future__ import annotations

from vkumd.compiler.kernels import ACTIVATIONS, WORKGROUP
from vkumd.framework.ops import _rows
from vkumd.framework.tensor import Tensor

_WORKGROUP = 64


def _activation(op: str, x: Tensor, out: Tensor | None) -> Tensor:
    x = _rows.check_float(op, x)
    out = _rows.output(op, x, out, x.shape)
    if out.size == 0:
        return out
    vec = 4 if x.size % 4 == 0 else 1
    units = x.size // vec
    variant = {"DTYPE": _rows.FLOAT_CODES[x.dtype.name], "VEC": vec, "ACT": ACTIVATIONS[op],
               WORKGROUP: _WORKGROUP}
    x.context.dispatch("activation", variant, [_rows.buffer(x), _rows.buffer(out)],
                       units.to_bytes(4, "little"), _rows.grid(x.context, units, _WORKGROUP),
                       writes=(1,))
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
