"""Fused attention kernels: the portable tiled kernel, its flash-decoding combine step, and
the cooperative-matrix kernel (float16 in, float32 accumulation)."""

from __future__ import annotations

import math

from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

# head_dim values every variant list covers; any multiple of 4 up to ATTENTION_MAX_HEAD_DIM
# works (it is a specialization constant), these are the ones worth building ahead.
ATTENTION_HEAD_DIMS = (32, 64, 80, 96, 128)
ATTENTION_MAX_HEAD_DIM = 256
ATTENTION_TYPES = ("F32", "F16")
# Rows per workgroup of the split (flash-decoding) tiled kernel: the default, and the smaller
# ones the op picks when a key/value head has fewer rows (decoding one token has one).
ATTENTION_ROWS = (1, 2, 4, 8)
ATTENTION_DEFAULT_ROWS = 8
ATTENTION_KEYS_PER_LANE = 2
# The non-split tiled kernel (LANE_ROWS = 1): query rows per lane and keys per tile. 2 x 4
# measured best on lavapipe 25 of 1..4 x 2..16 (seq 1024, head_dim 64); more of either spills
# and compiles slower (4 x 8: 14 s cold, 2 x 4: 5 s).
ATTENTION_ROWS_PER_LANE = 2
ATTENTION_KEY_TILE = 4


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
                             "KT1": ATTENTION_KEY_TILE, "MASKED": masked, "ROWS": 1, "SPLIT": 0}
                            for masked in (0, 1))
            variants.extend({**base, "LANE_ROWS": 0, "RPL": 1, "KT1": 1, "MASKED": 0,
                             "ROWS": rows, "SPLIT": 1} for rows in ATTENTION_ROWS)
    return variants


ATTENTION_TILED = register(Kernel(
    name="attention_tiled",
    source="attention_tiled.comp",
    buffers=7,
    push_bytes=4 * 20,
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
    push_bytes=4 * 3,
    defines={"DTYPE": ATTENTION_TYPES},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{"DTYPE": t, WORKGROUP: 64} for t in _types(caps)],
))


def coopmat_tile_sizes(m: int, n: int, k: int, head_dim: int) -> tuple[int, int]:
    """``(HDP, BC)`` of the coopmat kernel for shape ``m x n x k``: head_dim padded to a
    multiple of ``k`` and ``n``, and the key tile (the least common multiple of ``n``, ``k``)."""
    keys = math.lcm(n, k)
    return -(-head_dim // keys) * keys, keys


def _coopmat_variants(caps: DeviceCaps) -> list[dict]:
    # One variant per listed float16 x float16 + float32 subgroup shape and head_dim; the
    # workgroup is one subgroup.
    variants = []
    for s in caps.coopmat_shapes("float16", "float32"):
        for hd in ATTENTION_HEAD_DIMS:
            hdp, bc = coopmat_tile_sizes(s.m, s.n, s.k, hd)
            variants.append({WORKGROUP: caps.subgroup_size, "TM": s.m, "TN": s.n, "TK": s.k,
                             "HD": hd, "HDP": hdp, "BC": bc})
    return variants


ATTENTION_COOPMAT = register(Kernel(
    name="attention_coopmat",
    source="attention_coopmat.comp",
    buffers=6,
    push_bytes=4 * 20,
    spec_constants={WORKGROUP: 0, "TM": 1, "TN": 2, "TK": 3, "HD": 4, "HDP": 5, "BC": 6},
    requires=frozenset({"coopmat", "storage16", "float16"}),
    variants=_coopmat_variants,
    one_subgroup=lambda variant: True,
))

