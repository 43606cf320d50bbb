"""Fused scaled-dot-product attention, flash style: ``softmax(Q K^T * scale + mask) V``.

The scores never reach global memory: each workgroup keeps a tile of query rows and streams
tiles of keys and values through an online softmax (running maximum and sum, accumulator
rescaled as the maximum grows). Three paths compute the same function:

``"tiled"``
    ``shaders/attention_tiled.comp``; runs on every device. One subgroup per workgroup,
    rows of Q in registers, no shared memory (what CPU drivers such as lavapipe run fastest).
``"coopmat"``
    ``shaders/attention_coopmat.comp``; float16 inputs on GPUs with
    ``VK_KHR_cooperative_matrix``, flash-attention-2 style: a workgroup of several subgroups,
    each owning its query rows (Q held in matrix registers, output in accumulators), K and V
    tiles staged once per workgroup, Q K^T and P V on cooperative matrices at a float16 x
    float16 + float32 shape the driver lists (never a fixed one). The block config (subgroups,
    keys per tile, row blocks per subgroup, shape) is chosen from the device's subgroup size
    and shared memory; ``VKUMD_ATTENTION_COOPMAT_BLOCK`` (see
    :func:`vkumd.compiler.kernels.attention.parse_coopmat_block`) forces one.
``"decode"``
    flash-decoding for very short queries (up to :data:`DECODE_MAX_QUERIES` tokens) against
    long keys: the keys are split across workgroups (the tiled kernel with ``SPLIT=1`` writes
    each split's maximum, sum and unnormalised output to a small scratch buffer) and
    ``shaders/attention_combine.comp`` merges them.

:func:`choose_path` says which one :func:`attention` takes; :func:`attention_path` forces one
(tests and benchmarks use it).

Conventions:
    * Tensors are ``[batch, heads, seq, head_dim]``. Key/value heads may be fewer than query
      heads (grouped-query attention) if they divide them: query head ``h`` reads key/value
      head ``h // (q_heads // kv_heads)``.
    * ``causal`` with ``q_len != k_len`` is aligned bottom-right, as PyTorch's
      ``scaled_dot_product_attention`` with a bottom-right causal mask and flash-attn do: query
      ``i`` sees keys ``j <= i + k_len - q_len``. So the last query sees every key, which is
      what decoding with a key/value cache needs. When ``q_len > k_len`` the first
      ``q_len - k_len`` queries see no key.
    * A query row whose keys are all masked (by ``causal``, ``key_lengths`` or ``-inf`` in
      ``attn_mask``) outputs zeros, not NaN.
    * float16 tensors are computed with float32 accumulation; the output has the inputs' type.
"""

from __future__ import annotations

import functools
import math
import numbers
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd import settings
from vkumd.compiler.kernels import WORKGROUP
from vkumd.compiler.kernels.attention import (
    ATTENTION_DEFAULT_ROWS,
    ATTENTION_KEY_TILE,
    ATTENTION_KEYS_PER_LANE,
    ATTENTION_MAX_HEAD_DIM,
    ATTENTION_ROWS,
    ATTENTION_ROWS_PER_LANE,
    COOPMAT_BLOCK_VARIABLE,
    CoopmatBlock,
    coopmat_block_problem,
    coopmat_blocks,
    coopmat_shapes,
    coopmat_variant,
    default_coopmat_block,
    parse_coopmat_block,
)
from vkumd.compiler.registry import effective_caps
from vkumd.errors import CapabilityMissing, VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.tensor import Tensor
from vkumd.submission.recorder import grid_for
from vkumd.vk.caps import DeviceCaps

PATHS = ("tiled", "decode", "coopmat")
# Queries at most this long (per key/value head, times the group) may take the decode path.
DECODE_MAX_QUERIES = 8
# A decode split covers at least this many keys; fewer would spend more on the combine step.
DECODE_MIN_SPLIT_KEYS = 256
# Workgroups the decode path aims for: enough to fill a GPU's queues, and no harm on a CPU.
DECODE_TARGET_GROUPS = 128
_MAIN_PUSH = struct.Struct("<2Q7Ifi7I")
_COMBINE_PUSH = struct.Struct("<3I")
_COMBINE_WORKGROUP = 64
_FLAG_CAUSAL, _FLAG_KEY_LENGTHS, _FLAG_MASK = 1, 2, 4
_CODE = {"float32": "F32", "float16": "F16"}


@dataclass(frozen=True)
class _Problem:
    batch: int
    q_heads: int
    kv_heads: int
    q_len: int
    k_len: int
    head_dim: int
    dtype: dtypes.DType

    @property
    def group(self) -> int:
        return self.q_heads // self.kv_heads

    @property
    def rows(self) -> int:
        """Rows per key/value head: the group's (query head, query index) pairs."""
        return self.group * self.q_len


# -- argument checks ------------------------------------------------------------------------


def _check_tensor(t: Any, what: str) -> Tensor:
    if not isinstance(t, Tensor):
        raise VkumdTypeError(f"attention: {what} must be a vkumd Tensor, not {type(t).__name__}; "
                             "convert with ctx.tensor(array)")
    t.context.check_open("attention")
    if t.released:
        raise VkumdValueError(f"attention: {what} was released")
    return t


def _check_inputs(q: Any, k: Any, v: Any) -> _Problem:
    q, k, v = _check_tensor(q, "q"), _check_tensor(k, "k"), _check_tensor(v, "v")
    if k.context is not q.context or v.context is not q.context:
        raise VkumdValueError("attention: q, k and v belong to different contexts")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise VkumdValueError(f"attention: {name} must be 4-D [batch, heads, seq, head_dim], "
                                  f"got shape {t.shape}")
    if q.dtype.name not in _CODE:
        raise VkumdTypeError(f"attention: q is {q.dtype.name}; attention takes float32 or "
                             "float16 (cast with vkumd.ops.cast)")
    if k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise VkumdTypeError(f"attention: q, k and v must share a dtype, got {q.dtype.name}, "
                             f"{k.dtype.name} and {v.dtype.name}")
    if k.shape != v.shape:
        raise VkumdValueError(f"attention: k and v must have the same shape, got {k.shape} and "
                              f"{v.shape}")
    batch, q_heads, q_len, head_dim = q.shape
    k_batch, kv_heads, k_len, k_dim = k.shape
    if k_batch != batch:
        raise VkumdValueError(f"attention: q has batch {batch} and k/v have {k_batch}")
    if k_dim != head_dim:
        raise VkumdValueError(f"attention: q has head_dim {head_dim} and k/v have {k_dim}; they "
                              "must match")
    if kv_heads < 1 or q_heads % kv_heads:
        raise VkumdValueError(f"attention: {q_heads} query heads are not a multiple of "
                              f"{kv_heads} key/value heads (grouped-query attention needs "
                              "kv_heads to divide q_heads)")
    if head_dim % 4 or not 4 <= head_dim <= ATTENTION_MAX_HEAD_DIM:
        raise VkumdValueError(f"attention: head_dim {head_dim} is not supported; it must be a "
                              f"multiple of 4 from 4 to {ATTENTION_MAX_HEAD_DIM} (e.g. 32, 64, "
                              "80, 96, 128); pad q, k and v with zeros to the next multiple "
                              "of 4 and pass scale=1/sqrt(original head_dim)")
    if q.dtype.itemsize == 2 and not q.context.caps.storage_16bit:
        raise CapabilityMissing(f"attention: float16 tensors need 16-bit storage, which "
                                f"{q.context.caps.name} lacks; use float32")
    return _Problem(batch, q_heads, kv_heads, q_len, k_len, head_dim, q.dtype)


def _check_scale(scale: Any, head_dim: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(head_dim)
    if isinstance(scale, (bool, np.bool_)) or not isinstance(scale, numbers.Real):
        raise VkumdTypeError(f"attention: scale must be a real number, not {type(scale).__name__}")
    if not math.isfinite(float(scale)):
        raise VkumdValueError(f"attention: scale must be finite, got {scale}")
    return float(scale)


def _key_lengths_tensor(key_lengths: Any, p: _Problem, ctx: Any) -> tuple[Tensor, bool]:
    """The int32 ``[batch]`` tensor to bind, and whether the op made it (and must release it).

    Lengths past ``k_len`` act as ``k_len``; negative ones as 0 (a tensor's values are not
    read back to check them).
    """
    if isinstance(key_lengths, Tensor):
        _check_tensor(key_lengths, "key_lengths")
        if key_lengths.context is not ctx:
            raise VkumdValueError("attention: key_lengths belongs to a different context")
        if key_lengths.dtype is not dtypes.int32:
            raise VkumdTypeError(f"attention: a key_lengths tensor must be int32, got "
                                 f"{key_lengths.dtype.name}")
        if key_lengths.shape != (p.batch,):
            raise VkumdValueError(f"attention: key_lengths has shape {key_lengths.shape}; "
                                  f"expected ({p.batch},), one length per batch entry")
        return key_lengths, False
    if isinstance(key_lengths, (str, bytes)) or not isinstance(key_lengths, Sequence):
        if not isinstance(key_lengths, np.ndarray):
            raise VkumdTypeError(f"attention: key_lengths must be a list of ints or an int32 "
                                 f"tensor, not {type(key_lengths).__name__}")
    values = list(key_lengths)
    if len(values) != p.batch:
        raise VkumdValueError(f"attention: key_lengths has {len(values)} entries; expected "
                              f"{p.batch}, one per batch entry")
    for index, value in enumerate(values):
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
            raise VkumdTypeError(f"attention: key_lengths[{index}] = {value!r} is not an int")
        if not 0 <= int(value) <= p.k_len:
            raise VkumdValueError(f"attention: key_lengths[{index}] = {value} is outside "
                                  f"[0, k_len={p.k_len}]")
    return ctx.tensor(np.asarray(values, dtype=np.int32)), True


def _mask_strides(attn_mask: Any, p: _Problem, ctx: Any) -> tuple[Tensor, tuple[int, ...], bool]:
    """The float32 mask to bind, its element strides over ``[b, h, i, j]`` (0 where
    broadcast), and whether the op made it (a float16 mask is widened to float32 first)."""
    _check_tensor(attn_mask, "attn_mask")
    if attn_mask.context is not ctx:
        raise VkumdValueError("attention: attn_mask belongs to a different context")
    if attn_mask.dtype.name not in _CODE:
        raise VkumdTypeError(f"attention: attn_mask must be float32 or float16 (additive), got "
                             f"{attn_mask.dtype.name}; turn a boolean mask into 0 / -inf")
    target = (p.batch, p.q_heads, p.q_len, p.k_len)
    shape = attn_mask.shape
    padded = (1,) * (4 - len(shape)) + shape if len(shape) <= 4 else None
    if padded is None or any(s not in (1, t) for s, t in zip(padded, target, strict=True)):
        raise VkumdValueError(f"attention: attn_mask of shape {shape} does not broadcast to "
                              f"[batch, heads, q_len, k_len] = {list(target)}")
    strides = [0, 0, 0, 0]
    step = 1
    for d in range(3, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    if attn_mask.dtype is dtypes.float32:
        return attn_mask, tuple(strides), False
    from vkumd.framework.ops.elementwise import cast
    return cast(attn_mask, "float32"), tuple(strides), True


def _check_out(out: Any, q: Tensor) -> Tensor:
    if out is None:
        return q.context.empty(q.shape, q.dtype)
    _check_tensor(out, "out=")
    if out.context is not q.context:
        raise VkumdValueError("attention: out= belongs to a different context than q")
    if out.shape != q.shape or out.dtype is not q.dtype:
        raise VkumdValueError(f"attention: out= has shape {out.shape} and dtype "
                              f"{out.dtype.name}; expected {q.shape} and {q.dtype.name}")
    return out


# -- path choice ------------------------------------------------------------------------------


def _coopmat_usable(caps: DeviceCaps) -> bool:
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


def _coopmat_plan(caps: DeviceCaps, p: _Problem) -> CoopmatBlock | None:
    """The coopmat kernel's block config for ``p``: forced, else the host's pick; None when
    the device has no usable cooperative matrices or nothing fits its shared memory.

    Cached, as matmul's plan is (every call plans, and enumerating the blocks that fit took
    tens of microseconds), keyed on everything it reads, environment variables included.
    """
    return _cached_coopmat_plan(caps, p.head_dim, p.rows, settings.flag("VKUMD_DISABLE_COOPMAT"),
                                settings.flag("VKUMD_DISABLE_FP16"),
                                settings.text(COOPMAT_BLOCK_VARIABLE))


@functools.lru_cache(maxsize=256)
def _cached_coopmat_plan(caps: DeviceCaps, head_dim: int, rows: int, _no_coopmat: bool,
                         _no_fp16: bool, forced: str | None) -> CoopmatBlock | None:
    # The two flags are only part of the key: _coopmat_usable reads them itself. Errors are
    # not cached, so a bad VKUMD_ATTENTION_COOPMAT_BLOCK is reported on every call.
    if not _coopmat_usable(caps):
        return None
    block = _forced_block(caps, head_dim, forced)
    if block is not None:
        return block
    return default_coopmat_block(caps, coopmat_shapes(caps)[0], head_dim, rows)


def _decode_splits(p: _Problem, caps: DeviceCaps) -> int:
    """How many key splits flash-decoding would use (1: not worth it)."""
    if p.rows > DECODE_MAX_QUERIES:
        return 1
    base = p.batch * p.kv_heads
    want = -(-DECODE_TARGET_GROUPS // base)
    most = p.k_len // DECODE_MIN_SPLIT_KEYS
    return max(1, min(want, most, caps.max_workgroup_count[2]))


def _choose(p: _Problem, caps: DeviceCaps) -> str:
    if p.q_len <= DECODE_MAX_QUERIES and _decode_splits(p, caps) > 1:
        return "decode"
    # On CPU drivers the tiled kernel wins: lavapipe emulates cooperative matrices lane by
    # lane (Mesa 26, seq 1024, head_dim 64: tiled 17 ms, coopmat 70-180 ms).
    if p.dtype is dtypes.float16 and caps.device_type != "cpu" \
            and _coopmat_plan(caps, p) is not None:
        return "coopmat"
    return "tiled"


def choose_path(q: Tensor, k: Tensor, v: Tensor | None = None) -> str:
    """The path :func:`attention` takes for these operands: one of :data:`PATHS`.

    Args:
        q: query tensor ``[batch, heads, q_len, head_dim]``.
        k: key tensor ``[batch, kv_heads, k_len, head_dim]``.
        v: value tensor (defaults to ``k``'s shape and dtype for the checks).

    Returns:
        ``"decode"`` for short queries against keys long enough to split, ``"coopmat"`` for
        float16 on GPUs (not CPU drivers) with usable cooperative matrices and a block config
        that fits, else ``"tiled"``.

    Raises:
        VkumdTypeError, VkumdValueError: the operands are not valid attention inputs, or
            ``VKUMD_ATTENTION_COOPMAT_BLOCK`` is malformed or does not fit.
    """
    p = _check_inputs(q, k, k if v is None else v)
    return _choose(p, q.context.caps)


# -- launching ----------------------------------------------------------------------------------


def _buffer(t: Tensor) -> tuple[Any, int, int]:
    assert t.allocation is not None
    return (t.allocation.buffer, t.allocation.offset, t.nbytes)


def _push(p: _Problem, scale: float, flags: int, strides: tuple[int, ...], splits: int,
          split_keys: int, k: Tensor, v: Tensor) -> bytes:
    addresses = (0, 0)
    if k.context.caps.buffer_device_address:
        addresses = (k.allocation.device_address, v.allocation.device_address)
    return _MAIN_PUSH.pack(*addresses, p.batch, p.q_heads, p.kv_heads, p.q_len, p.k_len,
                           p.group, p.rows, scale * math.log2(math.e), p.k_len - p.q_len,
                           flags, *strides, splits, split_keys)


def _grid(ctx: Any, x: int, y: int, z: int) -> tuple[int, int, int]:
    limits = ctx.caps.max_workgroup_count
    if x > limits[0] or y > limits[1] or z > limits[2]:
        raise VkumdValueError(f"attention: this problem needs a ({x}, {y}, {z}) grid of "
                              f"workgroups; {ctx.caps.name} allows {tuple(limits)}. Split the "
                              "batch or the sequence")
    return (x, y, z)


def _rows_for(p: _Problem) -> int:
    """Rows per workgroup of the tiled kernel: the default, or fewer when there are fewer."""
    return next((r for r in ATTENTION_ROWS if r >= p.rows), ATTENTION_DEFAULT_ROWS)


def _run_tiled(ctx: Any, p: _Problem, tensors: list[Tensor], push: bytes, splits: int,
               out: Tensor, masked: bool) -> None:
    q, k, v, lengths, mask = tensors
    sg = ctx.caps.subgroup_size
    variant = {"DTYPE": _CODE[p.dtype.name], WORKGROUP: sg, "HD": p.head_dim,
               "KPL": ATTENTION_KEYS_PER_LANE,
               "ADDRESSES": int(ctx.caps.buffer_device_address)}
    if splits == 1:
        rows = sg * ATTENTION_ROWS_PER_LANE
        variant.update(LANE_ROWS=1, RPL=ATTENTION_ROWS_PER_LANE,
                       KT1=ATTENTION_KEY_TILE, MASKED=int(masked), ROWS=1, SPLIT=0)
        buffers = [_buffer(t) for t in (q, k, v, out, lengths, mask, out)]
        groups = _grid(ctx, -(-p.rows // rows), p.batch * p.kv_heads, 1)
        ctx.dispatch("attention_tiled", variant, buffers, push, groups, writes=(3,))
        return
    rows = _rows_for(p)
    variant.update(LANE_ROWS=0, RPL=1, KT1=1, MASKED=0, ROWS=rows, SPLIT=1)
    chunks = p.head_dim // 4
    out_rows = p.batch * p.q_heads * p.q_len
    scratch = ctx.empty((out_rows, splits, chunks + 1, 4), dtypes.float32)
    try:
        buffers = [_buffer(t) for t in (q, k, v, out, lengths, mask, scratch)]
        groups = _grid(ctx, -(-p.rows // rows), p.batch * p.kv_heads, splits)
        ctx.dispatch("attention_tiled", variant, buffers, push, groups, writes=(6,))
        count = out_rows * chunks
        combine = {"DTYPE": _CODE[p.dtype.name], WORKGROUP: _COMBINE_WORKGROUP}
        ctx.dispatch("attention_combine", combine, [_buffer(scratch), _buffer(out)],
                     _COMBINE_PUSH.pack(count, chunks, splits),
                     grid_for(count, _COMBINE_WORKGROUP, ctx.caps.max_workgroup_count[0]),
                     writes=(1,))
    finally:
        scratch.release()


def _wide(tensors: Sequence[Tensor]) -> bool:
    """Whether every tensor starts 16-byte aligned (the coopmat kernel then moves 16 bytes
    per load and store)."""
    return all(t.allocation is not None and t.allocation.offset % 16 == 0 for t in tensors)


def _run_coopmat(ctx: Any, p: _Problem, tensors: list[Tensor], push: bytes,
                 out: Tensor) -> None:
    if p.dtype is not dtypes.float16:
        raise VkumdTypeError(f"attention: the coopmat path takes float16, got {p.dtype.name}")
    if not _coopmat_usable(ctx.caps):
        raise CapabilityMissing(
            f"attention: the coopmat path needs float16 x float16 + float32 cooperative "
            f"matrices at subgroup scope, which {ctx.caps.name} ({ctx.caps.driver_info}) does "
            "not offer (or VKUMD_DISABLE_COOPMAT turned off); use the tiled path or the "
            "cooperative-matrix lane (ci/coopmat-lane.sh)")
    block = _coopmat_plan(ctx.caps, p)
    if block is None:
        raise CapabilityMissing(f"attention: no coopmat block config fits head_dim "
                                f"{p.head_dim} in the {ctx.caps.shared_memory_size} bytes of "
                                f"shared memory {ctx.caps.name} has; use the tiled path")
    q, k, v, lengths, mask = tensors
    vec = 8 if _wide([q, k, v, out]) else 4
    variant = coopmat_variant(ctx.caps, block, p.head_dim, vec)
    buffers = [_buffer(t) for t in (q, k, v, out, lengths, mask)]
    groups = _grid(ctx, -(-p.rows // block.rows), p.batch * p.kv_heads, 1)
    ctx.dispatch("attention_coopmat", variant, buffers, push, groups, writes=(3,))


def attention_path(path: str, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                   key_lengths: Any = None, attn_mask: Tensor | None = None,
                   scale: float | None = None, out: Tensor | None = None,
                   splits: int | None = None) -> Tensor:
    """:func:`attention` through a chosen path instead of :func:`choose_path`'s.

    Args:
        path: ``"auto"`` or one of :data:`PATHS`.
        q, k, v, causal, key_lengths, attn_mask, scale, out: as for :func:`attention`.
        splits: key splits for ``"decode"`` (default: the heuristic's choice, at least 2);
            ignored by the other paths.

    Returns:
        The output tensor.

    Raises:
        VkumdValueError: an unknown path, a bad ``splits``, a malformed or unfitting
            ``VKUMD_ATTENTION_COOPMAT_BLOCK`` (coopmat), and as :func:`attention`.
        CapabilityMissing: ``"coopmat"`` on a device without usable cooperative matrices.
    """
    if path != "auto" and path not in PATHS:
        raise VkumdValueError(f"attention: unknown path {path!r}; choose 'auto' or one of "
                              f"{list(PATHS)}")
    if not isinstance(causal, (bool, np.bool_)):
        raise VkumdTypeError(f"attention: causal must be a bool, not {type(causal).__name__}")
    p = _check_inputs(q, k, v)
    ctx = q.context
    scale_value = _check_scale(scale, p.head_dim)
    out = _check_out(out, q)
    if p.q_len == 0 or p.batch == 0 or p.q_heads == 0:
        return out
    if p.k_len == 0:
        from vkumd.framework.ops.elementwise import fill
        return fill(out, 0.0)  # no key at all: every row is fully masked

    made: list[Tensor] = []
    try:
        flags = _FLAG_CAUSAL if causal else 0
        lengths = q  # bound but never read when the flag is off
        if key_lengths is not None:
            lengths, new = _key_lengths_tensor(key_lengths, p, ctx)
            flags |= _FLAG_KEY_LENGTHS
            if new:
                made.append(lengths)
        mask, strides = q, (0, 0, 0, 0)
        if attn_mask is not None:
            mask, strides, new = _mask_strides(attn_mask, p, ctx)
            flags |= _FLAG_MASK
            if new:
                made.append(mask)
        chosen = _choose(p, ctx.caps) if path == "auto" else path
        n_splits = 1
        if chosen == "decode":
            n_splits = splits if splits is not None else max(2, _decode_splits(p, ctx.caps))
            if isinstance(n_splits, bool) or not isinstance(n_splits, numbers.Integral) \
                    or not 1 <= n_splits <= ctx.caps.max_workgroup_count[2]:
                raise VkumdValueError(f"attention: splits={splits!r} must be an int from 1 to "
                                      f"{ctx.caps.max_workgroup_count[2]}")
            n_splits = min(int(n_splits), p.k_len)
        tile = ctx.caps.subgroup_size * ATTENTION_KEYS_PER_LANE
        split_keys = -(-p.k_len // n_splits)
        split_keys = -(-split_keys // tile) * tile  # whole tiles per split
        n_splits = -(-p.k_len // split_keys)
        push = _push(p, scale_value, flags, strides, n_splits, split_keys, k, v)
        tensors = [q, k, v, lengths, mask]
        if chosen == "coopmat":
            _run_coopmat(ctx, p, tensors, push, out)
        else:
            _run_tiled(ctx, p, tensors, push, n_splits, out, attn_mask is not None)
    finally:
        for t in made:
            t.release()
    return out


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, key_lengths: Any = None,
              attn_mask: Tensor | None = None, scale: float | None = None,
              out: Tensor | None = None) -> Tensor:
    """Fused ``softmax(q @ k^T * scale + attn_mask) @ v`` over ``[batch, heads, seq, head_dim]``.

    No ``seq x seq`` buffer is ever allocated: memory is the inputs, the output and, on the
    decode path, a scratch of ``batch * heads * q_len * splits * (head_dim + 4)`` floats.

    Args:
        q: ``[batch, q_heads, q_len, head_dim]``, float32 or float16.
        k: ``[batch, kv_heads, k_len, head_dim]``, q's dtype; ``kv_heads`` divides ``q_heads``
            (grouped-query attention; 1 is multi-query attention).
        v: k's shape and dtype.
        causal: mask keys after each query, aligned bottom-right: query ``i`` sees keys
            ``j <= i + k_len - q_len`` (PyTorch's and flash-attn's convention for decoding).
        key_lengths: per batch entry, keys at or past this length are masked: a list of
            ``batch`` ints in ``[0, k_len]`` or an int32 tensor of shape ``[batch]`` (whose
            values are clamped to that range on the device).
        attn_mask: additive float32 or float16 mask broadcastable to
            ``[batch, q_heads, q_len, k_len]``; ``-inf`` masks a key.
        scale: multiplies the scores; default ``1 / sqrt(head_dim)``.
        out: optional tensor of q's shape and dtype to write.

    Returns:
        ``out`` (or a new tensor): q's shape and dtype. Rows whose keys are all masked are 0.

    Raises:
        VkumdTypeError: non-tensor operands, dtypes other than float32/float16 or that differ,
            an int32-less key_lengths tensor, a non-number scale, a non-bool causal.
        VkumdValueError: not 4-D, batch or head_dim mismatch, heads not divisible, head_dim not
            a multiple of 4 in [4, 256], bad key_lengths length or values, a mask that does
            not broadcast, a bad out=, tensors from other contexts.
        CapabilityMissing: float16 on a device without 16-bit storage.
    """
    return attention_path("auto", q, k, v, causal=causal, key_lengths=key_lengths,
                          attn_mask=attn_mask, scale=scale, out=out)
