"""The quantized-weight kernels: ``shaders/qmatmul_vec.comp`` (the decode matrix-vector
product) and ``shaders/qdequant.comp`` (blocks to values: the prefill GEMM's B operand, and
the quantized embedding lookup). :mod:`~vkumd.compiler.kernels.qmatmul_plan` plans them.
"""

from __future__ import annotations

from vkumd.compiler.kernels.limits import QMATMUL_DTYPES, QTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

X_CODES = type_codes(QMATMUL_DTYPES)
# Rows of x the matrix-vector kernel accumulates at once (it loops over chunks of them).
VEC_ROW_TILES = (1, 2)
# Blocks per lane whose x values the matrix-vector kernel keeps in registers (0: none, x
# read from memory in every block).
XCACHE_BLOCKS = (0, 1, 2, 3, 4, 6, 8)

QMATVEC_PUSH = PushLayout("m:u32", "n:u32", "k:u32", "full:u32", "blocks:u32",
                          "row_units:u32", "flags:u32", "rows:u32")
QDEQUANT_PUSH = PushLayout("rows:u32", "blocks:u32", "k:u32", "row_units:u32", "vocab:u32")


def _vec_variants(caps: DeviceCaps) -> list[dict]:
    # The decode shapes worth building ahead: every format and dtype, the row tiles, K of
    # 576 and 1536 at this subgroup size.
    caches = sorted({min((c for c in XCACHE_BLOCKS if c * caps.subgroup_size >= full),
                         default=0) for full in (18, 48)})
    return [{"QTYPE": q, "DTYPE": d, "XVEC": 4, "MT": mt, "XCACHE": c,
             WORKGROUP: caps.subgroup_size}
            for q in QTYPES for d in X_CODES.values() for mt in VEC_ROW_TILES for c in caches]


QMATVEC = register(Kernel(
    name="qmatmul_vec",
    source="qmatmul_vec.comp",
    buffers=5,
    push=QMATVEC_PUSH,
    defines={"QTYPE": tuple(QTYPES), "DTYPE": tuple(X_CODES.values()), "XVEC": (1, 4),
             "MT": VEC_ROW_TILES, "XCACHE": XCACHE_BLOCKS},
    spec_constants={WORKGROUP: 0},
    requires=frozenset({"storage16", "subgroup_arithmetic"}),
    variants=_vec_variants,
    one_subgroup=lambda variant: True,
))


def _dequant_variants(caps: DeviceCaps) -> list[dict]:
    out = [{"QTYPE": q, "DTYPE": d, "GATHER": 0, WORKGROUP: 64}
           for q in QTYPES for d in X_CODES.values()]
    return out + [{"QTYPE": q, "DTYPE": "F32", "GATHER": 1, WORKGROUP: 64} for q in QTYPES]


QDEQUANT = register(Kernel(
    name="qdequant",
    source="qdequant.comp",
    buffers=3,
    push=QDEQUANT_PUSH,
    defines={"QTYPE": tuple(QTYPES), "DTYPE": tuple(X_CODES.values()), "GATHER": (0, 1)},
    spec_constants={WORKGROUP: 0},
    requires=frozenset({"storage16"}),
    variants=_dequant_variants,
))
