"""Planning a GEMM: from a ``matmul`` problem to its launches and scratch.

:func:`gemm_plan` turns a whole problem -- sizes, transposes, layout facts and the fused
epilogue -- into a :class:`GemmLaunchPlan`, after :func:`~vkumd.compiler.kernels.gemm_choice.
choose_variant` has picked the variant.

Split-K: for float32, when the output alone gives fewer workgroups than the device runs at
once and K is long (:data:`SPLIT_K_MIN_K`), K is cut into slices whose float32 partial sums
a second launch of the same kernel adds up and finishes (epilogue included). Packing: the
lanes path copies B into contiguous column panels first when enough row tiles reuse them.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.compiler.kernels import gemm_choice
from vkumd.compiler.kernels.elementwise_plan import fill_plan
from vkumd.compiler.kernels.gemm import COOPMAT_TILE_VARIABLE, GEMM, GEMM_PUSH
from vkumd.compiler.kernels.gemm_choice import (
    GEMM_CODES,
    GemmPlan,
    GemmShape,
    choose_variant,
    dtype_name,
    plan_for,
)
from vkumd.compiler.launch import Launch, Operand, grid_for
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# Split-K: K of at least SPLIT_K_MIN_K is cut into slices of at least SPLIT_K_MIN_SLICE (at
# most SPLIT_K_MAX of them) when the output alone gives at most 1/SPLIT_K_UNDERFILL of the
# workgroups the device runs at once: its thread count on a CPU driver,
# SPLIT_K_GPU_WORKGROUPS on a GPU. The margin: a problem that already fills the device
# runs slower split (docs/performance.md, "Kernel tuning").
SPLIT_K_UNDERFILL = 4
SPLIT_K_MIN_K = 4096
SPLIT_K_MIN_SLICE = 1024
SPLIT_K_MAX = 32
SPLIT_K_GPU_WORKGROUPS = 128

_FLAG_BIAS, _FLAG_RESIDUAL, _FLAG_BETA, _FLAG_BIAS_ROW, _FLAG_RESIDUAL_FIRST = 1, 2, 4, 8, 16


@dataclass(frozen=True)
class GemmProblem:
    """Everything about one ``matmul`` call that decides its launches, addresses aside.

    Attributes:
        shape: sizes, transposes, alignment and batch entries.
        dtype: the operands' dtype name (a key of :data:`GEMM_CODES`).
        out_itemsize: bytes per output element (4 for int8's int32 result).
        a_repeats, b_repeats: whether one A (B) serves every batch entry.
        r_repeats: whether one ``(M, N)`` residual serves every batch entry.
        bias, residual: whether those operands are given.
        alpha, beta: the product's and the prior output's scales.
        act: activation code (``ACTIVATIONS``, or ``EPILOGUE_ACTIVATIONS`` for a
            convolution's).
        act_params: the activation's two float parameters (clip's bounds; 0 when unused).
        row_bias: the bias is per row of the output (a convolution's output channel), and
            goes with A: shared by the batch when A is, else one ``[M]`` block per entry.
        residual_first: the residual is added before the activation.
    """

    shape: GemmShape
    dtype: str
    out_itemsize: int
    a_repeats: bool = False
    b_repeats: bool = False
    r_repeats: bool = False
    bias: bool = False
    residual: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    act: int = 0
    act_params: tuple[float, float] = (0.0, 0.0)
    row_bias: bool = False
    residual_first: bool = False


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
    act_p0: float = 0.0
    act_p1: float = 0.0
    bias_batch: int = 0

    def push(self, first: int) -> bytes:
        """The push constants for batch entries from ``first`` on."""
        e = self.esize
        return GEMM_PUSH.pack(
            self.a + first * self.a_batch * e, self.b + first * self.b_batch * e,
            self.c + first * self.c_batch_bytes,
            self.bias + first * self.bias_batch * e if self.bias else 0,
            self.residual + first * self.r_batch * e if self.residual else 0,
            self.m, self.n, self.k, self.sam, self.sak, self.sbk, self.sbn, self.a_batch,
            self.b_batch, self.r_batch, self.alpha, self.beta, self.act, self.flags,
            self.b_panel, self.b_cols, self.act_p0, self.act_p1, self.bias_batch)


def split_k(caps: DeviceCaps, plan: GemmPlan, m: int, n: int, k: int, count: int,
            dtype: Any) -> int:
    """How many K slices to run in parallel: more than 1 when the grid under-fills the device.

    Split-K runs for float32 (the slices' float32 partial sums are exact inputs to the
    final pass) on the lanes and shared paths, for one batch entry.
    """
    if dtype_name(dtype) != "float32" or plan.name not in ("lanes", "shared") or count != 1:
        return 1
    workgroups = -(-m // plan.tile_m) * -(-n // plan.tile_n)
    # A CPU driver runs one workgroup per thread at a time; a GPU wants many per core.
    target = (os.cpu_count() or 1) if caps.device_type == "cpu" else SPLIT_K_GPU_WORKGROUPS
    if workgroups * SPLIT_K_UNDERFILL > target or k < SPLIT_K_MIN_K:
        return 1
    return max(1, min(-(-target // workgroups), k // SPLIT_K_MIN_SLICE, SPLIT_K_MAX))


def gemm_plan(caps: DeviceCaps, problem: GemmProblem, force: str | None = None
              ) -> GemmLaunchPlan:
    """The launches of one ``matmul`` problem on ``caps``: variant, split-K, packing.

    Cached on the problem, the device and everything else the choice reads (the
    ``VKUMD_*`` knobs and this module's tunables), so a program's repeated shapes plan once.

    Args:
        force: a name from :data:`VARIANTS` instead of :func:`choose_variant`'s choice.

    Raises:
        VkumdValueError: as :func:`choose_variant`, or a grid past the device's limits.
    """
    knobs = (settings.flag("VKUMD_DISABLE_COOPMAT"), settings.flag("VKUMD_DISABLE_FP16"),
             settings.text(COOPMAT_TILE_VARIABLE), gemm_choice.COOPMAT_ON_CPU,
             gemm_choice.PACK_MIN_K, gemm_choice.PACK_MIN_TILES_M,
             gemm_choice.COOPMAT_MIN_BLOCKS, SPLIT_K_MIN_K, SPLIT_K_MIN_SLICE,
             SPLIT_K_UNDERFILL, SPLIT_K_MAX)
    return _gemm_plan(caps, problem, force, knobs)


@functools.lru_cache(maxsize=1024)
def _gemm_plan(caps: DeviceCaps, problem: GemmProblem, force: str | None, _knobs: tuple
               ) -> GemmLaunchPlan:
    shape = problem.shape
    choice = choose_variant(caps, problem.dtype, shape, force=force)
    count = shape.batch
    splits = split_k(caps, choice, shape.m, shape.n, shape.k, count, problem.dtype)
    itemsize = 1 if problem.dtype == "int8" else 2 if problem.dtype != "float32" else 4
    scratch: tuple[int, ...] = ()
    slice_k = shape.k
    if splits > 1:
        slice_k = -(-shape.k // splits)
        splits = -(-shape.k // slice_k)
        scratch = (splits * shape.m * shape.n * 4, splits * 4)  # partial sums, a ones row
    elif choice.pack is not None and shape.k > 0:
        tiles_n = -(-shape.n // choice.tile_n)
        entries = 1 if problem.b_repeats else count
        scratch = (entries * tiles_n * shape.k * choice.tile_n * itemsize,)
    tiles = (-(-shape.m // choice.tile_m), -(-shape.n // choice.tile_n))
    limits = caps.max_workgroup_count
    if tiles[0] > limits[0] or tiles[1] > limits[1]:
        raise VkumdValueError(f"matmul: {shape.m}x{shape.n} needs {tiles[0]}x{tiles[1]} "
                              f"workgroups, more than {caps.name} dispatches "
                              f"({limits[0]}x{limits[1]})")
    pack = GEMM.specialize(choice.pack) if choice.pack is not None else None
    finish = None
    if splits > 1:
        finish = plan_for(caps, choice.name, GEMM_CODES["float32"],
                          GemmShape(1, shape.n, splits))
    return GemmLaunchPlan(caps, problem, choice, GEMM.specialize(choice.variant), pack,
                          splits, slice_k, itemsize, scratch, finish)


@dataclass(frozen=True)
class GemmLaunchPlan:
    """The launches of one GEMM problem (a :class:`~vkumd.compiler.launch.LaunchPlan`).

    Operands, in order: a, b, out, bias, residual (None when absent; an empty A or B of
    K = 0 is never read). Scratch: split-K's partial sums and ones row, or the packed B.

    Attributes:
        caps: the device planned for.
        problem: the problem.
        choice: the variant chosen.
        program, pack: the GEMM's kernel variant, and the packing copy's (or None).
        splits: K slices (1: no split-K).
        slice_k: K of each slice but the last.
        itemsize: bytes per input element.
        scratch: bytes of each scratch buffer.
        finish: the variant that sums split-K's partial sums (None without split-K).
    """

    caps: DeviceCaps
    problem: GemmProblem
    choice: GemmPlan
    program: Any
    pack: Any
    splits: int
    slice_k: int
    itemsize: int
    scratch: tuple[int, ...]
    finish: GemmPlan | None = None

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """The launches for these operands and scratch buffers, in order."""
        a, b, c, bias, residual = operands
        assert c is not None and c.binding is not None  # a non-empty output has memory
        p, s = self.problem, self.problem.shape
        m, n, k = s.m, s.n, s.k
        flags = ((0 if not p.bias else _FLAG_BIAS_ROW if p.row_bias else _FLAG_BIAS)
                 | (_FLAG_RESIDUAL if p.residual else 0) | (_FLAG_BETA if p.beta != 0.0 else 0)
                 | (_FLAG_RESIDUAL_FIRST if p.residual_first else 0))
        # op(A)[m, k] = A[m * sam + k * sak]; op(B)[k, n] = B[k * sbk + n * sbn].
        sam, sak = (1, m) if s.trans_a else (k, 1)
        sbk, sbn = (1, k) if s.trans_b else (n, 1)
        job = _Job(a=_address(a), b=_address(b), c=c.address,
                   bias=_address(bias), residual=_address(residual),
                   m=m, n=n, k=k, sam=sam, sak=sak, sbk=sbk, sbn=sbn,
                   a_batch=0 if p.a_repeats else m * k, b_batch=0 if p.b_repeats else k * n,
                   r_batch=0 if p.r_repeats else m * n, alpha=p.alpha, beta=p.beta,
                   act=p.act, flags=flags, b_cols=n, esize=self.itemsize,
                   c_batch_bytes=m * n * p.out_itemsize, act_p0=p.act_params[0],
                   act_p1=p.act_params[1],
                   bias_batch=m if p.row_bias and not p.a_repeats else 0)
        if self.splits > 1:
            return self._split_k(job, operands, scratch)
        tensors: list[Operand | None] = [a, b, c, bias, residual]
        launches: list[Launch] = []
        if self.pack is not None and k > 0:
            packed = scratch[0]
            tiles_n = -(-n // self.choice.tile_n)
            job.b_panel = k * self.choice.tile_n
            job.b_cols = tiles_n * self.choice.tile_n
            entries = 1 if p.b_repeats else s.batch
            launches += self._pack_launches(b, packed, job, entries)
            tensors[1] = packed
            job.b = packed.address
            job.sbk, job.sbn = self.choice.tile_n, 1
            job.b_batch = 0 if p.b_repeats else tiles_n * job.b_panel
        launches += self._gemm_launches(self.choice, self.program, job, tensors, s.batch)
        return launches

    def _gemm_launches(self, choice: GemmPlan, program: Any, job: _Job,
                       tensors: Sequence[Operand | None], count: int) -> list[Launch]:
        """The GEMM over ``count`` batch entries; ``tensors`` are a, b, c, bias, residual."""
        tiles_m = -(-job.m // choice.tile_m)
        tiles_n = -(-job.n // choice.tile_n)
        out = tensors[2].binding  # type: ignore[union-attr]
        # Absent operands (and the empty A and B of K = 0) are never read; their slots bind
        # the output so the hazard tracker sees only real ranges.
        buffers = tuple([t.binding if t is not None and t.binding is not None else out
                         for t in tensors])
        # Batches past maxComputeWorkGroupCount[2] go in several launches, each with its
        # operands' addresses moved to its first entry.
        step = self.caps.max_workgroup_count[2]
        return [Launch(program, buffers, job.push(first),
                       (tiles_m, tiles_n, min(step, count - first)), (2,))
                for first in range(0, count, step)]

    def _split_k(self, job: _Job, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand]) -> list[Launch]:
        """K slices into float32 partial sums, then one pass that sums and finishes.

        The second pass is the same GEMM kernel: for each output row r (a batch entry), a
        1 x S row of ones times the S x N slice of partial sums at row r, with the epilogue.
        """
        a, b, c, bias, residual = operands
        partial, ones = scratch
        m, n, k, splits, slice_k = job.m, job.n, job.k, self.splits, self.slice_k
        first = dataclasses.replace(job, c=partial.address, bias=0, residual=0, alpha=1.0,
                                    beta=0.0, act=0, flags=0, k=slice_k,
                                    a_batch=slice_k * job.sak, b_batch=slice_k * job.sbk,
                                    r_batch=0, c_batch_bytes=m * n * 4, bias_batch=0)
        tensors = [a, b, partial, None, None]
        launches = []
        if splits > 1:
            launches += self._gemm_launches(self.choice, self.program, first, tensors,
                                            splits - 1)
        last = dataclasses.replace(first, k=k - (splits - 1) * slice_k)
        last = dataclasses.replace(last, a=first.a + (splits - 1) * first.a_batch * job.esize,
                                   b=first.b + (splits - 1) * first.b_batch * job.esize,
                                   c=first.c + (splits - 1) * m * n * 4)
        launches += self._gemm_launches(self.choice, self.program, last, tensors, 1)
        launches += fill_plan(self.caps, 32, splits, 0x3F800000).launches((ones,))  # 1.0f
        assert self.finish is not None
        finish = dataclasses.replace(job, a=ones.address, b=partial.address, m=1, k=splits,
                                     sam=splits, sak=1, sbk=m * n, sbn=1, a_batch=0,
                                     b_batch=n, r_batch=n,
                                     c_batch_bytes=n * self.problem.out_itemsize,
                                     # each finishing entry is one output row: its row bias
                                     bias_batch=1 if self.problem.row_bias else 0)
        launches += self._gemm_launches(self.finish, GEMM.specialize(self.finish.variant),
                                        finish, [ones, partial, c, bias, residual], m)
        return launches

    def _pack_launches(self, b: Operand | None, packed: Operand, job: _Job, entries: int
                       ) -> list[Launch]:
        """Copy op(B) into ``packed`` as panels of ``tile_n`` columns (zeros past N)."""
        assert b is not None and b.binding is not None
        elements = -(-job.n // self.choice.tile_n) * job.b_panel
        limits = self.caps.max_workgroup_count
        groups = grid_for(elements, self.choice.pack["WORKGROUP_SIZE"], limits[0])
        esize = self.itemsize
        buffers = (b.binding, packed.binding, b.binding, b.binding, b.binding)
        launches = []
        for first in range(0, entries, limits[2]):
            chunk = min(limits[2], entries - first)
            push = GEMM_PUSH.pack(0, b.address + first * job.b_batch * esize,
                                  packed.address + first * elements * esize, 0, 0, 0,
                                  job.n, job.k, 0, 0, job.sbk, job.sbn, 0, job.b_batch, 0, 1.0,
                                  0.0, 0, 0, job.b_panel, 0, 0.0, 0.0, 0)
            launches.append(Launch(self.pack, buffers, push, (groups[0], groups[1], chunk),
                                   (1,)))
        return launches


def _address(t: Operand | None) -> int:
    """The device address of an operand's first element; 0 when absent or empty."""
    return t.address if t is not None else 0
