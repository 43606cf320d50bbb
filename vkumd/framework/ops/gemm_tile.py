"""A minimal cooperative-matrix GEMM: float16 ``A[M,K] @ B[K,N]`` accumulated into float32.

It runs ``shaders/gemm_coopmat_tile.comp`` with a tile shape the driver lists
(``DeviceCaps.coopmat_shapes("float16", "float32")`` at subgroup scope): the shape reaches the
shader as specialization constants, so no shape is compiled in. Any ``M, N, K >= 1`` works;
edge tiles are zero-padded in shared memory by the shader.
"""

from __future__ import annotations

import struct

from vkumd.compiler.kernels import WORKGROUP
from vkumd.compiler.registry import effective_caps
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor
from vkumd.submission.recorder import grid_for
from vkumd.vk.caps import CoopMatShape, DeviceCaps
from vkumd.vk.errors import CapabilityMissing, VkumdTypeError, VkumdValueError

KERNEL = "gemm_coopmat_tile"
_PUSH = struct.Struct("<6I")
# Alignment, in bytes, that coopMatLoad/Store need of a row's start and stride: the lesser of
# 16 and the size of one row of the tile (VUID-RuntimeSpirv-OpCooperativeMatrixLoadKHR-08986).
_LOAD_ALIGN = 16


def coopmat_tile_shapes(caps: DeviceCaps) -> list[CoopMatShape]:
    """The float16 x float16 + float32 subgroup shapes this op can use on ``caps``."""
    return caps.coopmat_shapes("float16", "float32")


def _pick_shape(caps: DeviceCaps, shape: CoopMatShape | None) -> CoopMatShape:
    shapes = coopmat_tile_shapes(caps)
    if "coopmat" not in effective_caps(caps) or not shapes:
        if not caps.cooperative_matrix:
            why = "it has no VK_KHR_cooperative_matrix"
        elif "coopmat" not in effective_caps(caps):
            why = "VKUMD_DISABLE_COOPMAT turned cooperative matrices off"
        else:
            listed = ", ".join(str(s) for s in caps.cooperative_matrix_shapes) or "none"
            why = ("it lists no float16*float16+float32 subgroup-scope cooperative-matrix shape "
                   f"(listed: {listed})")
        raise CapabilityMissing(
            f"coopmat_matmul_tile needs cooperative matrices, but {caps.name} "
            f"({caps.driver_info}) cannot run it: {why}. Use the cooperative-matrix lane "
            "(ci/coopmat-lane.sh) or a device that has them")
    if not caps.storage_16bit:
        raise CapabilityMissing(f"coopmat_matmul_tile: float16 tensors need 16-bit storage, "
                                f"which {caps.name} lacks")
    if shape is None:
        # The largest tile does the most work per load; ties keep the driver's order.
        return max(shapes, key=lambda s: s.m * s.n * s.k)
    if shape not in shapes:
        raise VkumdValueError(f"coopmat_matmul_tile: shape {shape} is not one "
                              f"{caps.name} lists; choose from {[str(s) for s in shapes]}")
    return shape


def _aligned(offset: int, row_bytes: int, tile_row_bytes: int) -> bool:
    need = min(_LOAD_ALIGN, tile_row_bytes)
    return offset % _LOAD_ALIGN == 0 and row_bytes % need == 0 and tile_row_bytes % need == 0


def coopmat_matmul_tile(a: Tensor, b: Tensor, *, out: Tensor | None = None,
                        shape: CoopMatShape | None = None) -> Tensor:
    """``a @ b`` for float16 ``a[M,K]`` and ``b[K,N]``, accumulated and returned in float32.

    Args:
        a: float16, shape ``(M, K)``, row-major.
        b: float16, shape ``(K, N)``, row-major.
        out: optional float32 ``(M, N)`` tensor to write.
        shape: a tile shape from ``coopmat_tile_shapes(ctx.caps)``; default: the largest.

    Raises:
        VkumdTypeError: operands that are not vkumd tensors, or not float16; ``out`` not
            float32.
        VkumdValueError: not 2-D, inner dimensions that differ, a zero dimension, ``out`` of
            the wrong shape, tensors of different contexts.
        CapabilityMissing: the device lists no float16->float32 cooperative-matrix shape.
    """
    name = "coopmat_matmul_tile"
    if not isinstance(a, Tensor) or not isinstance(b, Tensor):
        raise VkumdTypeError(f"{name}: both operands must be vkumd tensors, got "
                             f"{type(a).__name__} and {type(b).__name__}")
    if a.context is not b.context:
        raise VkumdValueError(f"{name}: the operands belong to different contexts")
    if a.dtype is not dtypes.float16 or b.dtype is not dtypes.float16:
        raise VkumdTypeError(f"{name}: A and B must be float16, got {a.dtype.name} and "
                             f"{b.dtype.name}")
    if a.ndim != 2 or b.ndim != 2:
        raise VkumdValueError(f"{name}: A and B must be 2-D, got shapes {a.shape} and {b.shape}")
    m, k = a.shape
    k2, n = b.shape
    if k != k2:
        raise VkumdValueError(f"{name}: inner dimensions differ: A is {a.shape} and B is "
                              f"{b.shape} ({k} != {k2})")
    if min(m, n, k) < 1:
        raise VkumdValueError(f"{name}: every dimension must be >= 1, got M={m}, N={n}, K={k}")
    if out is not None:
        if not isinstance(out, Tensor):
            raise VkumdTypeError(f"{name}: out= must be a vkumd tensor, got "
                                 f"{type(out).__name__}")
        if out.dtype is not dtypes.float32:
            raise VkumdTypeError(f"{name}: out= must be float32, got {out.dtype.name}")
        if out.shape != (m, n):
            raise VkumdValueError(f"{name}: out= has shape {out.shape}; expected {(m, n)}")
        if out.context is not a.context:
            raise VkumdValueError(f"{name}: out= belongs to a different context")
    ctx = a.context
    tile = _pick_shape(ctx.caps, shape)
    if out is None:
        out = ctx.empty((m, n), dtypes.float32)

    tiles_n = -(-n // tile.n)
    tiles = -(-m // tile.m) * tiles_n
    aligned = 0
    if _aligned(a.allocation.offset, k * 2, tile.k * 2):
        aligned |= 1
    if _aligned(b.allocation.offset, n * 2, tile.n * 2):
        aligned |= 2
    if _aligned(out.allocation.offset, n * 4, tile.n * 4):
        aligned |= 4
    push = _PUSH.pack(m, n, k, tiles_n, tiles, aligned)
    variant = {WORKGROUP: ctx.caps.subgroup_size, "TM": tile.m, "TN": tile.n, "TK": tile.k}
    buffers = [(t.allocation.buffer, t.allocation.offset, t.nbytes) for t in (a, b, out)]
    # One workgroup (one subgroup) per tile; grid_for folds long rows into a second dimension.
    ctx.dispatch(KERNEL, variant, buffers, push,
                 grid_for(tiles, 1, ctx.caps.max_workgroup_count[0]), writes=(2,))
    return out
