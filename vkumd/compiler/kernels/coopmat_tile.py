"""The minimal cooperative-matrix GEMM tile kernel (float16 x float16 -> float32)."""

from __future__ import annotations

from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps


def _coopmat_tile_variants(caps: DeviceCaps) -> list[dict]:
    # One variant per float16 x float16 + float32 subgroup shape the driver lists; the
    # workgroup is exactly one subgroup.
    return [{WORKGROUP: caps.subgroup_size, "TM": s.m, "TN": s.n, "TK": s.k}
            for s in caps.coopmat_shapes("float16", "float32")]


GEMM_COOPMAT_TILE = register(Kernel(
    name="gemm_coopmat_tile",
    source="gemm_coopmat_tile.comp",
    buffers=3,
    push_bytes=4 * 6,
    spec_constants={WORKGROUP: 0, "TM": 1, "TN": 2, "TK": 3},
    requires=frozenset({"coopmat", "storage16", "float16"}),
    variants=_coopmat_tile_variants,
))
