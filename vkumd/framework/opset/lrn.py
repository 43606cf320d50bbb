"""Local response normalisation across channels: ``lrn`` (ONNX's LRN, AlexNet's and
GoogLeNet's), on ``shaders/lrn.comp``.

Each element is divided by ``(bias + alpha / size * s) ** beta``, where ``s`` sums the
squares of the ``size`` channels around it (``floor((size - 1) / 2)`` below, ``ceil`` above,
those that exist), as ONNX defines it. One kernel: each element re-reads its window, which
is cheaper than a composition of a square, a channel-window pooling and a power (three
launches and two intermediates the size of ``x``).
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import POOL_DTYPES
from vkumd.compiler.kernels.pool import POOL_CODES, lrn_plan
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, only, real
from vkumd.framework.graph.registry import REQUIRED, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}


def _size(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise VkumdTypeError(f"lrn: size must be an int, not {value!r}")
    if value < 1:
        raise VkumdValueError(f"lrn: size={value}; the window holds at least one channel")
    return int(value)


def _rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x = only(ins)
    if x.dtype.name not in POOL_DTYPES:
        raise VkumdTypeError(f"lrn: x is {x.dtype.name}; lrn takes {', '.join(POOL_DTYPES)} "
                             "(cast() converts)")
    if x.ndim < 2:
        raise VkumdValueError(f"lrn: x has shape {format_shape(x.shape)}; lrn takes "
                              "[N, C, ...] with the channels second")
    _size(attrs["size"])
    for name in ("alpha", "beta", "bias"):
        real("lrn", attrs[name], name)
    return [x]


def lrn(x: Tensor, size: int, *, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        out: Tensor | None = None) -> Tensor:
    """Local response normalisation across channels (axis 1), float32 arithmetic:
    ``x / (bias + alpha / size * sum of squares over the window) ** beta``.

    Args:
        x: ``[N, C, ...]`` float32 or float16.
        size: channels in the window (``floor((size - 1) / 2)`` below each channel,
            ``ceil((size - 1) / 2)`` above, clipped to the channels that exist), >= 1.
        alpha: the scale of the sum of squares (ONNX's default 1e-4).
        beta: the exponent (0.75).
        bias: added before the power (1.0).
        out: optional output of x's shape and dtype.

    Returns:
        The normalised tensor.

    Raises:
        VkumdTypeError: an unsupported dtype; size not an int; alpha, beta or bias not a
            real number.
        VkumdValueError: x below 2-D; size below 1; a non-finite alpha, beta or bias; out of
            another shape.
    """
    x = check_tensor("lrn", x, "x")
    attrs = {"size": size, "alpha": alpha, "beta": beta, "bias": bias}
    key = (x.shape, x.dtype.name, *((v, type(v)) for v in attrs.values()))
    if recall(_VERDICTS, key) is None:
        concrete_rule("lrn", (x,), attrs)
        remember(_VERDICTS, key, True)
    if x.dtype.itemsize < 4:
        check_storage("lrn", x.dtype, x.context)
    out = output("lrn", x.context, out, x.shape, x.dtype, (x,))
    if out.size == 0:
        return out
    plan = lrn_plan(x.context.caps, POOL_CODES[x.dtype.name], x.size, x.shape[1],
                    math.prod(x.shape[2:]), int(size), float(alpha), float(beta), float(bias))
    x.context.run(plan, (x, out))
    return out


def lrn_reference(x: np.ndarray, size: int, alpha: float, beta: float, bias: float
                  ) -> np.ndarray:
    """The float64 LRN over axis 1, as ONNX defines it."""
    x = np.asarray(x, np.float64)
    channels = x.shape[1]
    squares = np.zeros_like(x)
    lo, hi = (size - 1) // 2, size // 2
    for c in range(channels):
        window = x[:, max(0, c - lo):min(channels, c + hi + 1)]
        squares[:, c] = (window * window).sum(axis=1)
    with np.errstate(all="ignore"):
        return x / (bias + alpha / size * squares) ** beta


def _lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    at = attrs_of(node)
    lrn(ins[0], at["size"], alpha=at["alpha"], beta=at["beta"], bias=at["bias"], out=outs[0])


define("lrn", ("x",), {"size": REQUIRED, "alpha": 1e-4, "beta": 0.75, "bias": 1.0}, rule=_rule,
       reference=lambda a, at, s: [lrn_reference(a[0], at["size"], at["alpha"], at["beta"],
                                                 at["bias"])],
       lower=_lower, eager=lrn)
