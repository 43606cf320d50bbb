"""Planning the quantized-weight ops: ``qmatmul`` (decode matrix-vector or prefill GEMM) and
``qembedding`` (rows of a quantized table).

``qmatmul``'s two paths compute the same function, ``x @ dequant(w)^T (+ bias) (+ residual)``
with float32 accumulation:

- ``"vec"`` (few rows of x: decode; :func:`choose_path`): ``shaders/qmatmul_vec.comp``
  reads each weight block once and dequantises it in registers; each lane accumulates every
  row of x, so a step of 8 sequences reads the weights once, like a step of 1.
- ``"gemm"`` (prefill): ``shaders/qdequant.comp`` writes ``dequant(w)`` in x's dtype to
  scratch, then the float GEMM of :mod:`~vkumd.compiler.kernels.gemm_plan` (its variant and
  packing chosen as for ``matmul``: lanes on lavapipe, cooperative matrices where the device
  lists them for float16) runs ``x @ B^T`` with the bias and residual in its epilogue. The
  dequantisation is one pass over N * K values against M * N * K multiply-adds.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.gemm_choice import GemmShape
from vkumd.compiler.kernels.gemm_plan import GemmLaunchPlan, GemmProblem, gemm_plan
from vkumd.compiler.kernels.limits import QTYPES
from vkumd.compiler.kernels.qmatmul import (
    QDEQUANT,
    QDEQUANT_PUSH,
    QMATVEC,
    QMATVEC_PUSH,
    VEC_ROW_TILES,
    X_CODES,
    XCACHE_BLOCKS,
)
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.launch import Launch, Operand
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# Rows of x up to which the matrix-vector path runs; past it the GEMM, whose tiles reuse
# each loaded value across rows. lavapipe, 1536 x 576 Q4_1, one thread, CPU ms, vec / gemm
# (dequantise + GEMM): M 1: 0.9 / 7.3; 2: 0.8 / 6.0; 4: 1.6 / 6.2; 8: 2.9 / 6.5;
# 16: 6.4 / 7.0.
VEC_MAX_M = 16
# Rows of x the vec kernel accumulates per pass over a weight row (VEC_ROW_TILES; more rows
# loop, finding the row in the cache): on lavapipe 4 rows per pass ran 4.9x one row's time,
# 2 rows 2.1x (1536 x 576 Q4_1, one thread), so the largest tile is 2.
# Output rows per workgroup of the vec kernel on a GPU, and at least that many on a CPU
# driver, where the rows are spread over at most CPU_GROUPS_PER_THREAD workgroups per
# thread: lavapipe pays per workgroup (1536 x 576 at M = 1: 768 groups of 2 rows 12.6 ms,
# 192 of 8 4.7 ms, 48 of 32 2.1 ms, on a loaded 2-core host).
VEC_ROWS = 4
CPU_GROUPS_PER_THREAD = 8
PATHS = ("vec", "gemm")
_DEQUANT_WORKGROUP = 64


def row_bytes(qtype: str, k: int) -> int:
    """Bytes of one weight row of ``k`` values in ``qtype`` (the last block may be partial)."""
    values, size = QTYPES[qtype]
    return -(-k // values) * size


def choose_path(caps: DeviceCaps, m: int) -> str:
    """``"vec"`` for decode-sized M, else ``"gemm"``."""
    return "vec" if m <= VEC_MAX_M else "gemm"


@dataclass(frozen=True)
class QMatmulProblem:
    """One ``qmatmul`` call, addresses aside.

    Attributes:
        qtype: the weight's block format (a key of ``QTYPES``).
        dtype: x's (and the output's) dtype name.
        m, n, k: rows of x, output features, input features.
        bias, residual: whether those operands are given.
        aligned_x: x's address is a multiple of 16 bytes (the GEMM's wide loads).
    """

    qtype: str
    dtype: str
    m: int
    n: int
    k: int
    bias: bool = False
    residual: bool = False
    aligned_x: bool = True


def qmatmul_plan(caps: DeviceCaps, problem: QMatmulProblem, force: str | None = None):
    """The launches of one ``qmatmul``; operands: x, w, out, bias, residual.

    Args:
        force: ``"vec"`` or ``"gemm"`` instead of :func:`choose_path`'s choice.

    Raises:
        VkumdValueError: an unknown path, or a grid past the device's limits.
    """
    knobs = (VEC_MAX_M, VEC_ROWS, CPU_GROUPS_PER_THREAD, os.cpu_count())
    return _qmatmul_plan(caps, problem, force, knobs)


@functools.lru_cache(maxsize=1024)
def _qmatmul_plan(caps: DeviceCaps, p: QMatmulProblem, force: str | None, _knobs: tuple):
    if force is not None and force not in PATHS:
        raise VkumdValueError(f"qmatmul: path={force!r} is unknown; use one of "
                              f"{', '.join(PATHS)}")
    path = force or choose_path(caps, p.m)
    blocks = -(-p.k // QTYPES[p.qtype][0])
    if path == "vec":
        return _vec_plan(caps, p, blocks)
    return _gemm_path(caps, p, blocks)


def _vec_plan(caps: DeviceCaps, p: QMatmulProblem, blocks: int) -> FixedLaunch:
    mt = next((t for t in VEC_ROW_TILES if t >= p.m), VEC_ROW_TILES[-1])
    xvec = 4 if p.k % 4 == 0 else 1
    # x in registers when each lane's share of a row's blocks is small enough.
    per_lane = -(-(p.k // 32) // caps.subgroup_size)
    xcache = min((c for c in XCACHE_BLOCKS if c >= per_lane), default=0)
    program = QMATVEC.specialize({"QTYPE": p.qtype, "DTYPE": X_CODES[p.dtype], "XVEC": xvec,
                                  "MT": mt, "XCACHE": xcache,
                                  WORKGROUP: caps.subgroup_size})
    unit = 4 if p.qtype == "Q4_1" else 2  # the shader's weight word: 32 or 16 bits
    flags = (1 if p.bias else 0) | (2 if p.residual else 0)
    rows = VEC_ROWS
    if caps.device_type == "cpu":
        groups = max(1, CPU_GROUPS_PER_THREAD * (os.cpu_count() or 1))
        rows = max(VEC_ROWS, -(-p.n // groups))
    push = QMATVEC_PUSH.pack(p.m, p.n, p.k, p.k // 32, blocks,
                             row_bytes(p.qtype, p.k) // unit, flags, rows)
    return FixedLaunch(program, push, grid(caps, -(-p.n // rows), 1), (2,))


def _dequant_launch(caps: DeviceCaps, qtype: str, code: str, gather: bool, rows: int,
                    blocks: int, k: int, vocab: int) -> FixedLaunch:
    program = QDEQUANT.specialize({"QTYPE": qtype, "DTYPE": code, "GATHER": int(gather),
                                   WORKGROUP: _DEQUANT_WORKGROUP})
    push = QDEQUANT_PUSH.pack(rows, blocks, k, row_bytes(qtype, k) // 2, vocab)
    return FixedLaunch(program, push, grid(caps, rows * blocks, _DEQUANT_WORKGROUP), (2,))


@dataclass(frozen=True)
class QGemmPlan:
    """The prefill path (a :class:`~vkumd.compiler.launch.LaunchPlan`): the weight
    dequantised into scratch, then the float GEMM. Operands: x, w, out, bias, residual.

    Attributes:
        dequant: the launch writing ``dequant(w)`` (``[N, K]``, x's dtype) to scratch 0.
        gemm: the GEMM's plan for ``x @ scratch0^T``.
        scratch: the dequantised weight's bytes, then the GEMM's own scratch.
    """

    dequant: FixedLaunch
    gemm: GemmLaunchPlan
    scratch: tuple[int, ...]

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """The dequantisation's launch, then the GEMM's."""
        x, w, out, bias, residual = operands
        values = scratch[0]
        out_launches = self.dequant.launches((w, w, values))
        return out_launches + self.gemm.launches((x, values, out, bias, residual),
                                                 scratch[1:])


def _gemm_path(caps: DeviceCaps, p: QMatmulProblem, blocks: int) -> QGemmPlan:
    code = X_CODES[p.dtype]
    itemsize = 4 if p.dtype == "float32" else 2
    dequant = _dequant_launch(caps, p.qtype, code, False, p.n, blocks, p.k, p.n)
    # Scratch is allocated 64-byte aligned: B's loads may be wide. x's rows are wide-aligned
    # when its first address is and each row keeps it so.
    aligned_x = p.aligned_x and p.k * itemsize % 8 == 0
    shape = GemmShape(p.m, p.n, p.k, trans_b=True, aligned_a=aligned_x,
                      aligned_b=p.k * itemsize % 8 == 0, aligned16_a=p.aligned_x,
                      aligned16_b=True)
    gemm = gemm_plan(caps, GemmProblem(shape, p.dtype, itemsize, bias=p.bias,
                                       residual=p.residual))
    return QGemmPlan(dequant, gemm, (p.n * p.k * itemsize, *gemm.scratch))


def qembedding_plan(caps: DeviceCaps, qtype: str, dim: int, count: int, vocab: int
                    ) -> FixedLaunch:
    """Rows of a ``(vocab, row_bytes)`` quantized table picked by ``count`` ids, as float32
    rows of ``dim`` values (zeros for ids outside the table). Operands: ids, table, out."""
    return _qembedding_plan(caps, qtype, dim, count, vocab)


@functools.lru_cache(maxsize=1024)
def _qembedding_plan(caps: DeviceCaps, qtype: str, dim: int, count: int, vocab: int
                     ) -> FixedLaunch:
    blocks = -(-dim // QTYPES[qtype][0])
    return _dequant_launch(caps, qtype, "F32", True, count, blocks, dim, vocab)
