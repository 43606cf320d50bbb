"""The GEMM family (``shaders/gemm.comp``): one template, three main loops, one epilogue.

Variants differ in the main loop (``PATH``: ``lanes`` for CPU drivers such as lavapipe,
``shared`` for GPUs, ``coopmat`` where the driver lists cooperative-matrix shapes), the storage
type (``DTYPE``) and the tile sizes (specialization constants). The functions here build each
variant for a device; ``vkumd.framework.ops.matmul`` chooses among them by shape and device.
"""

from __future__ import annotations

from vkumd.compiler.registry import WORKGROUP, Kernel, Variant, effective_caps, register
from vkumd.vk.caps import CoopMatShape, DeviceCaps

# Main loops of shaders/gemm.comp (the PATH define).
GEMM_PATHS = {"lanes": 0, "shared": 1, "coopmat": 2, "pack": 3}
GEMM_TYPES = ("F32", "F16", "BF16", "I8")
# Push constants: five 64-bit addresses, then ten uint32 shape/stride words, alpha, beta,
# the activation code, the epilogue flags and the packed-B panel size and width.
GEMM_PUSH_BYTES = 5 * 8 + 16 * 4
PACK_WORKGROUP = 64

# The lanes path: TM rows x (NJ * VC * subgroup) columns per workgroup (VC = elements per
# 64-bit word when B is read a word at a time along N, else 1), K unrolled by KU. Chosen by
# measurement on lavapipe 25 (see bench/gemm.py and the GEMM notes in its docstring): 16-32
# accumulators per lane; more spill, fewer leave the gathers unamortised.
LANES_TM = 8
LANES_KU = 4
# Elements of each storage type in one 64-bit word (the unit of a wide load).
WORD_ELEMENTS = {"F32": 2, "F16": 4, "BF16": 4, "I8": 8}
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
    nj = 1 if wide_b == 1 else 2
    tm = 4 if wide_b == 1 and vw == 8 else LANES_TM  # keep int8's 8 columns x TM at 32
    k_step = vw if wide_a or wide_b == 2 else 1
    return {"PATH": GEMM_PATHS["lanes"], "DTYPE": dtype, WORKGROUP: caps.subgroup_size,
            "TM": tm, "NJ": nj, "KU": max(LANES_KU, k_step), "WIDE_A": wide_a,
            "WIDE_B": wide_b}


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


def coopmat_variant(caps: DeviceCaps, shape: CoopMatShape) -> Variant:
    """The cooperative-matrix variant at a shape the driver lists (float16 only)."""
    # The shape goes in as defines, not specialization constants: the matrix types are then
    # literal in the SPIR-V, as the validation layer's shape check expects.
    return {"PATH": GEMM_PATHS["coopmat"], "DTYPE": "F16", WORKGROUP: caps.subgroup_size,
            "CM_M": shape.m, "CM_N": shape.n, "CM_K": shape.k}


def gemm_variants(caps: DeviceCaps) -> list[Variant]:
    """Every variant ``matmul`` may choose on ``caps`` (for ``vkumd compile --all``)."""
    codes = gemm_type_codes(caps)
    variants = [lanes_variant(caps, code, wa, wb) for code in codes for wa in (0, 1)
                for wb in (0, 1, 2)]
    variants += [pack_variant(caps, code) for code in codes]
    variants += [shared_variant(caps, code) for code in codes]
    if "coopmat" in effective_caps(caps):
        variants += [coopmat_variant(caps, s) for s in caps.coopmat_shapes("float16", "float32")]
    return variants


GEMM = register(Kernel(
    name="gemm",
    source="gemm.comp",
    buffers=5,
    push_bytes=GEMM_PUSH_BYTES,
    defines={"DTYPE": GEMM_TYPES, "PATH": tuple(GEMM_PATHS.values()), "CM_M": (), "CM_N": (),
             "CM_K": (), "WIDE_A": (0, 1), "WIDE_B": (0, 1, 2)},
    spec_constants={WORKGROUP: 0, "TM": 1, "NJ": 2, "KU": 3, "TN": 4, "TK": 5, "RM": 6,
                    "RN": 7},
    variants=gemm_variants,
    # The lanes and coopmat paths hand values between lanes with subgroup operations.
    one_subgroup=lambda variant: variant.get("PATH") in (GEMM_PATHS["lanes"],
                                                         GEMM_PATHS["coopmat"]),
))
