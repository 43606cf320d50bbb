"""Planning fused attention: which path, which block, how many key splits, and the launches.

Three paths compute the same function (see :mod:`vkumd.framework.opset.attention` for the op's
conventions): ``"tiled"`` (``attention_tiled`` with one subgroup per workgroup, what CPU
drivers run fastest), ``"coopmat"`` (``attention_coopmat``, float16 on GPUs with cooperative
matrices, its block chosen from the device's subgroup size and shared memory or forced by
``VKUMD_ATTENTION_COOPMAT_BLOCK``) and ``"decode"`` (flash-decoding for very short queries:
``attention_tiled`` with ``SPLIT=1`` writes each key split's maximum, sum and unnormalised
output to scratch, and ``attention_combine`` merges them). :func:`choose_path` picks one;
:func:`attention_plan` turns a problem into an :class:`AttentionLaunchPlan`.
"""

from __future__ import annotations

import functools
import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.compiler.kernels.attention import (
    ATTENTION_CODES,
    ATTENTION_COMBINE,
    ATTENTION_COOPMAT,
    ATTENTION_DEFAULT_ROWS,
    ATTENTION_KEYS_PER_LANE,
    ATTENTION_PUSH,
    ATTENTION_ROWS,
    ATTENTION_ROWS_PER_LANE,
    ATTENTION_TILED,
    COMBINE_PUSH,
    COOPMAT_BLOCK_VARIABLE,
    CoopmatBlock,
    attention_key_tile,
    coopmat_block_problem,
    coopmat_blocks,
    coopmat_shapes,
    coopmat_variant,
    default_coopmat_block,
    parse_coopmat_block,
)
from vkumd.compiler.kernels.limits import ATTENTION_LAYOUTS
from vkumd.compiler.launch import Launch, Operand, check_grid, grid_for
from vkumd.compiler.registry import WORKGROUP, effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.vk.caps import DeviceCaps

PATHS = ("tiled", "decode", "coopmat")
LAYOUTS = ATTENTION_LAYOUTS
# Queries at most this long (per key/value head, times the group) may take the decode path.
DECODE_MAX_QUERIES = 8
# A decode split covers at least this many keys; fewer would spend more on the combine step.
DECODE_MIN_SPLIT_KEYS = 256
# Workgroups the decode path aims for: enough to fill a GPU's queues, and no harm on a CPU.
DECODE_TARGET_GROUPS = 128
COMBINE_WORKGROUP = 64
FLAG_CAUSAL, FLAG_KEY_LENGTHS, FLAG_MASK = 1, 2, 4
_GRID_ADVICE = "Split the batch or the sequence"


@dataclass(frozen=True)
class AttentionProblem:
    """The sizes of one attention call.

    Attributes:
        batch, q_heads, kv_heads, q_len, k_len, head_dim: the operands' dimensions.
        dtype: ``"float32"`` or ``"float16"``.
        layout: q's, k's and v's layout, one of :data:`LAYOUTS`.
        out_layout: the output's layout, one of :data:`LAYOUTS`.
    """

    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int
    dtype: str
    layout: str = "bhsd"
    out_layout: str = "bhsd"

    def strides(self) -> tuple[int, ...]:
        """Element strides over (batch, head, seq) of q, of k and v, and of out (the push
        constants' q_*, kv_*, o_* members), for contiguous tensors in their layouts."""
        def of(layout: str, heads: int, seq: int) -> tuple[int, int, int]:
            d = self.head_dim
            if layout == "bshd":
                return seq * heads * d, d, heads * d
            return heads * seq * d, seq * d, d
        return (*of(self.layout, self.q_heads, self.q_len),
                *of(self.layout, self.kv_heads, self.k_len),
                *of(self.out_layout, self.q_heads, self.q_len))

    @property
    def group(self) -> int:
        """Query heads per key/value head."""
        return self.q_heads // self.kv_heads

    @property
    def rows(self) -> int:
        """Rows per key/value head: the group's (query head, query index) pairs."""
        return self.group * self.q_len


def coopmat_usable(caps: DeviceCaps) -> bool:
    """Whether the device offers cooperative matrices the coopmat kernel can use."""
    have = effective_caps(caps)
    return "coopmat" in have and "float16" in have and bool(coopmat_shapes(caps))


def _forced_block(caps: DeviceCaps, head_dim: int, text: str | None) -> CoopmatBlock | None:
    """The block ``text`` (:data:`COOPMAT_BLOCK_VARIABLE`'s value) forces, or None for none.

    Raises:
        VkumdValueError: the value is malformed, names an unlisted shape, or does not fit.
    """
    if text is None:
        return None
    request = parse_coopmat_block(text)
    shapes = coopmat_shapes(caps)
    if request.shape is None:
        shape = shapes[0]
    else:
        shape = next((s for s in shapes if (s.m, s.n, s.k) == request.shape), None)
        if shape is None:
            listed = ", ".join(f"{s.m}x{s.n}x{s.k}" for s in shapes) or "none"
            raise VkumdValueError(f"{COOPMAT_BLOCK_VARIABLE}={text!r}: {caps.name} lists no "
                                  f"usable float16 x float16 + float32 shape "
                                  f"{'x'.join(map(str, request.shape))}; usable: {listed}")
    block = CoopmatBlock(shape, request.subgroups, request.keys, request.row_blocks or 1)
    problem = coopmat_block_problem(caps, block, head_dim)
    if problem is not None:
        fitting = ", ".join(str(b) for b in coopmat_blocks(caps, shape, head_dim)[:12])
        raise VkumdValueError(f"{COOPMAT_BLOCK_VARIABLE}={text!r} (block {block}): {problem}; "
                              f"blocks that run here at head_dim {head_dim}: {fitting or 'none'}")
    return block


def coopmat_plan(caps: DeviceCaps, p: AttentionProblem) -> CoopmatBlock | None:
    """The coopmat kernel's block config for ``p``: forced, else the host's pick; None when
    the device has no usable cooperative matrices or nothing fits its shared memory.

    Cached (every call plans, and enumerating the blocks that fit took tens of
    microseconds), keyed on everything it reads, environment variables included.
    """
    return _cached_coopmat_plan(caps, p.head_dim, p.rows, settings.flag("VKUMD_DISABLE_COOPMAT"),
                                settings.flag("VKUMD_DISABLE_FP16"),
                                settings.text(COOPMAT_BLOCK_VARIABLE))


@functools.lru_cache(maxsize=256)
def _cached_coopmat_plan(caps: DeviceCaps, head_dim: int, rows: int, _no_coopmat: bool,
                         _no_fp16: bool, forced: str | None) -> CoopmatBlock | None:
    # The two flags are only part of the key: coopmat_usable reads them itself. Errors are
    # not cached, so a bad VKUMD_ATTENTION_COOPMAT_BLOCK is reported on every call.
    if not coopmat_usable(caps):
        return None
    block = _forced_block(caps, head_dim, forced)
    if block is not None:
        return block
    return default_coopmat_block(caps, coopmat_shapes(caps)[0], head_dim, rows)


def decode_splits(p: AttentionProblem, caps: DeviceCaps) -> int:
    """How many key splits flash-decoding would use (1: not worth it)."""
    if p.rows > DECODE_MAX_QUERIES:
        return 1
    base = p.batch * p.kv_heads
    want = -(-DECODE_TARGET_GROUPS // base)
    most = p.k_len // DECODE_MIN_SPLIT_KEYS
    return max(1, min(want, most, caps.max_workgroup_count[2]))


def choose_path(caps: DeviceCaps, p: AttentionProblem) -> str:
    """The path :func:`attention_plan` takes for ``p`` by default: one of :data:`PATHS`.

    ``"decode"`` for short queries against keys long enough to split, ``"coopmat"`` for
    float16 on GPUs (not CPU drivers) with usable cooperative matrices and a block config
    that fits, else ``"tiled"``.

    Raises:
        VkumdValueError: ``VKUMD_ATTENTION_COOPMAT_BLOCK`` is malformed or does not fit.
    """
    if p.q_len <= DECODE_MAX_QUERIES and decode_splits(p, caps) > 1:
        return "decode"
    # On CPU drivers the tiled kernel wins: lavapipe emulates cooperative matrices lane by
    # lane (docs/performance.md, "Kernel tuning").
    if p.dtype == "float16" and caps.device_type != "cpu" and coopmat_plan(caps, p) is not None:
        return "coopmat"
    return "tiled"


def attention_plan(caps: DeviceCaps, p: AttentionProblem, *, path: str = "auto",
                   scale: float, flags: int, mask_strides: tuple[int, int, int, int],
                   splits: int | None = None, wide: bool = False) -> AttentionLaunchPlan:
    """The launches of one attention call.

    Args:
        path: ``"auto"`` (:func:`choose_path`) or one of :data:`PATHS`.
        scale: multiplies the scores.
        flags: :data:`FLAG_CAUSAL`, :data:`FLAG_KEY_LENGTHS`, :data:`FLAG_MASK`.
        mask_strides: the mask's element strides over ``[b, h, i, j]`` (0 where broadcast).
        splits: key splits for ``"decode"`` (None: the heuristic's choice, at least 2).
        wide: every operand starts 16-byte aligned (the coopmat kernel then moves 16 bytes
            per load and store).

    Raises:
        VkumdValueError: an unknown path or a bad ``splits``; a grid past the device's
            limits; a malformed or unfitting ``VKUMD_ATTENTION_COOPMAT_BLOCK`` (coopmat).
        VkumdTypeError: the coopmat path for a dtype other than float16.
        CapabilityMissing: ``"coopmat"`` on a device without usable cooperative matrices.
    """
    if path != "auto" and path not in PATHS:
        raise VkumdValueError(f"attention: unknown path {path!r}; choose 'auto' or one of "
                              f"{list(PATHS)}")
    chosen = choose_path(caps, p) if path == "auto" else path
    n_splits = 1
    if chosen == "decode":
        n_splits = splits if splits is not None else max(2, decode_splits(p, caps))
        if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) \
                or not 1 <= n_splits <= caps.max_workgroup_count[2]:
            raise VkumdValueError(f"attention: splits={splits!r} must be an int from 1 to "
                                  f"{caps.max_workgroup_count[2]}")
        n_splits = min(int(n_splits), p.k_len)
    tile = caps.subgroup_size * ATTENTION_KEYS_PER_LANE
    split_keys = -(-p.k_len // n_splits)
    split_keys = -(-split_keys // tile) * tile  # whole tiles per split
    n_splits = -(-p.k_len // split_keys)
    block = _coopmat_block(caps, p) if chosen == "coopmat" else None
    knobs = (settings.flag("VKUMD_DISABLE_COOPMAT"), settings.flag("VKUMD_DISABLE_FP16"),
             settings.text(COOPMAT_BLOCK_VARIABLE))
    return _plan(caps, p, chosen, block, scale, flags, mask_strides, n_splits, split_keys,
                 wide, knobs)


def _coopmat_block(caps: DeviceCaps, p: AttentionProblem) -> CoopmatBlock:
    if p.dtype != "float16":
        raise VkumdTypeError(f"attention: the coopmat path takes float16, got {p.dtype}")
    if not coopmat_usable(caps):
        raise CapabilityMissing(
            f"attention: the coopmat path needs float16 x float16 + float32 cooperative "
            f"matrices at subgroup scope, which {caps.name} ({caps.driver_info}) does "
            "not offer (or VKUMD_DISABLE_COOPMAT turned off); use the tiled path or the "
            "cooperative-matrix lane (ci/coopmat-lane.sh)")
    block = coopmat_plan(caps, p)
    if block is None:
        raise CapabilityMissing(f"attention: no coopmat block config fits head_dim "
                                f"{p.head_dim} in the {caps.shared_memory_size} bytes of "
                                f"shared memory {caps.name} has; use the tiled path")
    return block


@functools.lru_cache(maxsize=1024)
def _plan(caps: DeviceCaps, p: AttentionProblem, path: str, block: CoopmatBlock | None,
          scale: float, flags: int, strides: tuple[int, int, int, int], splits: int,
          split_keys: int, wide: bool, _knobs: tuple) -> AttentionLaunchPlan:
    code = ATTENTION_CODES[p.dtype]
    if ATTENTION_PUSH.size > caps.max_push_constants_size:
        raise CapabilityMissing(f"attention: its kernels take {ATTENTION_PUSH.size} bytes of "
                                f"push constants; {caps.name} allows "
                                f"{caps.max_push_constants_size}")
    layout_strides = p.strides()
    head = (p.batch, p.q_heads, p.kv_heads, p.q_len, p.k_len, p.group, p.rows,
            scale * math.log2(math.e), p.k_len - p.q_len, flags, *strides, splits, split_keys,
            *layout_strides)
    limits = caps.max_workgroup_count
    if path == "coopmat":
        assert block is not None
        vec = 8 if wide else 4
        program = ATTENTION_COOPMAT.specialize(coopmat_variant(caps, block, p.head_dim, vec))
        groups = check_grid("attention", (-(-p.rows // block.rows), p.batch * p.kv_heads, 1),
                            limits, caps.name, _GRID_ADVICE)
        return AttentionLaunchPlan(caps, head, program, groups, (0, 1, 2, 3, 4, 5), 3)
    sg = caps.subgroup_size
    variant: dict[str, Any] = {"DTYPE": code, WORKGROUP: sg, "HD": p.head_dim,
                               "KPL": ATTENTION_KEYS_PER_LANE,
                               "ADDRESSES": int(caps.buffer_device_address)}
    if splits == 1:
        rows = sg * ATTENTION_ROWS_PER_LANE
        variant.update(LANE_ROWS=1, RPL=ATTENTION_ROWS_PER_LANE, KT1=attention_key_tile(caps),
                       MASKED=int(bool(flags & FLAG_MASK)), ROWS=1, SPLIT=0)
        groups = check_grid("attention", (-(-p.rows // rows), p.batch * p.kv_heads, 1),
                            limits, caps.name, _GRID_ADVICE)
        # The seventh binding (split scratch) is unused without splits: it binds out.
        return AttentionLaunchPlan(caps, head, ATTENTION_TILED.specialize(variant), groups,
                                   (0, 1, 2, 3, 4, 5, 3), 3)
    rows = next((r for r in ATTENTION_ROWS if r >= p.rows), ATTENTION_DEFAULT_ROWS)
    variant.update(LANE_ROWS=0, RPL=1, KT1=1, MASKED=0, ROWS=rows, SPLIT=1)
    chunks = p.head_dim // 4
    out_rows = p.batch * p.q_heads * p.q_len
    groups = check_grid("attention", (-(-p.rows // rows), p.batch * p.kv_heads, splits),
                        limits, caps.name, _GRID_ADVICE)
    count = out_rows * chunks
    combine = ATTENTION_COMBINE.specialize({"DTYPE": code, WORKGROUP: COMBINE_WORKGROUP})
    return AttentionLaunchPlan(
        caps, head, ATTENTION_TILED.specialize(variant), groups, (0, 1, 2, 3, 4, 5, 6), 6,
        scratch=(out_rows * splits * (chunks + 1) * 4 * 4,), combine=combine,
        combine_push=COMBINE_PUSH.pack(count, chunks, splits, p.q_heads, p.q_len,
                                       *layout_strides[6:]),
        combine_groups=grid_for(count, COMBINE_WORKGROUP, limits[0]))


@dataclass(frozen=True)
class AttentionLaunchPlan:
    """The launches of one attention call (a :class:`~vkumd.compiler.launch.LaunchPlan`).

    Operands, in order: q, k, v, out, key_lengths (None when absent), mask (None when
    absent). Absent ones bind q (the kernel's flags say it never reads them).

    Attributes:
        caps: the device planned for.
        head: the push constants after the K and V addresses.
        program: the main kernel's variant.
        groups: its grid.
        order: which operand (index into operands + scratch) each binding takes.
        written: the binding the main kernel writes.
        scratch: the decode path's split results (bytes), else none.
        combine, combine_push, combine_groups: the decode path's merge launch.
    """

    caps: DeviceCaps
    head: tuple
    program: Any
    groups: tuple[int, int, int]
    order: tuple[int, ...]
    written: int
    scratch: tuple[int, ...] = ()
    combine: Any = None
    combine_push: bytes = b""
    combine_groups: tuple[int, int, int] = (1, 1, 1)

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """The main launch (and, on the decode path, the combine launch)."""
        q, k, v, out, lengths, mask = operands
        assert q is not None and k is not None and v is not None and out is not None
        slots = [q, k, v, out, lengths if lengths is not None else q,
                 mask if mask is not None else q, *scratch]
        addresses = (k.address, v.address) if self.caps.buffer_device_address else (0, 0)
        push = ATTENTION_PUSH.pack(*addresses, *self.head)
        buffers = tuple([slots[i].binding for i in self.order])  # type: ignore[union-attr]
        launches = [Launch(self.program, buffers, push, self.groups, (self.written,))]
        if self.combine is not None:
            launches.append(Launch(self.combine, (scratch[0].binding, out.binding),
                                   self.combine_push, self.combine_groups, (1,)))
        return launches
