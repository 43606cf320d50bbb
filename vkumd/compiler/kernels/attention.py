"""Fused attention kernels: the portable tiled kernel, its flash-decoding combine step, and
the cooperative-matrix kernel (float16 in, float32 accumulation)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from vkumd import settings
from vkumd.compiler.kernels.coopmat import (
    ranked_shapes,
    shared_memory_problem,
    staged_in_words,
    workgroup_problem,
)
from vkumd.compiler.kernels.limits import (  # noqa: F401  (the attention op reads the limit here)
    ATTENTION_DTYPES,
    ATTENTION_MAX_HEAD_DIM,
)
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import SUBGROUP, WORKGROUP, Kernel, Variant, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import CoopMatShape, DeviceCaps

# head_dim values every variant list covers; any multiple of 4 up to ATTENTION_MAX_HEAD_DIM
# works (it is a specialization constant), these are the ones worth building ahead.
ATTENTION_HEAD_DIMS = (32, 64, 80, 96, 128)
ATTENTION_CODES = type_codes(ATTENTION_DTYPES)
ATTENTION_TYPES = tuple(ATTENTION_CODES.values())
# Rows per workgroup of the split (flash-decoding) tiled kernel: the default, and the smaller
# ones the op picks when a key/value head has fewer rows (decoding one token has one).
ATTENTION_ROWS = (1, 2, 4, 8)
ATTENTION_DEFAULT_ROWS = 8
ATTENTION_KEYS_PER_LANE = 2
# The non-split tiled kernel (LANE_ROWS = 1): query rows per lane and keys per tile, the
# fastest measured (docs/performance.md, "Kernel tuning"); more of either spills and compiles
# slower.
ATTENTION_ROWS_PER_LANE = 2
ATTENTION_KEY_TILE = 4
# Keys per tile at 16-wide subgroups on a CPU driver (lavapipe with
# LP_NATIVE_VECTOR_WIDTH=512), where 8 measured faster than 4 (at 8 lanes it is slower).
ATTENTION_WIDE_KEY_TILE = 8


def attention_key_tile(caps: DeviceCaps) -> int:
    """Keys per tile of the non-split tiled kernel on this device."""
    if caps.device_type == "cpu" and caps.subgroup_size >= 16:
        return ATTENTION_WIDE_KEY_TILE
    return ATTENTION_KEY_TILE


# shaders/include/attention_common.glsl's block (k_addr and v_addr are uvec2 there).
ATTENTION_PUSH = PushLayout("k_addr:u64", "v_addr:u64", "B:u32", "Hq:u32", "Hkv:u32", "Lq:u32",
                            "Lk:u32", "group:u32", "rows:u32", "scale_log2:f32",
                            "causal_offset:i32", "flags:u32", "mask_sb:u32", "mask_sh:u32",
                            "mask_si:u32", "mask_sj:u32", "splits:u32", "split_keys:u32",
                            "q_sb:u32", "q_sh:u32", "q_ss:u32", "kv_sb:u32", "kv_sh:u32",
                            "kv_ss:u32", "o_sb:u32", "o_sh:u32", "o_ss:u32")
# K and V share one set of strides (they have one shape and one layout): 120 bytes in all,
# inside the 128 every Vulkan device guarantees (a stride set each would be 132).
COMBINE_PUSH = PushLayout("count:u32", "chunks:u32", "splits:u32", "Hq:u32", "Lq:u32",
                          "o_sb:u32", "o_sh:u32", "o_ss:u32")


def _types(caps: DeviceCaps) -> list[str]:
    return [t for t in ATTENTION_TYPES if caps.storage_16bit or t != "F16"]


def _tiled_variants(caps: DeviceCaps) -> list[dict]:
    sg = caps.subgroup_size
    variants = []
    for dtype in _types(caps):
        for hd in ATTENTION_HEAD_DIMS:
            base = {"DTYPE": dtype, WORKGROUP: sg, "HD": hd, "KPL": ATTENTION_KEYS_PER_LANE,
                    "ADDRESSES": int(caps.buffer_device_address)}
            variants.extend({**base, "LANE_ROWS": 1, "RPL": ATTENTION_ROWS_PER_LANE,
                             "KT1": attention_key_tile(caps), "MASKED": masked, "ROWS": 1,
                             "SPLIT": 0} for masked in (0, 1))
            variants.extend({**base, "LANE_ROWS": 0, "RPL": 1, "KT1": 1, "MASKED": 0,
                             "ROWS": rows, "SPLIT": 1} for rows in ATTENTION_ROWS)
    return variants


ATTENTION_TILED = register(Kernel(
    name="attention_tiled",
    source="attention_tiled.comp",
    buffers=7,
    push=ATTENTION_PUSH,
    defines={"DTYPE": ATTENTION_TYPES, "ADDRESSES": (0, 1), "LANE_ROWS": (0, 1)},
    spec_constants={WORKGROUP: 0, "HD": 1, "ROWS": 2, "KPL": 3, "SPLIT": 4, "RPL": 5, "KT1": 6,
                    "MASKED": 7},
    requires=frozenset({"subgroup_arithmetic"}),
    variants=_tiled_variants,
    one_subgroup=lambda variant: True,
))


ATTENTION_COMBINE = register(Kernel(
    name="attention_combine",
    source="attention_combine.comp",
    buffers=2,
    push=COMBINE_PUSH,
    defines={"DTYPE": ATTENTION_TYPES},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{"DTYPE": t, WORKGROUP: 64} for t in _types(caps)],
))


# -- the cooperative-matrix kernel ---------------------------------------------------------------
#
# A workgroup of `subgroups` subgroups; each owns `row_blocks` blocks of M query rows (M, N, K:
# the matrix shape) and sweeps the keys in tiles of `keys`, staged once per workgroup into
# shared memory (shaders/attention_coopmat.comp explains the algorithm). The variable below
# forces one block config, for benchmarks that sweep them.
COOPMAT_BLOCK_VARIABLE = "VKUMD_ATTENTION_COOPMAT_BLOCK"
# Subgroups per workgroup, row blocks per subgroup and key-tile sizes the knob accepts.
COOPMAT_SUBGROUPS = (1, 2, 4, 8)
COOPMAT_ROW_BLOCKS = (1, 2, 4)
COOPMAT_MAX_KEYS = 256
# What the host picks by default, in order of preference: the most subgroups (each key tile
# staged once serves more rows, so K and V are read from memory fewer times), then the widest
# key tile (fewer barriers and softmax passes per key) that fits the shared memory.
COOPMAT_DEFAULT_SUBGROUPS = 4
COOPMAT_DEFAULT_KEYS = (64, 32, 16)
_BLOCK_FORM = re.compile(r"^\s*(\d+)x(\d+)(?:x(\d+))?(?::(\d+)x(\d+)x(\d+))?\s*$")


@dataclass(frozen=True)
class CoopmatBlock:
    """A block config of the cooperative-matrix attention kernel.

    Attributes:
        shape: the float16 x float16 + float32 matrix shape (M x N x K).
        subgroups: subgroups per workgroup.
        keys: keys per tile staged in shared memory (a multiple of N and K).
        row_blocks: M-row blocks each subgroup owns.
    """

    shape: CoopMatShape
    subgroups: int
    keys: int
    row_blocks: int = 1

    @property
    def rows(self) -> int:
        """Query rows one workgroup covers."""
        return self.subgroups * self.row_blocks * self.shape.m

    def __str__(self) -> str:
        s = self.shape
        return f"{self.subgroups}x{self.keys}x{self.row_blocks}:{s.m}x{s.n}x{s.k}"


@dataclass(frozen=True)
class CoopmatBlockRequest:
    """A parsed :data:`COOPMAT_BLOCK_VARIABLE` value; ``None`` fields are left to the host."""

    subgroups: int
    keys: int
    row_blocks: int | None = None
    shape: tuple[int, int, int] | None = None


def parse_coopmat_block(text: str) -> CoopmatBlockRequest:
    """Read a block config written ``SUBGROUPSxKEYS[xROW_BLOCKS][:MxNxK]``.

    Args:
        text: e.g. ``"4x64"``, ``"2x32x2"`` or ``"4x64x1:16x8x16"`` (the value of
            ``VKUMD_ATTENTION_COOPMAT_BLOCK``).

    Returns:
        The request; the row blocks default to the host's choice, the shape to the preferred
        listed one.

    Raises:
        VkumdValueError: the text is not of that form, or a number is outside what the kernel
            takes.
    """
    match = _BLOCK_FORM.match(text)
    if match is None:
        raise VkumdValueError(
            f"{COOPMAT_BLOCK_VARIABLE}={text!r} is not a block config; write "
            "SUBGROUPSxKEYS[xROW_BLOCKS][:MxNxK] (subgroups per workgroup, keys per tile, "
            "optionally row blocks of M rows per subgroup, optionally a listed float16 matrix "
            "shape), e.g. 4x64, 2x32x2 or 4x64x1:16x8x16")
    sub, keys, rb, m, n, k = (int(g) if g is not None else None for g in match.groups())
    if sub not in COOPMAT_SUBGROUPS:
        raise VkumdValueError(f"{COOPMAT_BLOCK_VARIABLE}={text!r}: subgroups per workgroup "
                              f"must be one of {list(COOPMAT_SUBGROUPS)}, not {sub}")
    if not 1 <= keys <= COOPMAT_MAX_KEYS:
        raise VkumdValueError(f"{COOPMAT_BLOCK_VARIABLE}={text!r}: keys per tile must be from "
                              f"1 to {COOPMAT_MAX_KEYS} (a multiple of the matrix N and K), "
                              f"not {keys}")
    if rb is not None and rb not in COOPMAT_ROW_BLOCKS:
        raise VkumdValueError(f"{COOPMAT_BLOCK_VARIABLE}={text!r}: row blocks per subgroup "
                              f"must be one of {list(COOPMAT_ROW_BLOCKS)}, not {rb}")
    shape = (m, n, k) if m is not None else None
    return CoopmatBlockRequest(sub, keys, rb, shape)


settings.register_reader(COOPMAT_BLOCK_VARIABLE, parse_coopmat_block)


def coopmat_shape_usable(shape: CoopMatShape, subgroup_size: int) -> bool:
    """Whether the kernel can work with matrices of ``shape`` on subgroups of this size.

    N and K must be multiples of 8 (shared-memory rows are addressed in 16-byte words), M a
    power of two that divides or is divided by the subgroup size (the lanes of a row reduce
    with shuffles).
    """
    m = shape.m
    return (staged_in_words(shape) and m > 0 and m & (m - 1) == 0
            and (subgroup_size % m == 0 or m % subgroup_size == 0))


def coopmat_shapes(caps: DeviceCaps) -> list[CoopMatShape]:
    """Listed float16 x float16 + float32 subgroup shapes the kernel can use, best first:
    16x16x16 if listed, then by size (the largest does the most work per load)."""
    return ranked_shapes(caps.coopmat_shapes("float16", "float32"),
                         lambda s: coopmat_shape_usable(s, caps.subgroup_size))


def coopmat_head_pad(shape: CoopMatShape, head_dim: int) -> int:
    """head_dim rounded up to a multiple of the matrix N and K (and of 8)."""
    step = math.lcm(shape.n, shape.k, 8)
    return -(-head_dim // step) * step


def coopmat_key_step(block: CoopmatBlock, subgroup_size: int) -> int:
    """What the key tile must be a multiple of: N, K and 4 x the lanes that share a row."""
    lanes_per_row = max(1, subgroup_size // (block.row_blocks * block.shape.m))
    return math.lcm(block.shape.n, block.shape.k, 4 * lanes_per_row)


def _strides(block: CoopmatBlock, subgroup_size: int, head_dim: int) -> tuple[int, int, int]:
    """Row strides of the kernel's K/V, S and P arrays (its KSTR, SSTR, PSTR), in f16vec4
    (8 bytes), vec4 (16 bytes) and f16vec4 units."""
    lanes_per_row = max(1, subgroup_size // (block.row_blocks * block.shape.m))
    kstr = coopmat_head_pad(block.shape, head_dim) // 4 + 2
    quarter = block.keys // 4
    sstr = -(-quarter // lanes_per_row) * lanes_per_row
    if (sstr // lanes_per_row) % 2 == 0:
        sstr += lanes_per_row
    return kstr, sstr, quarter + 2


def coopmat_kv_rows(block: CoopmatBlock) -> int:
    """Rows of the kernel's K/V staging array (it also stages one subgroup's Q or output)."""
    return max(2 * block.keys, block.row_blocks * block.shape.m)


def coopmat_shared_bytes(block: CoopmatBlock, subgroup_size: int, head_dim: int) -> int:
    """Shared memory the kernel declares for ``block`` at this subgroup size and head_dim."""
    kstr, sstr, pstr = _strides(block, subgroup_size, head_dim)
    srows = block.row_blocks * block.shape.m
    return (coopmat_kv_rows(block) * kstr * 8
            + block.subgroups * srows * (sstr * 16 + pstr * 8 + block.shape.n * 4))


def coopmat_block_problem(caps: DeviceCaps, block: CoopmatBlock, head_dim: int) -> str | None:
    """Why ``block`` cannot run at this head_dim on ``caps``, or None if it can."""
    sg = caps.subgroup_size
    if not coopmat_shape_usable(block.shape, sg):
        return (f"the matrix shape {block.shape.m}x{block.shape.n}x{block.shape.k} does not "
                f"suit subgroups of {sg} (N and K multiples of 8, M a power of two that "
                "divides or is divided by the subgroup size)")
    missing = {"basic", "vote", "shuffle"} - set(caps.subgroup_operations)
    if missing:
        return f"needs subgroup operations {sorted(missing)}, which {caps.name} lacks"
    step = coopmat_key_step(block, sg)
    if block.keys % step or block.keys > COOPMAT_MAX_KEYS:
        return (f"keys per tile must be a multiple of {step} (the matrix N and K, and 4 x the "
                f"lanes per row) up to {COOPMAT_MAX_KEYS}, not {block.keys}")
    wide = workgroup_problem(caps, str(block.subgroups), block.subgroups)
    if wide is not None:
        return wide
    if block.subgroups > 1 and caps.min_subgroup_size != caps.max_subgroup_size \
            and not caps.subgroup_size_control:
        return (f"{caps.name} may vary its subgroup size and cannot pin it, so a workgroup "
                "must be one subgroup")
    return shared_memory_problem(caps, coopmat_shared_bytes(block, sg, head_dim),
                                 f" at head_dim {head_dim}")


def coopmat_blocks(caps: DeviceCaps, shape: CoopMatShape, head_dim: int) -> list[CoopmatBlock]:
    """Every block config the kernel can run at this shape and head_dim on ``caps`` (the
    space a benchmark sweeps): subgroups x key tiles x row blocks."""
    blocks = []
    for sub in COOPMAT_SUBGROUPS:
        for rb in COOPMAT_ROW_BLOCKS:
            probe = CoopmatBlock(shape, sub, 8, rb)
            step = coopmat_key_step(probe, caps.subgroup_size)
            for keys in range(step, COOPMAT_MAX_KEYS + 1, step):
                if keys & (keys - 1) and keys != step:
                    continue  # powers of two (and the smallest legal tile) only
                block = CoopmatBlock(shape, sub, keys, rb)
                if coopmat_block_problem(caps, block, head_dim) is None:
                    blocks.append(block)
    return blocks


def default_coopmat_block(caps: DeviceCaps, shape: CoopMatShape, head_dim: int,
                          rows: int | None = None) -> CoopmatBlock | None:
    """The block config the host picks, or None when none fits.

    Args:
        rows: query rows per key/value head; fewer than a default workgroup covers use fewer
            subgroups (None: as many as the default).
    """
    most = COOPMAT_DEFAULT_SUBGROUPS
    if rows is not None:
        most = next((s for s in (1, 2, 4) if s * shape.m >= rows), most)
    keys_options = [k for k in COOPMAT_DEFAULT_KEYS if k >= shape.n]
    keys_options += [math.lcm(shape.n, shape.k)]
    if caps.device_type == "cpu":
        # CPU drivers run this kernel only when asked (attention prefers the tiled one there)
        # and compile it slowly (lavapipe: 5-35 s, growing with the key tile): smallest first.
        keys_options.reverse()
    for sub in (s for s in (4, 2, 1) if s <= most):
        for keys in keys_options:
            block = CoopmatBlock(shape, sub, keys, 1)
            if coopmat_block_problem(caps, block, head_dim) is None:
                return block
    return None


def coopmat_variant(caps: DeviceCaps, block: CoopmatBlock, head_dim: int, vec: int = 8
                    ) -> Variant:
    """The variant for ``block`` (check it with :func:`coopmat_block_problem` first).

    Args:
        vec: halves per global load and store: 8 (16 bytes; head_dim a multiple of 8 and the
            tensors 16-byte aligned) or 4.
    """
    s = block.shape
    sg = caps.subgroup_size
    return {WORKGROUP: block.subgroups * sg, SUBGROUP: sg, "TM": s.m, "TN": s.n, "TK": s.k,
            "HD": head_dim, "HDP": coopmat_head_pad(s, head_dim), "BC": block.keys,
            "NSG": block.subgroups, "RB": block.row_blocks,
            "VEC": vec if head_dim % 8 == 0 else 4, "KVROWS": coopmat_kv_rows(block)}


def _coopmat_variants(caps: DeviceCaps) -> list[dict]:
    # The default block for every listed head_dim at the preferred shape.
    shapes = coopmat_shapes(caps)
    if not shapes:
        return []
    variants = []
    for hd in ATTENTION_HEAD_DIMS:
        block = default_coopmat_block(caps, shapes[0], hd)
        if block is not None:
            variants.append(coopmat_variant(caps, block, hd))
    return variants


ATTENTION_COOPMAT = register(Kernel(
    name="attention_coopmat",
    source="attention_coopmat.comp",
    buffers=6,
    push=ATTENTION_PUSH,
    spec_constants={WORKGROUP: 0, "TM": 1, "TN": 2, "TK": 3, "HD": 4, "HDP": 5, "BC": 6,
                    "NSG": 7, SUBGROUP: 8, "RB": 9, "VEC": 10, "KVROWS": 11},
    requires=frozenset({"coopmat", "storage16", "float16"}),
    variants=_coopmat_variants,
    # Each subgroup owns its rows and reduces them with shuffles at the planned size SG.
    one_subgroup=lambda variant: True,
))
