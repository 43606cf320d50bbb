"""Planning a GEMM: variant choice, cooperative-matrix blocks, split-K, packing, and launches.

:func:`choose_variant` picks the main loop and tiles of ``shaders/gemm.comp`` for a problem on
a device (see the module :mod:`vkumd.compiler.kernels.gemm` for what each variant is), and
:func:`gemm_plan` turns a whole problem -- sizes, transposes, layout facts and the fused
epilogue -- into a :class:`GemmLaunchPlan`: the launches and the scratch memory they need.

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
from vkumd.compiler.kernels.elementwise_plan import fill_plan
from vkumd.compiler.kernels.gemm import (
    COOPMAT_TILE_VARIABLE,
    GEMM,
    GEMM_PUSH,
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
from vkumd.compiler.launch import Launch, Operand, grid_for
from vkumd.compiler.registry import Variant, effective_caps
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.vk.caps import CoopMatShape, DeviceCaps

VARIANTS = ("lanes", "lanes_packed", "shared", "coopmat")
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
GEMM_CODES = {"float32": "F32", "float16": "F16", "bfloat16": "BF16", "int8": "I8"}
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


def _dtype_name(dtype: Any) -> str:
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
    if _dtype_name(dtype) == "float16" and caps.storage_16bit and _coopmat_setup(caps)[1]:
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
    dt = _dtype_name(dtype)
    code = GEMM_CODES[dt]
    if force is not None:
        if force not in VARIANTS:
            raise VkumdValueError(f"matmul: variant={force!r} is unknown; use one of "
                                  f"{', '.join(VARIANTS)} or None")
        if force not in available_variants(caps, dt):
            raise VkumdValueError(
                f"matmul: variant={force!r} is not available for {dt} on {caps.name}; "
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




# -- from a problem to launches ------------------------------------------------------------

_FLAG_BIAS, _FLAG_RESIDUAL, _FLAG_BETA = 1, 2, 4


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
        act: activation code (``ACTIVATIONS``).
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
        return GEMM_PUSH.pack(
            self.a + first * self.a_batch * e, self.b + first * self.b_batch * e,
            self.c + first * self.c_batch_bytes, self.bias,
            self.residual + first * self.r_batch * e if self.residual else 0,
            self.m, self.n, self.k, self.sam, self.sak, self.sbk, self.sbn, self.a_batch,
            self.b_batch, self.r_batch, self.alpha, self.beta, self.act, self.flags,
            self.b_panel, self.b_cols)


def split_k(caps: DeviceCaps, plan: GemmPlan, m: int, n: int, k: int, count: int,
            dtype: Any) -> int:
    """How many K slices to run in parallel: more than 1 when the grid under-fills the device.

    Split-K runs for float32 (the slices' float32 partial sums are exact inputs to the
    final pass) on the lanes and shared paths, for one batch entry.
    """
    if _dtype_name(dtype) != "float32" or plan.name not in ("lanes", "shared") or count != 1:
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
             settings.text(COOPMAT_TILE_VARIABLE), COOPMAT_ON_CPU, PACK_MIN_K,
             PACK_MIN_TILES_M, SPLIT_K_MIN_K, SPLIT_K_MIN_SLICE, SPLIT_K_UNDERFILL,
             SPLIT_K_MAX, COOPMAT_MIN_BLOCKS)
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
        finish = _plan(caps, choice.name, GEMM_CODES["float32"], GemmShape(1, shape.n, splits))
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
        flags = ((_FLAG_BIAS if p.bias else 0) | (_FLAG_RESIDUAL if p.residual else 0)
                 | (_FLAG_BETA if p.beta != 0.0 else 0))
        # op(A)[m, k] = A[m * sam + k * sak]; op(B)[k, n] = B[k * sbk + n * sbn].
        sam, sak = (1, m) if s.trans_a else (k, 1)
        sbk, sbn = (1, k) if s.trans_b else (n, 1)
        job = _Job(a=_address(a), b=_address(b), c=c.address,
                   bias=_address(bias), residual=_address(residual),
                   m=m, n=n, k=k, sam=sam, sak=sak, sbk=sbk, sbn=sbn,
                   a_batch=0 if p.a_repeats else m * k, b_batch=0 if p.b_repeats else k * n,
                   r_batch=0 if p.r_repeats else m * n, alpha=p.alpha, beta=p.beta,
                   act=p.act, flags=flags, b_cols=n, esize=self.itemsize,
                   c_batch_bytes=m * n * p.out_itemsize)
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
                                    r_batch=0, c_batch_bytes=m * n * 4)
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
                                     c_batch_bytes=n * self.problem.out_itemsize)
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
                                  0.0, 0, 0, job.b_panel, 0)
            launches.append(Launch(self.pack, buffers, push, (groups[0], groups[1], chunk),
                                   (1,)))
        return launches


def _address(t: Operand | None) -> int:
    """The device address of an operand's first element; 0 when absent or empty."""
    return t.address if t is not None else 0
