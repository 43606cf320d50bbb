"""``matmul``: batched GEMM with a fused epilogue, on ``shaders/gemm.comp``.

The function computed, for every batch entry (one kernel launch, C written once)::

    out = act(alpha * (op(a) @ op(b)) + bias) + residual + beta * out_before

``op(x)`` is ``x`` or, with ``trans_a``/``trans_b``, its transpose (of the last two
dimensions); ``act`` is ``None``, ``"relu"``, ``"gelu"`` (erf form), ``"gelu_tanh"`` or
``"silu"``; ``bias`` has length N and is added to every row; ``residual`` is added after the
activation (the transformer block's ``x + mlp(x)``); ``beta`` scales the prior contents of
``out=`` as in BLAS ``C = alpha*A@B + beta*C`` (and needs ``out=``). Products accumulate in
float32 (int32 for int8) and the result is rounded once to the output type.

Kernel variants (``variant=`` forces one; by default :func:`choose_variant` picks):

- ``"lanes"``: no shared memory; each workgroup is one subgroup, A values are handed between
  lanes with ``subgroupBroadcast``; 64-bit word loads where the layout allows, element
  loads otherwise. The path for lavapipe and other CPU drivers.
- ``"lanes_packed"``: the same, after copying B into contiguous column panels (one extra
  pass over B, a temporary of B's size); chosen when enough row tiles reuse each panel.
- ``"shared"``: shared-memory tiles, for GPUs.
- ``"coopmat"``: cooperative matrices at a shape the driver lists; float16 only. A workgroup
  of several subgroups computes a block of C (a config from the device's shared memory,
  subgroup size and the problem's size, or ``VKUMD_GEMM_COOPMAT_TILE``; see
  :func:`coopmat_plan`).

Split-K: for float32, when the output alone gives fewer workgroups than the device runs at
once and K is long (:data:`SPLIT_K_MIN_K`), K is cut into slices whose float32 partial sums
a second launch of the same kernel adds up and finishes (epilogue included).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import numbers
import os
import struct
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd import settings
from vkumd.compiler.kernels import ACTIVATIONS
from vkumd.compiler.kernels.gemm import (
    COOPMAT_TILE_VARIABLE,
    WORD_ELEMENTS,
    CoopMatTile,
    coopmat_tile_problem,
    coopmat_tiles,
    coopmat_variant,
    lanes_tile_n,
    lanes_variant,
    pack_variant,
    parse_coopmat_tile,
    shared_variant,
    usable_coopmat_shape,
)
from vkumd.compiler.registry import Variant, effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor
from vkumd.submission.recorder import grid_for
from vkumd.vk.caps import CoopMatShape, DeviceCaps

KERNEL = "gemm"
VARIANTS = ("lanes", "lanes_packed", "shared", "coopmat")
_PUSH = struct.Struct("<5Q10I2f4I")
# The lanes path packs B into column panels first when enough row tiles reuse each panel
# to repay the copy (measured on lavapipe: 2x at 2048^3, where B's power-of-two row stride
# puts a panel's rows in few cache sets).
PACK_MIN_TILES_M = 128
PACK_MIN_K = 256
# Split-K: K of at least SPLIT_K_MIN_K is cut into slices of at least SPLIT_K_MIN_SLICE (at
# most SPLIT_K_MAX of them) when the output alone gives at most 1/SPLIT_K_UNDERFILL of the
# workgroups the device runs at once: its thread count on a CPU driver,
# SPLIT_K_GPU_WORKGROUPS on a GPU. On the 2-core lavapipe host a 1-workgroup problem ran
# slower split in 2 (9.6 against 11.3 GFLOP/s, 8x16x200000), hence the margin.
SPLIT_K_UNDERFILL = 4
SPLIT_K_MIN_K = 4096
SPLIT_K_MIN_SLICE = 1024
SPLIT_K_MAX = 32
SPLIT_K_GPU_WORKGROUPS = 128
# Whether float16 GEMMs on a CPU driver that lists cooperative-matrix shapes use them.
COOPMAT_ON_CPU = False
# The cooperative-matrix path takes the largest block config that still gives this many
# workgroups (an H200 has 132 SMs; fewer, larger blocks would leave SMs idle), else the one
# that keeps the most subgroups busy on the matrix.
COOPMAT_MIN_BLOCKS = 128
_FLAG_BIAS, _FLAG_RESIDUAL, _FLAG_BETA = 1, 2, 4
_CODE = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int8": "I8"}
# Device types whose memory hierarchy favours shared-memory tiles.
_GPU_TYPES = ("discrete", "integrated")
_MAX_INDEX = 2**32 - 1  # element offsets travel as uint32


@dataclass(frozen=True)
class GemmPlan:
    """What :func:`choose_variant` decided for one problem.

    Attributes:
        name: a name from :data:`VARIANTS`.
        variant: the registry variant (defines and specialization constants).
        tile_m: rows of C per workgroup.
        tile_n: columns of C per workgroup.
        pack: the variant of the copy that packs B into panels first, or None.
    """

    name: str
    variant: Variant
    tile_m: int
    tile_n: int
    pack: Variant | None = None


def coopmat_gemm_shapes(caps: DeviceCaps) -> list[CoopMatShape]:
    """float16 x float16 + float32 subgroup shapes ``matmul`` can use on ``caps``."""
    if "coopmat" not in effective_caps(caps):
        return []
    return caps.coopmat_shapes("float16", "float32")


@dataclass(frozen=True)
class GemmShape:
    """The layout facts that decide between wide and element-wise loads.

    Attributes:
        m, n, k: the problem (op(A) is m x k, op(B) is k x n).
        trans_a, trans_b: whether A or B is stored transposed.
        aligned_a, aligned_b: whether the operand's address (and every batch entry's) is a
            multiple of 8 bytes.
        aligned16_a, aligned16_b: whether the operand's first address is a multiple of 16
            bytes (the cooperative-matrix path's 16-byte loads also need the contiguous
            dimension to be a multiple of 8 elements, which keeps every row aligned).
        batch: batch entries (workgroups per entry decide the coopmat block config).
    """

    m: int
    n: int
    k: int
    trans_a: bool = False
    trans_b: bool = False
    aligned_a: bool = True
    aligned_b: bool = True
    aligned16_a: bool = True
    aligned16_b: bool = True
    batch: int = 1


def _wide_loads(code: str, shape: GemmShape | None) -> tuple[int, int]:
    """WIDE_A and WIDE_B for the lanes path: 64-bit words where the layout allows them."""
    if shape is None:
        return 0, 0
    vw = WORD_ELEMENTS[code]
    wide_a = int(not shape.trans_a and shape.k % vw == 0 and shape.aligned_a)
    wide_b = 0
    if shape.aligned_b:
        if not shape.trans_b and shape.n % vw == 0:
            wide_b = 1
        elif shape.trans_b and shape.k % vw == 0:
            wide_b = 2
    return wide_a, wide_b


def _plan(caps: DeviceCaps, name: str, code: str, shape: GemmShape | None = None) -> GemmPlan:
    if name == "lanes":
        v = lanes_variant(caps, code, *_wide_loads(code, shape))
        return GemmPlan(name, v, v["TM"], lanes_tile_n(caps, v))
    if name == "lanes_packed":
        # Packed panels are always read a word at a time along N.
        wide_a = _wide_loads(code, shape)[0]
        v = lanes_variant(caps, code, wide_a, 1)
        return GemmPlan(name, v, v["TM"], lanes_tile_n(caps, v), pack_variant(caps, code))
    if name == "shared":
        v = shared_variant(caps, code)
        return GemmPlan(name, v, v["TM"], v["TN"])
    return coopmat_plan(caps, shape)


@functools.lru_cache(maxsize=16)
def _coopmat_ladder(caps: DeviceCaps, disabled: bool
                    ) -> tuple[CoopMatShape | None, tuple[CoopMatTile, ...]]:
    cm = usable_coopmat_shape(coopmat_gemm_shapes(caps))
    return cm, tuple(coopmat_tiles(caps, cm)) if cm is not None else ()


def _coopmat_setup(caps: DeviceCaps) -> tuple[CoopMatShape | None, tuple[CoopMatTile, ...]]:
    """The matrix shape the GEMM uses on ``caps`` and the block configs that fit.

    Cached (matmul plans on every call, and working this out took tens of microseconds),
    keyed on the caps and on ``VKUMD_DISABLE_COOPMAT``, which is read each time.
    """
    return _coopmat_ladder(caps, settings.flag("VKUMD_DISABLE_COOPMAT"))


def _coopmat_tile(shape: GemmShape | None, tiles: tuple[CoopMatTile, ...]) -> CoopMatTile:
    """The default block config: see :data:`COOPMAT_MIN_BLOCKS`."""
    if shape is None:
        return tiles[0]
    for tile in tiles:
        blocks = -(-shape.m // tile.bm) * -(-shape.n // tile.bn) * shape.batch
        if blocks >= COOPMAT_MIN_BLOCKS:
            return tile

    def busy(tile: CoopMatTile) -> int:
        # Subgroups whose warp tile touches the matrix (the rest multiply zeros).
        wm, wn = tile.bm // tile.wg_m, tile.bn // tile.wg_n
        return -(-shape.m // wm) * -(-shape.n // wn) * shape.batch

    return max(tiles, key=busy)  # ties keep the larger config


def coopmat_plan(caps: DeviceCaps, shape: GemmShape | None = None) -> GemmPlan:
    """The cooperative-matrix plan for a float16 problem: matrix shape, block config, loads.

    The matrix shape is 16x16x16 where listed, else the largest listed (see
    :func:`~vkumd.compiler.kernels.gemm.usable_coopmat_shape`). The block config is
    ``VKUMD_GEMM_COOPMAT_TILE`` when set (``BMxBNxBK:WG_MxWG_N[:GROUP_M]``), else the
    largest of :func:`~vkumd.compiler.kernels.gemm.coopmat_tiles` that gives at least
    :data:`COOPMAT_MIN_BLOCKS` workgroups. Operands are staged in their stored orientation and
    read 16 bytes at a time when their contiguous dimension is a multiple of 8 elements and
    their address is 16-byte aligned (element loads otherwise, and when ``shape`` is None).

    Raises:
        VkumdValueError: the device has no usable shape, or ``VKUMD_GEMM_COOPMAT_TILE`` is
            malformed or does not fit the device.
    """
    return _coopmat_plan(caps, shape, settings.flag("VKUMD_DISABLE_COOPMAT"),
                         settings.text(COOPMAT_TILE_VARIABLE))


@functools.lru_cache(maxsize=256)
def _coopmat_plan(caps: DeviceCaps, shape: GemmShape | None, disabled: bool,
                  text: str | None) -> GemmPlan:
    # Cached on everything it reads (errors are raised afresh each time); the plan's variant
    # is shared between calls and never modified.
    cm, tiles = _coopmat_ladder(caps, disabled)
    if cm is None or not tiles:
        raise VkumdValueError(f"matmul: {caps.name} lists no float16 cooperative-matrix shape "
                              "the coopmat GEMM can use (sizes multiples of 8, a block that "
                              "fits its shared memory); use another variant")
    a_t = int(shape is not None and shape.trans_a)
    b_t = int(shape is not None and shape.trans_b)
    a_vec = b_vec = 0
    if shape is not None:
        # The contiguous dimension: K for A, N for B, or the other when transposed.
        a_vec = int(shape.aligned16_a and (shape.m if a_t else shape.k) % 8 == 0)
        b_vec = int(shape.aligned16_b and (shape.k if b_t else shape.n) % 8 == 0)
    if text is not None:
        tile = parse_coopmat_tile(text)
        problem = coopmat_tile_problem(caps, cm, tile, a_t, b_t)
        if problem is not None:
            raise VkumdValueError(f"{COOPMAT_TILE_VARIABLE}={text!r} does not fit {cm} on "
                                  f"{caps.name}: {problem}; unset it or pick another")
    else:
        tile = _coopmat_tile(shape, tiles)
    v = coopmat_variant(caps, cm, tile, a_t, b_t, a_vec, b_vec)
    return GemmPlan("coopmat", v, tile.bm, tile.bn)


def available_variants(caps: DeviceCaps, dtype: Any) -> list[str]:
    """The variants ``matmul`` can run for ``dtype`` on ``caps`` (what tests iterate over)."""
    dt = dtypes.dtype(dtype)
    names = ["lanes", "lanes_packed", "shared"]
    if dt is dtypes.float16 and caps.storage_16bit and _coopmat_setup(caps)[1]:
        names.append("coopmat")
    return names


def choose_variant(caps: DeviceCaps, dtype: Any, shape: GemmShape | None = None,
                   force: str | None = None) -> GemmPlan:
    """Pick the GEMM variant for a problem of ``dtype`` on ``caps``.

    float16 goes to cooperative matrices when a GPU lists a float16 -> float32 shape (a CPU
    driver that lists them emulates them slowly; see :data:`COOPMAT_ON_CPU`); GPUs
    (discrete or integrated) take shared-memory tiles; CPU drivers take the lanes path,
    which the measurements on lavapipe favour, reading 64-bit words where ``shape``'s
    layout allows (the aligned variant) and single elements otherwise.

    Args:
        shape: sizes, transposes and alignment; None picks the element-wise lanes loads.
        force: a name from :data:`VARIANTS` to use instead of the choice.

    Raises:
        VkumdValueError: ``force`` is not a variant name, or not one this device/dtype has.
    """
    dt = dtypes.dtype(dtype)
    code = _CODE[dt.name]
    if force is not None:
        if force not in VARIANTS:
            raise VkumdValueError(f"matmul: variant={force!r} is unknown; use one of "
                                  f"{', '.join(VARIANTS)} or None")
        if force not in available_variants(caps, dt):
            raise VkumdValueError(
                f"matmul: variant={force!r} is not available for {dt.name} on {caps.name}; "
                f"available: {', '.join(available_variants(caps, dt))}")
        return _plan(caps, force, code, shape)
    # Cooperative matrices where the hardware has them. lavapipe 26 lists them too, but
    # emulates them: there the lanes path measured 12x faster (8.4 against 0.7 GFLOP/s,
    # float16 512^3), so a CPU device keeps the lanes path unless COOPMAT_ON_CPU is set.
    if "coopmat" in available_variants(caps, dt) and (caps.device_type != "cpu"
                                                      or COOPMAT_ON_CPU):
        return _plan(caps, "coopmat", code, shape)
    if caps.device_type in _GPU_TYPES:
        return _plan(caps, "shared", code, shape)
    plan = _plan(caps, "lanes", code, shape)
    tiles_m = -(-shape.m // plan.tile_m) if shape is not None else 0
    if shape is not None and shape.k >= PACK_MIN_K and tiles_m >= PACK_MIN_TILES_M:
        return _plan(caps, "lanes_packed", code, shape)
    return plan


# -- argument checks ---------------------------------------------------------------------


def _tensor(t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise VkumdTypeError(f"matmul: {what} must be a vkumd Tensor, not {type(t).__name__}")
    t.context.check_open("matmul")
    if t.released:
        raise VkumdValueError(f"matmul: {what} was released")
    return t


def _real(value: Any, what: str) -> float:
    if isinstance(value, (bool,)) or not isinstance(value, numbers.Real):
        raise VkumdTypeError(f"matmul: {what} must be a real number, not {type(value).__name__}")
    result = float(value)
    if not math.isfinite(result):
        raise VkumdValueError(f"matmul: {what}={value!r} is not finite")
    return result


def _check_dtype(context: Any, dt: dtypes.DType) -> None:
    if dt.name not in _CODE:
        raise VkumdTypeError(f"matmul: {dt.name} is not supported; matmul takes float32, "
                             "float16, bfloat16 and int8 (-> int32)")
    have = effective_caps(context.caps)
    if dt.itemsize == 2 and "storage16" not in have:
        raise CapabilityMissing(f"matmul: {dt.name} needs 16-bit storage "
                                f"(storageBuffer16BitAccess), which {context.caps.name} lacks; "
                                "use float32")
    if dt is dtypes.int8 and not {"int8", "storage8"} <= have:
        raise CapabilityMissing(f"matmul: int8 needs shaderInt8 and 8-bit storage, which "
                                f"{context.caps.name} lacks; cast to float32 first")
    if not context.caps.buffer_device_address:
        raise CapabilityMissing(f"matmul: the GEMM kernel reads through buffer device "
                                f"addresses, which {context.caps.name} lacks")


def _batch_strides(a_batch: tuple[int, ...], b_batch: tuple[int, ...]
                   ) -> tuple[tuple[int, ...], bool, bool]:
    """The output's batch shape, and whether A and B repeat across it."""
    if not b_batch or math.prod(b_batch) == 1 and len(b_batch) <= len(a_batch):
        return a_batch, False, True
    if not a_batch or math.prod(a_batch) == 1 and len(a_batch) <= len(b_batch):
        return b_batch, True, False
    if a_batch != b_batch:
        raise VkumdValueError(f"matmul: batch dimensions {a_batch} and {b_batch} differ; pass "
                              "equal batch shapes, or a 2-D right-hand matrix shared by the "
                              "batch")
    return a_batch, False, False


def matmul(a: Tensor, b: Tensor, *, bias: Tensor | None = None, activation: str | None = None,
           residual: Tensor | None = None, alpha: float = 1.0, beta: float = 0.0,
           out: Tensor | None = None, trans_a: bool = False, trans_b: bool = False,
           variant: str | None = None) -> Tensor:
    """``act(alpha * op(a) @ op(b) + bias) + residual + beta * out``, batched, in one kernel.

    Args:
        a: ``(..., M, K)``, or ``(..., K, M)`` with ``trans_a``.
        b: ``(K, N)`` (``(N, K)`` with ``trans_b``), shared by every batch entry of ``a``
            (weights); or with batch dimensions equal to ``a``'s. Either side may also be
            2-D while the other is batched.
        bias: ``(N,)``, added to every row before the activation.
        activation: ``None``, ``"relu"``, ``"gelu"`` (erf), ``"gelu_tanh"`` or ``"silu"``.
        residual: the output's shape, or ``(M, N)`` shared by the batch; added after the
            activation.
        alpha: scales the product.
        beta: scales the prior contents of ``out`` (which must then be given).
        out: the result tensor to write; a new one when None.
        trans_a: use the transpose of ``a``'s last two dimensions.
        trans_b: use the transpose of ``b``'s last two dimensions (``x @ W.T`` for ``W`` of
            shape ``(N, K)``).
        variant: force a kernel variant (``"lanes"``, ``"lanes_packed"``, ``"shared"``,
            ``"coopmat"``) instead of the device's choice; for tests and benchmarks.

    All tensors share one dtype: float32, float16 or bfloat16 (accumulated in float32), or
    int8, whose result is int32 and which takes no epilogue (no bias, activation, residual,
    alpha or beta).

    Returns:
        ``out``, of shape ``batch + (M, N)`` and ``a``'s dtype (int32 for int8).

    Raises:
        VkumdTypeError: a non-tensor argument, dtypes that differ, an unsupported dtype, an
            ``out`` of the wrong dtype, a non-numeric alpha/beta.
        VkumdValueError: fewer than 2 dimensions, inner dimensions that differ, batch shapes
            that differ, a bias or residual of the wrong shape, an unknown activation or
            variant, ``beta`` without ``out``, ``out`` of the wrong shape or overlapping an
            input, tensors of different contexts.
        CapabilityMissing: 16-bit or 8-bit types on a device without that storage.
    """
    _tensor(a, "a")
    _tensor(b, "b")
    context = a.context
    if b.context is not context:
        raise VkumdValueError("matmul: a and b belong to different contexts")
    if a.dtype is not b.dtype:
        raise VkumdTypeError(f"matmul: a is {a.dtype.name} and b is {b.dtype.name}; cast one "
                             "so both have the same dtype")
    dt = a.dtype
    _check_dtype(context, dt)
    if activation not in ACTIVATIONS:
        known = ", ".join(repr(x) for x in ACTIVATIONS)
        raise VkumdValueError(f"matmul: activation={activation!r} is unknown; use one of "
                              f"{known}")
    alpha = _real(alpha, "alpha")
    beta = _real(beta, "beta")
    if a.ndim < 2 or b.ndim < 2:
        raise VkumdValueError(f"matmul: a and b need at least 2 dimensions, got shapes "
                              f"{a.shape} and {b.shape}; reshape vectors to (1, K) or (K, 1)")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if k != k2:
        raise VkumdValueError(
            f"matmul: inner dimensions differ: op(a) is {m}x{k} and op(b) is {k2}x{n} "
            f"(a {a.shape}{' transposed' if trans_a else ''}, b {b.shape}"
            f"{' transposed' if trans_b else ''})")
    batch, a_repeats, b_repeats = _batch_strides(a.shape[:-2], b.shape[:-2])
    out_shape = (*batch, m, n)
    out_dtype = dtypes.int32 if dt is dtypes.int8 else dt

    if dt is dtypes.int8 and (bias is not None or activation is not None
                              or residual is not None or alpha != 1.0 or beta != 0.0):
        raise VkumdValueError("matmul: int8 inputs give the exact int32 product only; bias, "
                              "activation, residual, alpha and beta need float inputs")
    if bias is not None:
        _tensor(bias, "bias")
        if bias.dtype is not dt:
            raise VkumdTypeError(f"matmul: bias is {bias.dtype.name}; it must be {dt.name} "
                                 "like a and b")
        if bias.shape != (n,):
            raise VkumdValueError(f"matmul: bias has shape {bias.shape}; it must be ({n},), "
                                  "one value per output column")
        if bias.context is not context:
            raise VkumdValueError("matmul: bias belongs to a different context")
    r_repeats = False
    if residual is not None:
        _tensor(residual, "residual")
        if residual.dtype is not dt:
            raise VkumdTypeError(f"matmul: residual is {residual.dtype.name}; it must be "
                                 f"{dt.name} like a and b")
        if residual.shape == (m, n) and batch:
            r_repeats = True
        elif residual.shape != out_shape:
            raise VkumdValueError(f"matmul: residual has shape {residual.shape}; it must be "
                                  f"the output's shape {out_shape} or ({m}, {n})")
        if residual.context is not context:
            raise VkumdValueError("matmul: residual belongs to a different context")
    if beta != 0.0 and out is None:
        raise VkumdValueError("matmul: beta scales the prior contents of out=, so beta != 0 "
                              "needs out=")
    if out is not None:
        _tensor(out, "out=")
        if out.context is not context:
            raise VkumdValueError("matmul: out= belongs to a different context")
        if out.dtype is not out_dtype:
            raise VkumdTypeError(f"matmul: out= is {out.dtype.name}; the result is "
                                 f"{out_dtype.name}")
        if out.shape != out_shape:
            raise VkumdValueError(f"matmul: out= has shape {out.shape}; expected {out_shape}")
        for t, what in ((a, "a"), (b, "b"), (bias, "bias")):
            if t is not None and t.allocation is not None and t.allocation is out.allocation:
                raise VkumdValueError(f"matmul: out= is the same tensor as {what}; the kernel "
                                      "would read what it overwrites. Use a new output")
    # Every batch entry starts m*k (or k*n) elements after the last: aligned when the first
    # is and the entry size keeps it so.
    aligned_a = _address(a) % 8 == 0 and (a_repeats or m * k * dt.itemsize % 8 == 0)
    aligned_b = _address(b) % 8 == 0 and (b_repeats or k * n * dt.itemsize % 8 == 0)
    shape = GemmShape(m, n, k, trans_a, trans_b, aligned_a, aligned_b,
                      _address(a) % 16 == 0, _address(b) % 16 == 0, math.prod(batch))
    plan = choose_variant(context.caps, dt, shape, force=variant)
    result = out if out is not None else context.empty(out_shape, out_dtype)
    count = math.prod(batch)
    if m == 0 or n == 0 or count == 0:
        return result
    for t in (a, b, result, residual):
        if t is not None and t.size > _MAX_INDEX:
            raise VkumdValueError(f"matmul: a tensor of {t.size} elements is past the "
                                  "kernel's 32-bit indexing; split the batch")

    flags = ((_FLAG_BIAS if bias is not None else 0)
             | (_FLAG_RESIDUAL if residual is not None else 0)
             | (_FLAG_BETA if beta != 0.0 else 0))
    # op(A)[m, k] = A[m * sam + k * sak]; op(B)[k, n] = B[k * sbk + n * sbn].
    sam, sak = (1, m) if trans_a else (k, 1)
    sbk, sbn = (1, k) if trans_b else (n, 1)
    esize = dt.itemsize
    job = _Job(a=_address(a), b=_address(b), c=_address(result),
               bias=_address(bias) if bias is not None else 0,
               residual=_address(residual) if residual is not None else 0,
               m=m, n=n, k=k, sam=sam, sak=sak, sbk=sbk, sbn=sbn,
               a_batch=0 if a_repeats else m * k, b_batch=0 if b_repeats else k * n,
               r_batch=0 if r_repeats else m * n, alpha=alpha, beta=beta,
               act=ACTIVATIONS[activation], flags=flags, b_cols=n, esize=esize,
               c_batch_bytes=m * n * out_dtype.itemsize)
    splits = _split_k(context.caps, plan, m, n, k, count, dt)
    if splits > 1:
        _split_k_matmul(context, plan, job, splits, a, b, result, bias, residual)
        return result
    b_source = b
    packed = None
    if plan.pack is not None and k > 0:
        tiles_n = -(-n // plan.tile_n)
        job.b_panel = k * plan.tile_n
        job.b_cols = tiles_n * plan.tile_n
        b_entries = 1 if b_repeats else count
        packed = context.empty((b_entries * tiles_n * job.b_panel,), dt)
        _pack(context, plan, b, packed, n, k, sbk, sbn, job.b_batch, job.b_panel, b_entries)
        b_source = packed
        job.b = _address(packed)
        job.sbk, job.sbn = plan.tile_n, 1
        job.b_batch = 0 if b_repeats else tiles_n * job.b_panel
    _launch(context, plan, job, [a, b_source, result, bias, residual], count)
    if packed is not None:
        packed.release()  # its memory returns to the pool once the GEMM has run
    return result


@dataclass
class _Job:
    """One GEMM launch's push constants (addresses in bytes, strides in elements)."""

    a: int
    b: int
    c: int
    bias: int
    residual: int
    m: int
    n: int
    k: int
    sam: int
    sak: int
    sbk: int
    sbn: int
    a_batch: int
    b_batch: int
    r_batch: int
    alpha: float
    beta: float
    act: int
    flags: int
    b_cols: int
    esize: int
    c_batch_bytes: int
    b_panel: int = 0

    def push(self, first: int) -> bytes:
        """The push constants for batch entries from ``first`` on."""
        e = self.esize
        return _PUSH.pack(
            self.a + first * self.a_batch * e, self.b + first * self.b_batch * e,
            self.c + first * self.c_batch_bytes, self.bias,
            self.residual + first * self.r_batch * e if self.residual else 0,
            self.m, self.n, self.k, self.sam, self.sak, self.sbk, self.sbn, self.a_batch,
            self.b_batch, self.r_batch, self.alpha, self.beta, self.act, self.flags,
            self.b_panel, self.b_cols)


def _launch(context: Any, plan: GemmPlan, job: _Job, tensors: list[Tensor | None],
            count: int) -> None:
    """Dispatch ``job`` over ``count`` batch entries; ``tensors`` are a, b, c, bias, residual."""
    tiles_m = -(-job.m // plan.tile_m)
    tiles_n = -(-job.n // plan.tile_n)
    limits = context.caps.max_workgroup_count
    if tiles_m > limits[0] or tiles_n > limits[1]:
        raise VkumdValueError(f"matmul: {job.m}x{job.n} needs {tiles_m}x{tiles_n} "
                              f"workgroups, more than {context.caps.name} dispatches "
                              f"({limits[0]}x{limits[1]})")
    out = tensors[2]
    assert out is not None
    # Absent operands (and the empty A and B of K = 0) are never read; their slots bind
    # the output so the hazard tracker sees only real ranges.
    ranges = [_range(t if t is not None and t.allocation is not None else out)
              for t in tensors]
    # Batches past maxComputeWorkGroupCount[2] go in several launches, each with its
    # operands' addresses moved to its first entry.
    for first in range(0, count, limits[2]):
        chunk = min(limits[2], count - first)
        context.dispatch(KERNEL, plan.variant, ranges, job.push(first),
                         (tiles_m, tiles_n, chunk), writes=(2,))


def _split_k(caps: DeviceCaps, plan: GemmPlan, m: int, n: int, k: int, count: int,
             dt: dtypes.DType) -> int:
    """How many K slices to run in parallel: more than 1 when the grid under-fills the device.

    Split-K runs for float32 (the slices' float32 partial sums are exact inputs to the
    final pass) on the lanes and shared paths, for one batch entry.
    """
    if dt is not dtypes.float32 or plan.name not in ("lanes", "shared") or count != 1:
        return 1
    workgroups = -(-m // plan.tile_m) * -(-n // plan.tile_n)
    # A CPU driver runs one workgroup per thread at a time; a GPU wants many per core.
    target = (os.cpu_count() or 1) if caps.device_type == "cpu" else SPLIT_K_GPU_WORKGROUPS
    if workgroups * SPLIT_K_UNDERFILL > target or k < SPLIT_K_MIN_K:
        return 1
    return max(1, min(-(-target // workgroups), k // SPLIT_K_MIN_SLICE, SPLIT_K_MAX))


def _split_k_matmul(context: Any, plan: GemmPlan, job: _Job, splits: int, a: Tensor,
                    b: Tensor, result: Tensor, bias: Tensor | None,
                    residual: Tensor | None) -> None:
    """Split-K: K slices into float32 partial sums, then one pass that sums and finishes.

    The second pass is the same GEMM kernel: for each output row r (a batch entry), a 1 x S
    row of ones times the S x N slice of partial sums at row r, with the epilogue on.
    """
    m, n, k = job.m, job.n, job.k
    slice_k = -(-k // splits)
    splits = -(-k // slice_k)
    partial = context.empty((splits, m, n), dtypes.float32)
    first = dataclasses.replace(job, c=_address(partial), bias=0, residual=0, alpha=1.0,
                                beta=0.0, act=0, flags=0, k=slice_k,
                                a_batch=slice_k * job.sak, b_batch=slice_k * job.sbk,
                                r_batch=0, c_batch_bytes=m * n * 4)
    tensors = [a, b, partial, None, None]
    if splits > 1:
        _launch(context, plan, first, tensors, splits - 1)
    last = dataclasses.replace(first, k=k - (splits - 1) * slice_k)
    last = dataclasses.replace(last, a=first.a + (splits - 1) * first.a_batch * job.esize,
                               b=first.b + (splits - 1) * first.b_batch * job.esize,
                               c=first.c + (splits - 1) * m * n * 4)
    _launch(context, plan, last, tensors, 1)

    ones = context.tensor(np.ones((1, splits), dtype=np.float32))
    code = _CODE["float32"]
    reduce_plan = _plan(context.caps, plan.name, code, GemmShape(1, n, splits))
    finish = dataclasses.replace(job, a=_address(ones), b=_address(partial), m=1, k=splits,
                                 sam=splits, sak=1, sbk=m * n, sbn=1, a_batch=0, b_batch=n,
                                 r_batch=n, c_batch_bytes=n * result.dtype.itemsize)
    _launch(context, reduce_plan, finish, [ones, partial, result, bias, residual], m)
    partial.release()  # returned to the pool once the passes have run
    ones.release()


def _pack(context: Any, plan: GemmPlan, b: Tensor, packed: Tensor, n: int, k: int, sbk: int,
          sbn: int, b_batch: int, b_panel: int, entries: int) -> None:
    """Copy op(B) into ``packed`` as panels of ``plan.tile_n`` columns (zeros past N)."""
    assert plan.pack is not None
    elements = -(-n // plan.tile_n) * b_panel
    limits = context.caps.max_workgroup_count
    groups = grid_for(elements, plan.pack["WORKGROUP_SIZE"], limits[0])
    esize = b.dtype.itemsize
    for first in range(0, entries, limits[2]):
        chunk = min(limits[2], entries - first)
        push = _PUSH.pack(0, _address(b) + first * b_batch * esize,
                          _address(packed) + first * elements * esize, 0, 0,
                          0, n, k, 0, 0, sbk, sbn, 0, b_batch, 0, 1.0, 0.0, 0, 0, b_panel, 0)
        context.dispatch(KERNEL, plan.pack, [_range(b), _range(packed), _range(b), _range(b),
                                             _range(b)],
                         push, (groups[0], groups[1], chunk), writes=(1,))


def _range(t: Tensor) -> tuple[Any, int, int]:
    assert t.allocation is not None  # the output of a non-empty result has memory
    return (t.allocation.buffer, t.allocation.offset, t.nbytes)


def _address(t: Tensor) -> int:
    """The device address of ``t``'s first element; 0 for an empty tensor (never read)."""
    return t.allocation.device_address if t.allocation is not None else 0
