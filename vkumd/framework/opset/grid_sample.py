"""``grid_sample``: sample NCHW or NCDHW planes at a grid of normalized coordinates (ONNX
GridSample, torch's ``grid_sample``): nearest, linear or cubic, zeros, border or reflection
padding, with or without aligned corners.

The planner (:mod:`vkumd.compiler.kernels.grid_sample`) turns the problem into one launch of
``shaders/grid_sample.comp``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from vkumd.compiler.kernels.grid_sample import grid_sample_plan
from vkumd.compiler.kernels.limits import (
    GRID_SAMPLE_MODES,
    GRID_SAMPLE_PADDINGS,
    GRID_SAMPLE_RANKS,
    RESAMPLE_DTYPES,
)
from vkumd.compiler.kernels.resample import RESAMPLE_CODES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import Dim, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_context, check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

_VERDICTS: Verdicts = {}


def _same(a: Any, b: Any, dims: DimTable) -> bool:
    a, b = dims.resolve(a), dims.resolve(b)
    return a == b if isinstance(a, Dim) == isinstance(b, Dim) else True


def _rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    x, grid = ins
    assert x is not None and grid is not None  # required inputs
    for what, t in (("x", x), ("grid", grid)):
        if t.dtype.name not in RESAMPLE_DTYPES:
            raise VkumdTypeError(f"grid_sample: {what} is {t.dtype.name}; grid_sample takes "
                                 f"{', '.join(RESAMPLE_DTYPES)} (cast() converts)")
    if grid.dtype is not x.dtype:
        raise VkumdTypeError(f"grid_sample: x is {x.dtype.name} and grid {grid.dtype.name}; "
                             "give both the same dtype (cast() converts)")
    rank = x.ndim - 2
    if rank not in GRID_SAMPLE_RANKS:
        raise VkumdValueError(f"grid_sample: x has shape {format_shape(x.shape)}; it takes "
                              "[N, C, H, W] or [N, C, D, H, W]")
    if grid.ndim != rank + 2 or not _same(grid.shape[-1], rank, dims) or \
            not _same(grid.shape[0], x.shape[0], dims):
        raise VkumdValueError(f"grid_sample: grid has shape {format_shape(grid.shape)} for x "
                              f"of shape {format_shape(x.shape)}; it must be [N, "
                              f"{', '.join('HWD'[:rank][::-1])}_out..., {rank}] with x's N "
                              "(the last axis holds (x, y[, z]))")
    if attrs["mode"] not in GRID_SAMPLE_MODES:
        raise VkumdValueError(f"grid_sample: mode={attrs['mode']!r}; it takes "
                              f"{', '.join(GRID_SAMPLE_MODES)}")
    if attrs["padding"] not in GRID_SAMPLE_PADDINGS:
        raise VkumdValueError(f"grid_sample: padding={attrs['padding']!r}; it takes "
                              f"{', '.join(GRID_SAMPLE_PADDINGS)}")
    flag("grid_sample", attrs["align_corners"], "align_corners")
    for d in x.shape[2:]:
        size = dims.resolve(d)
        if not isinstance(size, Dim) and size < 1:
            raise VkumdValueError(f"grid_sample: x has shape {format_shape(x.shape)}; an "
                                  "empty spatial axis has nothing to sample")
    return [TensorType((x.shape[0], x.shape[1], *grid.shape[1:-1]), x.dtype)]


def grid_sample(x: Tensor, grid: Tensor, *, mode: str = "linear", padding: str = "zeros",
                align_corners: bool = False, out: Tensor | None = None) -> Tensor:
    """Sample ``x`` at the normalized coordinates in ``grid`` (ONNX GridSample, torch's
    ``grid_sample``).

    ``grid[n, o..., :]`` holds ``(x, y)`` (2-D) or ``(x, y, z)`` (3-D) in ``[-1, 1]``, the
    reverse of x's spatial order. With ``align_corners`` -1 and 1 are the centres of the edge
    pixels, else their outer edges. Nearest rounds half to even; a coordinate outside the
    borders is clamped (``border``) or reflected (``reflection``) first, and each tap
    outside the input then reads 0 (``zeros``), the edge or its reflection. Cubic is Keys'
    with a = -0.75.

    Args:
        x: ``[N, C, H, W]`` or ``[N, C, D, H, W]`` float32 or float16, no spatial axis empty.
        grid: ``[N, H_out, W_out, 2]`` or ``[N, D_out, H_out, W_out, 3]`` of x's dtype.
        mode: ``"nearest"``, ``"linear"`` or ``"cubic"``.
        padding: ``"zeros"``, ``"border"`` or ``"reflection"``.
        align_corners: whether -1 and 1 name the edge pixels' centres.
        out: optional output ``[N, C, *grid.shape[1:-1]]`` of x's dtype.

    Returns:
        The sampled tensor ``[N, C, *grid.shape[1:-1]]``.

    Raises:
        VkumdTypeError: an unsupported dtype, or grid's dtype not x's; align_corners not a
            bool.
        VkumdValueError: x not 4-D or 5-D, or with an empty spatial axis; grid of another
            rank, batch or last extent; an unknown mode or padding; tensors of different
            contexts; out of another shape; a tensor past the kernel's 32-bit indexing.
    """
    x = check_tensor("grid_sample", x, "x")
    grid = check_tensor("grid_sample", grid, "grid")
    check_context("grid_sample", x, grid, "grid")
    attrs = {"mode": mode, "padding": padding, "align_corners": align_corners}
    key = (x.shape, x.dtype.name, grid.shape, grid.dtype.name, mode, padding, align_corners,
           type(align_corners))
    out_type = recall(_VERDICTS, key)
    if out_type is None:
        out_type = remember(_VERDICTS, key, concrete_rule("grid_sample", (x, grid), attrs)[0])
    if x.dtype.itemsize < 4:
        check_storage("grid_sample", x.dtype, x.context)
    shape = tuple(int(d) for d in out_type.shape)
    out = output("grid_sample", x.context, out, shape, x.dtype, (x, grid))
    if out.size == 0:
        return out
    plan = grid_sample_plan(x.context.caps, RESAMPLE_CODES[x.dtype.name], x.shape,
                            shape[2:], mode, padding, bool(align_corners))
    x.context.run(plan, (x, grid, out))
    return out


def _reflect(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """Reflect ``v`` into ``[lo, hi]`` by the near border until it lands inside."""
    span = hi - lo
    if span <= 0:
        return np.full_like(v, lo)
    below = lo - v
    above = v - hi
    k_lo, r_lo = np.floor(below / span), below - np.floor(below / span) * span
    k_hi, r_hi = np.floor(above / span), above - np.floor(above / span) * span
    return np.where(v < lo, np.where(k_lo % 2 == 0, lo + r_lo, hi - r_lo),
                    np.where(v > hi, np.where(k_hi % 2 == 0, hi - r_hi, lo + r_hi), v))


def _keys(t: np.ndarray) -> list[np.ndarray]:
    a = -0.75
    d = [t + 1, t, 1 - t, 2 - t]
    outer = [((a * v - 5 * a) * v + 8 * a) * v - 4 * a for v in (d[0], d[3])]
    inner = [((a + 2) * v - (a + 3)) * v * v + 1 for v in (d[1], d[2])]
    return [outer[0], inner[0], inner[1], outer[1]]


def _axis(g: np.ndarray, size: int, mode: str, padding: str, align: bool
          ) -> tuple[list[np.ndarray], list[np.ndarray], list[np.ndarray]]:
    """One axis's taps for normalized coordinates ``g``: (indices clipped into the input,
    weights, in-range masks) per tap."""
    v = (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2
    if mode == "nearest":
        v = np.rint(v)
    lo, hi = (0.0, size - 1.0) if align else (-0.5, size - 0.5)
    if padding == "border":
        v = np.where((v < lo) | (v > hi), np.clip(v, 0, size - 1), v)
    elif padding == "reflection":
        v = _reflect(v, lo, hi)
    if mode == "nearest":
        firsts, weights = [np.trunc(v)], [np.ones_like(v)]
    else:
        f = np.floor(v)
        t = v - f
        if mode == "linear":
            firsts, weights = [f, f + 1], [1 - t, t]
        else:
            firsts, weights = [f - 1, f, f + 1, f + 2], _keys(t)
    index, valid = [], []
    for i in firsts:
        inside = (i >= 0) & (i <= size - 1)
        if padding == "reflection":
            i = np.trunc(_reflect(i, lo, hi))
        index.append(np.clip(i, 0, size - 1).astype(np.int64))
        valid.append(inside if padding == "zeros" else np.ones_like(inside))
    return index, weights, valid


def grid_sample_reference(x: np.ndarray, grid: np.ndarray, mode: str = "linear",
                          padding: str = "zeros", align_corners: bool = False) -> np.ndarray:
    """The float64 grid sample: every tap of every axis gathered and weighed."""
    x = np.asarray(x, np.float64)
    grid = np.asarray(grid, np.float64)
    n, c, *spatial = x.shape
    rank = len(spatial)
    points = grid.shape[1:-1]
    flat = grid.reshape(n, -1, rank)
    # Axis k of x reads grid component rank - 1 - k.
    taps = [_axis(flat[:, :, rank - 1 - k], spatial[k], mode, padding, bool(align_corners))
            for k in range(rank)]
    out = np.zeros((n, c, flat.shape[1]))
    for combo in np.ndindex(*(len(t[0]) for t in taps)):
        weight = np.ones(flat.shape[:2])
        index = []
        for k, j in enumerate(combo):
            idx, w, ok = (t[j] for t in taps[k])
            weight = weight * w * ok
            index.append(idx)
        gathered = np.stack([x[b][(slice(None), *(i[b] for i in index))] for b in range(n)])
        out += gathered * weight[:, None, :]
    return out.reshape(n, c, *points)


def _lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    grid_sample(ins[0], ins[1], out=outs[0], **attrs_of(node))


define("grid_sample", ("x", "grid"),
       {"mode": "linear", "padding": "zeros", "align_corners": False},
       rule=_rule,
       reference=lambda a, at, s: [grid_sample_reference(a[0], a[1], **at)],
       lower=_lower, eager=grid_sample)
