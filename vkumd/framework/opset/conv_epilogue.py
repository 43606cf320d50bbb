"""A convolution's epilogue: what ``conv2d`` applies to its sum on the way out.

``out = act(conv + bias) + residual`` (``residual_first``: ``act(conv + bias + residual)``),
with ``act`` one of :data:`~vkumd.compiler.kernels.limits.EPILOGUE_ACTIVATIONS` and its
float parameters. The GEMM applies it in its store (a bias per row: the ``[C_out, H*W]``
layout puts an output channel on each row), as do the direct and depthwise kernels; the
blocked im2col path, whose GEMMs accumulate into the output, applies it after the last
block with the ops themselves. The ``conv_epilogue_fusion`` pass
(:mod:`vkumd.framework.graph.fusion_conv_epilogue`) fills it from the graph.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from vkumd.compiler.kernels.gemm_choice import GemmShape
from vkumd.compiler.kernels.gemm_plan import GemmProblem, gemm_plan
from vkumd.compiler.kernels.limits import (
    EPILOGUE_ACTIVATIONS,
    RESIDUAL_AFTER,
    RESIDUAL_BEFORE,
    RESIDUAL_NONE,
)
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.registry import OPS
from vkumd.framework.opset.arith import add
from vkumd.framework.opset.layout import reshape
from vkumd.framework.tensor import Tensor

# The GEMM and the convolution kernels index with 32-bit unsigned integers.
_MAX_INDEX = (1 << 32) - 1


def activation_params(op: str, activation: Any, params: Any) -> tuple[float, ...]:
    """``activation`` checked against the epilogue's table and its parameters as floats:
    ``params`` empty takes the activation op's defaults (clip's unbounded range,
    leaky_relu's 0.01).

    Raises:
        VkumdValueError: an activation the epilogue does not apply; parameters of another
            count, or NaN.
        VkumdTypeError: parameters that are not a sequence of real numbers.
    """
    if activation is not None and (not isinstance(activation, str)
                                   or activation not in EPILOGUE_ACTIVATIONS):
        names = ", ".join(str(a) for a in EPILOGUE_ACTIVATIONS)
        raise VkumdValueError(f"{op}: activation={activation!r} is not one the epilogue "
                              f"applies; it takes {names}")
    names = EPILOGUE_ACTIVATIONS[activation][1]
    if isinstance(params, (str, bytes)) or not isinstance(params, Sequence):
        raise VkumdTypeError(f"{op}: activation_params must be a tuple of numbers, not "
                             f"{params!r}")
    if len(params) == 0:
        defaults = OPS[activation].attrs if activation is not None else {}
        return tuple(float(defaults[name]) for name in names)
    if len(params) != len(names):
        raise VkumdValueError(f"{op}: activation {activation!r} takes {len(names)} parameters "
                              f"({', '.join(names) or 'none'}), got {len(params)}")
    out = []
    for name, value in zip(names, params, strict=True):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise VkumdTypeError(f"{op}: activation parameter {name} must be a number, not "
                                 f"{value!r}")
        if math.isnan(value):
            raise VkumdValueError(f"{op}: activation parameter {name} is NaN")
        out.append(float(value))
    return tuple(out)


def residual_order(op: str, residual_first: Any) -> bool:
    """``residual_first`` checked: a bool.

    Raises:
        VkumdTypeError: anything else.
    """
    if not isinstance(residual_first, (bool, np.bool_)):
        raise VkumdTypeError(f"{op}: residual_first must be True or False, not "
                             f"{residual_first!r}")
    return bool(residual_first)


def epilogue_codes(activation: str | None, params: tuple[float, ...], has_residual: bool,
                   residual_first: bool) -> tuple[int, float, float, int]:
    """The epilogue as the kernels take it: (activation code, two parameters, residual mode)."""
    p = (*params, 0.0, 0.0)
    mode = RESIDUAL_NONE if not has_residual else \
        RESIDUAL_BEFORE if residual_first else RESIDUAL_AFTER
    return (EPILOGUE_ACTIVATIONS[activation][0], float(np.float32(p[0])),
            float(np.float32(p[1])), mode)


def epilogue_reference(y: np.ndarray, residual: np.ndarray | None, activation: str | None,
                       params: tuple[float, ...], residual_first: bool) -> np.ndarray:
    """The float64 epilogue after the biased sum ``y`` (parameters as float32 holds them)."""
    y = np.asarray(y, np.float64)
    r = None if residual is None else np.asarray(residual, np.float64)
    if r is not None and residual_first:
        y = y + r
    if activation is not None:
        names = EPILOGUE_ACTIVATIONS[activation][1]
        held = (float(np.float32(p)) for p in params)
        attrs = OPS[activation].full_attrs(dict(zip(names, held, strict=True)))
        y = np.asarray(OPS[activation].reference([y], attrs, None)[0], np.float64)
    if r is not None and not residual_first:
        y = y + r
    return y


def apply_epilogue(sums: Tensor, out: Tensor, bias: Tensor | None,
                   residual: Tensor | None, activation: str | None, params: tuple[float, ...],
                   residual_first: bool) -> None:
    """The epilogue of the convolution sums ``sums[N, C_out, ...]`` into ``out`` with the
    ops themselves (for the blocked im2col path, whose GEMMs accumulate): ``sums`` is
    ``out`` itself when there is no activation, else a scratch tensor it may overwrite."""
    c_out = sums.shape[1]
    view = reshape(sums, (sums.shape[0], c_out, sums.size // max(1, sums.shape[0] * c_out)))
    if bias is not None:
        add(view, reshape(bias, (c_out, 1)), out=view)
    if residual is not None and residual_first:
        add(sums, residual, out=sums)
    if activation is not None:
        names = EPILOGUE_ACTIVATIONS[activation][1]
        OPS[activation].eager(sums, **dict(zip(names, params, strict=True)), out=out)
    if residual is not None and not residual_first:
        add(out, residual, out=out)


def conv_gemm(w: Tensor, cols: Tensor, out: Tensor, bias: Tensor | None,
              residual: Tensor | None, epilogue: tuple[int, float, float, int],
              a_repeats: bool) -> None:
    """``out[e] = epilogue(w[e] @ cols[e])`` over the batch entries ``e`` of ``cols[..., K, P]``
    (one ``w[M, K]`` for all when ``a_repeats``), the bias per row of ``w`` (one ``[M]``
    block per entry unless ``a_repeats``), the residual of ``out``'s shape.

    Raises:
        VkumdValueError: a tensor past the GEMM's 32-bit indexing; as the GEMM's planner.
    """
    m, k = w.shape[-2:]
    n = cols.shape[-1]
    count = cols.size // max(1, k * n)
    for t in (w, cols, out, residual):
        if t is not None and t.size > _MAX_INDEX:
            raise VkumdValueError(f"conv2d: a tensor of {t.size} elements is past the GEMM's "
                                  "32-bit indexing; split the batch")
    size = w.dtype.itemsize
    aligned_a = w.address % 8 == 0 and (a_repeats or m * k * size % 8 == 0)
    aligned_b = cols.address % 8 == 0 and k * n * size % 8 == 0
    shape = GemmShape(m, n, k, False, False, aligned_a, aligned_b, w.address % 16 == 0,
                      cols.address % 16 == 0, count)
    act, p0, p1, mode = epilogue
    problem = GemmProblem(shape, w.dtype.name, size, a_repeats, False, False,
                          bias is not None, residual is not None, 1.0, 0.0, act, (p0, p1),
                          row_bias=True, residual_first=mode == RESIDUAL_BEFORE)
    w.context.run(gemm_plan(w.context.caps, problem), (w, cols, out, bias, residual))
