"""Choosing a GEMM variant: main loop, tiles, wide loads, cooperative-matrix block configs.

:func:`choose_variant` picks the main loop and tiles of ``shaders/gemm.comp`` for a problem on
a device (:mod:`vkumd.compiler.kernels.gemm` says what each variant is); split-K, packing and
the launches themselves are :mod:`vkumd.compiler.kernels.gemm_plan`'s.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.compiler.kernels.gemm import (
    COOPMAT_TILE_VARIABLE,
    GEMM_CODES,
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
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.vk.caps import CoopMatShape, DeviceCaps

VARIANTS = ("lanes", "lanes_packed", "shared", "coopmat")
# The lanes path packs B into column panels first when enough row tiles reuse each panel
# to repay the copy (B's power-of-two row stride otherwise puts a panel's rows in few cache
# sets): 64 tiles of 32 rows, 2048 rows, the least at which it measured faster
# (docs/performance.md, "Kernel tuning").
PACK_MIN_TILES_M = 64
PACK_MIN_K = 256
# Whether float16 GEMMs on a CPU driver that lists cooperative-matrix shapes use them.
COOPMAT_ON_CPU = False
# The cooperative-matrix path takes the largest block config that still gives this many
# workgroups (an H200 has 132 SMs; fewer, larger blocks would leave SMs idle), else the one
# that keeps the most subgroups busy on the matrix.
COOPMAT_MIN_BLOCKS = 128
_FLAG_BIAS, _FLAG_RESIDUAL, _FLAG_BETA = 1, 2, 4
# Device types whose memory hierarchy favours shared-memory tiles.
_GPU_TYPES = ("discrete", "integrated")


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


def plan_for(caps: DeviceCaps, name: str, code: str, shape: GemmShape | None = None
             ) -> GemmPlan:
    """The plan of variant ``name`` (of :data:`VARIANTS`) for storage type ``code``."""
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


def dtype_name(dtype: Any) -> str:
    """A dtype's name (``dtype`` is a name or a vkumd DType).

    Raises:
        VkumdTypeError: not one of :data:`GEMM_CODES`.
    """
    name = getattr(dtype, "name", dtype)
    if name not in GEMM_CODES:
        raise VkumdTypeError(f"matmul: {name} is not supported; matmul takes float32, "
                             "float16, bfloat16 and int8 (-> int32)")
    return name


def available_variants(caps: DeviceCaps, dtype: Any) -> list[str]:
    """The variants ``matmul`` can run for ``dtype`` (a name or DType) on ``caps`` (what tests
    iterate over)."""
    names = ["lanes", "lanes_packed", "shared"]
    if dtype_name(dtype) == "float16" and caps.storage_16bit and _coopmat_setup(caps)[1]:
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
    dt = dtype_name(dtype)
    code = GEMM_CODES[dt]
    if force is not None:
        if force not in VARIANTS:
            raise VkumdValueError(f"matmul: variant={force!r} is unknown; use one of "
                                  f"{', '.join(VARIANTS)} or None")
        if force not in available_variants(caps, dt):
            raise VkumdValueError(
                f"matmul: variant={force!r} is not available for {dt} on {caps.name}; "
                f"available: {', '.join(available_variants(caps, dt))}")
        return plan_for(caps, force, code, shape)
    # Cooperative matrices where the hardware has them. A CPU driver that lists them
    # emulates them (lavapipe: the lanes path is 12x faster, docs/performance.md), so a CPU
    # device keeps the lanes path unless COOPMAT_ON_CPU is set.
    if "coopmat" in available_variants(caps, dt) and (caps.device_type != "cpu"
                                                      or COOPMAT_ON_CPU):
        return plan_for(caps, "coopmat", code, shape)
    if caps.device_type in _GPU_TYPES:
        return plan_for(caps, "shared", code, shape)
    plan = plan_for(caps, "lanes", code, shape)
    tiles_m = -(-shape.m // plan.tile_m) if shape is not None else 0
    if shape is not None and shape.k >= PACK_MIN_K and tiles_m >= PACK_MIN_TILES_M:
        return plan_for(caps, "lanes_packed", code, shape)
    return plan




