"""The GEMM family (``shaders/gemm.comp``): one template, three main loops, one epilogue.

Variants differ in the main loop (``PATH``: ``lanes`` for CPU drivers such as lavapipe,
``shared`` for GPUs, ``coopmat`` where the driver lists cooperative-matrix shapes), the storage
type (``DTYPE``) and the tile sizes (specialization constants for the lanes and shared paths;
defines for the cooperative-matrix path, whose matrix types and arrays must be literal in the
SPIR-V the validation layer checks). The functions here build each variant for a device;
``vkumd.framework.opset.matmul`` chooses among them by shape and device.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from vkumd import settings
from vkumd.compiler.kernels.coopmat import (
    HALVES_PER_WORD,
    ranked_shapes,
    shared_memory_problem,
    staged_in_words,
    workgroup_problem,
)
from vkumd.compiler.kernels.limits import GEMM_DTYPES
from vkumd.compiler.kernels.type_codes import CODE_BYTES, type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import (
    SUBGROUP,
    WORKGROUP,
    Kernel,
    Variant,
    effective_caps,
    register,
)
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import CoopMatShape, DeviceCaps

# Main loops of shaders/gemm.comp (the PATH define).
GEMM_PATHS = {"lanes": 0, "shared": 1, "coopmat": 2, "pack": 3}
# The storage types of A and B and their type codes.
GEMM_CODES = type_codes(GEMM_DTYPES)
GEMM_TYPES = tuple(GEMM_CODES.values())
# Push constants: five 64-bit addresses, then ten uint32 shape/stride words, alpha, beta,
# the activation code, the epilogue flags and the packed-B panel size and width.
GEMM_PUSH = PushLayout("a:u64", "b:u64", "c:u64", "bias:u64", "residual:u64", "M:u32", "N:u32",
                       "K:u32", "sam:u32", "sak:u32", "sbk:u32", "sbn:u32", "a_batch:u32",
                       "b_batch:u32", "r_batch:u32", "alpha:f32", "beta:f32", "act:u32",
                       "flags:u32", "b_panel:u32", "b_cols:u32", "act_p0:f32",
                       "act_p1:f32", "bias_batch:u32")
PACK_WORKGROUP = 64

# The lanes path: TM rows x (NJ * VC * subgroup) columns per workgroup (VC = elements per
# 64-bit word when B is read a word at a time along N, else 1), K unrolled by KU; each lane
# keeps TM x LANES_COLUMNS accumulators. The accumulators live on the stack on lavapipe; what
# pays is amortising the per-iteration gathers, A broadcasts and loop-mask blends over more
# multiply-adds, so the tile is the largest that measured faster (docs/performance.md,
# "Kernel tuning"). Rows shrink (int8 among them: 8 values per word, K by 8) until a lane's
# multiply-adds per iteration stay within LANES_BODY.
LANES_TM = 32
LANES_KU = 4
LANES_BODY = 1024
LANES_COLUMNS = 8
# Elements of each storage type in one 64-bit word (the unit of a wide load).
WORD_ELEMENTS = {code: 8 // CODE_BYTES[code] for code in GEMM_TYPES}
# The shared-memory path: a workgroup of WG invocations computes TM x TN, each invocation
# RM x RN of it, staging TK-deep slices of A and B in shared memory.
SHARED_TILE = {"TM": 64, "TN": 64, "TK": 16, "RM": 4, "RN": 4}


def gemm_type_codes(caps: DeviceCaps) -> list[str]:
    """The storage types the GEMM kernel can take on ``caps``."""
    have = effective_caps(caps)
    codes = ["F32"]
    if "storage16" in have:
        codes += ["F16", "BF16"]
    if {"int8", "storage8"} <= have:
        codes.append("I8")
    return codes


def lanes_variant(caps: DeviceCaps, dtype: str, wide_a: int = 0, wide_b: int = 0) -> Variant:
    """The no-shared-memory variant: one subgroup per workgroup.

    Args:
        dtype: storage type code (``F32``, ``F16``, ``BF16``, ``I8``).
        wide_a: 1 to read op(A) a 64-bit word at a time along K (rows contiguous, K a
            multiple of the word's elements, 8-byte aligned).
        wide_b: 1 to read op(B) a word at a time along N (B not transposed, N a multiple of
            the word's elements), 2 along K (B transposed, K a multiple), 0 element by element.
    """
    vw = WORD_ELEMENTS[dtype]
    vc = vw if wide_b == 1 else 1  # columns one B load carries
    nj = max(1, LANES_COLUMNS // vc)
    k_step = vw if wide_a or wide_b == 2 else 1
    ku = max(LANES_KU, k_step)
    tm = max(caps.subgroup_size, min(LANES_TM, LANES_BODY // (nj * vc * ku)))
    return {"PATH": GEMM_PATHS["lanes"], "DTYPE": dtype, WORKGROUP: caps.subgroup_size,
            "TM": tm, "NJ": nj, "KU": ku, "WIDE_A": wide_a, "WIDE_B": wide_b}


def lanes_tile_n(caps: DeviceCaps, variant: Variant) -> int:
    """Columns of C one lanes-path workgroup computes."""
    vc = WORD_ELEMENTS[variant["DTYPE"]] if variant["WIDE_B"] == 1 else 1
    return caps.subgroup_size * variant["NJ"] * vc


def pack_variant(caps: DeviceCaps, dtype: str) -> Variant:
    """The B-packing copy for the lanes path with B read a word at a time (WIDE_B = 1)."""
    tile_n = lanes_tile_n(caps, lanes_variant(caps, dtype, 0, 1))
    return {"PATH": GEMM_PATHS["pack"], "DTYPE": dtype, WORKGROUP: PACK_WORKGROUP,
            "TN": tile_n}


def shared_variant(caps: DeviceCaps, dtype: str) -> Variant:
    """The shared-memory tiled variant for GPUs."""
    tile = dict(SHARED_TILE)
    threads = (tile["TM"] // tile["RM"]) * (tile["TN"] // tile["RN"])
    if threads > caps.max_workgroup_invocations:
        # Vulkan only promises 128 invocations: halve the tile (a quarter of the threads).
        tile["TM"] //= 2
        tile["TN"] //= 2
        threads //= 4
    return {"PATH": GEMM_PATHS["shared"], "DTYPE": dtype, WORKGROUP: threads, **tile}


# -- the cooperative-matrix path ---------------------------------------------------------
#
# A workgroup of WG_M x WG_N subgroups computes a BM x BN block of C, taking K in BK-deep
# slices staged (double-buffered) in shared memory; each subgroup keeps its
# (BM / WG_M) x (BN / WG_N) warp tile as a grid of accumulator matrices for the whole K loop.
# The environment variable below forces one block config (for benchmarks that sweep them).
COOPMAT_TILE_VARIABLE = "VKUMD_GEMM_COOPMAT_TILE"
# Halves of padding per staged row (the kernel's PAD): 16 bytes move the rows one fragment
# load reads into different shared-memory banks.
COOPMAT_PAD = 8
# Block rows per launch-order group (the kernel's GROUP_M): workgroups resident together
# then share a few panels of A and B in the L2 cache.
COOPMAT_GROUP_M = 8
# Accumulator matrices one subgroup may hold: past this the registers spill.
COOPMAT_MAX_FRAGMENTS = 64
# The block configs the host picks from, largest first, in units of the matrix shape
# (m, n, k): BM/m, BN/n, BK/k, WG_M, WG_N. With 16x16x16 on a 32-wide subgroup: 128x128x32
# with 2x2 subgroups of 64x64 (4x4 accumulators each: 16 MMAs per 8 fragment loads), 64x64x32
# with 2x2 subgroups of 32x32 for problems that give few large blocks, and 32x32x32 on one
# subgroup for the smallest. Each fits 48 KiB of shared memory double-buffered.
COOPMAT_LADDER = ((8, 8, 2, 2, 2), (4, 4, 2, 2, 2), (2, 2, 2, 1, 1))
_TILE_FORM = re.compile(r"^\s*(\d+)x(\d+)x(\d+):(\d+)x(\d+)(?::(\d+))?\s*$")


@dataclass(frozen=True)
class CoopMatTile:
    """A block config of the cooperative-matrix GEMM.

    Attributes:
        bm, bn: rows and columns of C per workgroup.
        bk: depth of the K slices staged in shared memory.
        wg_m, wg_n: subgroups per workgroup along M and N; each owns a
            ``(bm / wg_m) x (bn / wg_n)`` warp tile.
        group_m: block rows per launch-order group (1: plain order).
    """

    bm: int
    bn: int
    bk: int
    wg_m: int
    wg_n: int
    group_m: int = COOPMAT_GROUP_M

    def __str__(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}:{self.wg_m}x{self.wg_n}:{self.group_m}"


@functools.lru_cache(maxsize=64)
def parse_coopmat_tile(text: str) -> CoopMatTile:
    """Read a block config written ``BMxBNxBK:WG_MxWG_N`` or ``BMxBNxBK:WG_MxWG_N:GROUP_M``.

    Args:
        text: e.g. ``"128x128x32:2x2"`` (the value of ``VKUMD_GEMM_COOPMAT_TILE``).

    Returns:
        The config (``group_m`` defaults to :data:`COOPMAT_GROUP_M`).

    Raises:
        VkumdValueError: the text is not of that form or a number is 0.
    """
    match = _TILE_FORM.match(text)
    if match is None:
        raise VkumdValueError(
            f"{COOPMAT_TILE_VARIABLE}={text!r} is not a block config; write "
            "BMxBNxBK:WG_MxWG_N[:GROUP_M] (rows x columns x K-slice of the block, then "
            "subgroups along M x N, then optionally block rows per launch group), e.g. "
            "128x128x32:2x2 or 64x64x32:2x2:4")
    values = [int(g) if g is not None else COOPMAT_GROUP_M for g in match.groups()]
    if min(values) < 1:
        raise VkumdValueError(f"{COOPMAT_TILE_VARIABLE}={text!r}: every number must be at "
                              "least 1")
    return CoopMatTile(*values)


settings.register_reader(COOPMAT_TILE_VARIABLE, parse_coopmat_tile)


def usable_coopmat_shape(shapes: list[CoopMatShape]) -> CoopMatShape | None:
    """The listed float16 shape the GEMM uses: 16x16x16 if listed, else the largest.

    Only shapes whose sizes are multiples of 8 qualify: the kernel stages 8 halves (16 bytes)
    per shared-memory word and addresses fragments in whole words, A's rows too.
    """
    ranked = ranked_shapes(shapes, lambda s: staged_in_words(s) and s.m % HALVES_PER_WORD == 0)
    return ranked[0] if ranked else None


def coopmat_shared_bytes(shape: CoopMatShape, tile: CoopMatTile, a_t: int = 0,
                         b_t: int = 0) -> int:
    """Shared memory the kernel declares: two staged slices, or the epilogue scratch.

    Args:
        a_t, b_t: the staging orientations (the kernel's A_T, B_T; 1 for a transposed
            operand).
    """
    a_rows, a_cols = (tile.bk, tile.bm) if a_t else (tile.bm, tile.bk)
    b_rows, b_cols = (tile.bn, tile.bk) if b_t else (tile.bk, tile.bn)
    stage_halves = a_rows * (a_cols + COOPMAT_PAD) + b_rows * (b_cols + COOPMAT_PAD)
    scratch_words = tile.wg_m * tile.wg_n * shape.m * ((tile.bn // tile.wg_n) // 4 + 1)
    return max(2 * stage_halves * 2, scratch_words * 16)


def coopmat_tile_problem(caps: DeviceCaps, shape: CoopMatShape, tile: CoopMatTile,
                         a_t: int | None = None, b_t: int | None = None) -> str | None:
    """Why ``tile`` cannot run with matrices of ``shape`` on ``caps``, or None if it can.

    Args:
        a_t, b_t: the staging orientations; None checks the larger of both.
    """
    if tile.bm % (tile.wg_m * shape.m) or tile.bn % (tile.wg_n * shape.n):
        return (f"the block {tile.bm}x{tile.bn} must split into {tile.wg_m}x{tile.wg_n} "
                f"warp tiles that are multiples of the {shape.m}x{shape.n} matrix shape")
    if tile.bk % shape.k:
        return f"BK={tile.bk} must be a multiple of the matrix shape's K={shape.k}"
    fragments = (tile.bm // tile.wg_m // shape.m) * (tile.bn // tile.wg_n // shape.n)
    if fragments > COOPMAT_MAX_FRAGMENTS:
        return (f"each subgroup would hold {fragments} accumulator matrices; at most "
                f"{COOPMAT_MAX_FRAGMENTS} fit in registers")
    wide = workgroup_problem(caps, f"{tile.wg_m}x{tile.wg_n}", tile.wg_m * tile.wg_n)
    if wide is not None:
        return wide
    orientations = [(a_t, b_t)] if a_t is not None and b_t is not None else [
        (x, y) for x in (0, 1) for y in (0, 1)]
    need = max(coopmat_shared_bytes(shape, tile, x, y) for x, y in orientations)
    return shared_memory_problem(caps, need)


def coopmat_tiles(caps: DeviceCaps, shape: CoopMatShape) -> list[CoopMatTile]:
    """The block configs of :data:`COOPMAT_LADDER` that fit ``caps``, largest first."""
    tiles = [CoopMatTile(fm * shape.m, fn * shape.n, fk * shape.k, wg_m, wg_n)
             for fm, fn, fk, wg_m, wg_n in COOPMAT_LADDER]
    return [t for t in tiles if coopmat_tile_problem(caps, shape, t) is None]


def coopmat_variant(caps: DeviceCaps, shape: CoopMatShape, tile: CoopMatTile,
                    a_t: int = 0, b_t: int = 0, a_vec: int = 0, b_vec: int = 0) -> Variant:
    """The cooperative-matrix variant (float16 only) at a shape the driver lists.

    Args:
        shape: the matrix shape (float16 x float16 + float32).
        tile: the block config (check it with :func:`coopmat_tile_problem` first).
        a_t: 1 when op(A) is contiguous along M (A transposed), 0 along K.
        b_t: 1 when op(B) is contiguous along K (B transposed), 0 along N.
        a_vec, b_vec: 1 to read the operand 16 bytes at a time (its contiguous dimension a
            multiple of 8 elements and its address 16-byte aligned).
    """
    # Everything is a define (see the module docstring); the workgroup width stays the
    # usual specialization constant and SUBGROUP makes the registry pin the subgroup size
    # the warp tiles were planned for.
    return {"PATH": GEMM_PATHS["coopmat"], "DTYPE": "F16",
            WORKGROUP: tile.wg_m * tile.wg_n * caps.subgroup_size,
            SUBGROUP: caps.subgroup_size, "CM_M": shape.m, "CM_N": shape.n, "CM_K": shape.k,
            "BM": tile.bm, "BN": tile.bn, "BK": tile.bk, "WG_M": tile.wg_m,
            "WG_N": tile.wg_n, "GROUP_M": tile.group_m, "A_T": a_t, "B_T": b_t,
            "A_VEC": a_vec, "B_VEC": b_vec}


def gemm_variants(caps: DeviceCaps) -> list[Variant]:
    """Every variant ``matmul`` may choose on ``caps`` (for ``vkumd compile --all``)."""
    codes = gemm_type_codes(caps)
    variants = [lanes_variant(caps, code, wa, wb) for code in codes for wa in (0, 1)
                for wb in (0, 1, 2)]
    variants += [pack_variant(caps, code) for code in codes]
    variants += [shared_variant(caps, code) for code in codes]
    shape = (usable_coopmat_shape(caps.coopmat_shapes("float16", "float32"))
             if "coopmat" in effective_caps(caps) else None)
    if shape is not None:
        # Untransposed and B-transposed (x @ W, x @ W.T), 16-byte and element loads.
        variants += [coopmat_variant(caps, shape, tile, 0, b_t, vec, vec)
                     for tile in coopmat_tiles(caps, shape) for b_t in (0, 1)
                     for vec in (1, 0)]
    return variants


GEMM = register(Kernel(
    name="gemm",
    source="gemm.comp",
    buffers=5,
    push=GEMM_PUSH,
    defines={"DTYPE": GEMM_TYPES, "PATH": tuple(GEMM_PATHS.values()), "CM_M": (), "CM_N": (),
             "CM_K": (), "WIDE_A": (0, 1), "WIDE_B": (0, 1, 2), "BM": (), "BN": (), "BK": (),
             "WG_M": (), "WG_N": (), SUBGROUP: (), "GROUP_M": (), "A_T": (0, 1), "B_T": (0, 1),
             "A_VEC": (0, 1), "B_VEC": (0, 1)},
    spec_constants={WORKGROUP: 0, "TM": 1, "NJ": 2, "KU": 3, "TN": 4, "TK": 5, "RM": 6,
                    "RN": 7},
    variants=gemm_variants,
    # The lanes path hands values between lanes with subgroup operations; the coopmat path
    # gives each subgroup (of the size its variant names with SUBGROUP) one warp tile.
    one_subgroup=lambda variant: variant.get("PATH") in (GEMM_PATHS["lanes"],
                                                         GEMM_PATHS["coopmat"]),
))
