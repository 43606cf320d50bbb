"""Fused scaled-dot-product attention, flash style: ``softmax(Q K^T * scale + mask) V``: the
``attention`` record (rule, float64 reference, lowering) and its eager function.

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
    flash-decoding for very short queries (up to
    :data:`~vkumd.compiler.kernels.attention_plan.DECODE_MAX_QUERIES` tokens) against
    long keys: the keys are split across workgroups (the tiled kernel with ``SPLIT=1`` writes
    each split's maximum, sum and unnormalised output to a small scratch buffer) and
    ``shaders/attention_combine.comp`` merges them.

:func:`choose_path` says which one :func:`attention` takes; :func:`attention_path` forces one
(tests and benchmarks use it).

Conventions:
    * Tensors are ``[batch, heads, seq, head_dim]`` (``layout="bhsd"``, PyTorch's
      ``scaled_dot_product_attention``) or ``[batch, seq, heads, head_dim]``
      (``layout="bshd"``, flash-attn's); the kernels read and write either directly, so no
      permute is needed around the call. ``out_layout`` may differ from ``layout``.
      Key/value heads may be fewer than query heads (grouped-query attention) if they divide
      them: query head ``h`` reads key/value head ``h // (q_heads // kv_heads)``.
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

import math
import numbers
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from vkumd.compiler.kernels import attention_plan as planner
from vkumd.compiler.kernels.attention_plan import (
    FLAG_CAUSAL,
    FLAG_KEY_LENGTHS,
    FLAG_MASK,
    LAYOUTS,
    PATHS,
    AttentionProblem,
)
from vkumd.compiler.kernels.limits import (
    ATTENTION_DTYPES,
    ATTENTION_HEAD_DIM_MULTIPLE,
    ATTENTION_MAX_HEAD_DIM,
)
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph.attention_layout import (
    LAYOUT_AXES,
    attention_layouts,
    swap_heads_seq,
)
from vkumd.framework.graph.dims import Shape, divide_exact, format_shape
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, real, same_dtype
from vkumd.framework.graph.reference import softmax_rows
from vkumd.framework.graph.registry import TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.checks import check_storage, check_tensor, output
from vkumd.framework.ops.contract import Verdicts, concrete_rule, live_with, recall, remember
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.opset.unary import cast, fill
from vkumd.framework.tensor import Tensor

__all__ = ["LAYOUTS", "PATHS", "attention", "attention_path", "choose_path"]


# -- argument checks ------------------------------------------------------------------------
# The shapes, dtypes and attributes are checked by the ``attention`` op record's rule
# (declared below), the one the graph applies; the eager function also checks what the
# graph op has no word for: contexts, ``out=``, key lengths given as a list, the kernels'
# head_dim limit and the device's storage.


class _Verdict(NamedTuple):
    """What the rule and the kernel limits made of one call signature."""

    problem: AttentionProblem
    scale: float  # the scale the kernel applies (the default filled in)
    out_shape: tuple[int, ...]


# Verdicts by the shapes and dtype names of q, k, v and of the key_lengths tensor and mask
# (None where absent), causal and scale each with its type (True == 1 hash alike and the rule
# takes only one of them), layout and out_layout.
_VERDICTS: Verdicts = {}


def _judge(q: Tensor, k: Tensor, v: Tensor, key_lengths: Tensor | None, mask: Tensor | None,
           causal: Any, scale: Any, layout: Any, out_layout: Any) -> _Verdict:
    """Check a call with the op's rule and the kernels' limits; raises as they do."""
    (out,) = concrete_rule("attention", (q, k, v, key_lengths, mask),
                           {"causal": causal, "scale": scale, "layout": layout,
                            "out_layout": out_layout})
    out_layout = layout if out_layout is None else out_layout
    batch, q_heads, q_len, head_dim = swap_heads_seq(q.shape, layout)
    _, kv_heads, k_len, _ = swap_heads_seq(k.shape, layout)
    step = ATTENTION_HEAD_DIM_MULTIPLE
    if head_dim % step or not step <= head_dim <= ATTENTION_MAX_HEAD_DIM:
        raise VkumdValueError(f"attention: head_dim {head_dim} is not supported; it must be a "
                              f"multiple of {step} from {step} to {ATTENTION_MAX_HEAD_DIM} "
                              f"(e.g. 32, 64, 80, 96, 128); pad q, k and v with zeros to the "
                              f"next multiple of {step} and pass scale=1/sqrt(original "
                              "head_dim)")
    problem = AttentionProblem(batch, q_heads, kv_heads, q_len, k_len, head_dim, q.dtype.name,
                               layout, out_layout)
    value = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    return _Verdict(problem, value, out.shape)


def _check(q: Any, k: Any, v: Any, key_lengths: Any = None, attn_mask: Any = None,
           causal: Any = False, scale: Any = None, layout: Any = "bhsd",
           out_layout: Any = None) -> _Verdict:
    """Check an attention call's arguments but ``out=`` and the values of a key-lengths
    list: the tensors are live and share a context, the rule and the kernels take them."""
    q, k, v = (check_tensor("attention", t, n) for t, n in ((q, "q"), (k, "k"), (v, "v")))
    if k.context is not q.context or v.context is not q.context:
        raise VkumdValueError("attention: q, k and v belong to different contexts")
    lengths = key_lengths if isinstance(key_lengths, Tensor) else None
    live_with("attention", q, ((lengths, "key_lengths?"), (attn_mask, "attn_mask?")))
    key = (q.shape, q.dtype.name, k.shape, k.dtype.name, v.shape, v.dtype.name,
           None if lengths is None else (lengths.shape, lengths.dtype.name),
           None if attn_mask is None else (attn_mask.shape, attn_mask.dtype.name),
           causal, type(causal), scale, type(scale), layout, out_layout)
    known = recall(_VERDICTS, key)
    if known is None:
        known = remember(_VERDICTS, key, _judge(q, k, v, lengths, attn_mask, causal, scale,
                                                layout, out_layout))
    if q.dtype.itemsize < 4:
        check_storage("attention", q.dtype, q.context)
    return known


def _key_lengths_tensor(key_lengths: Any, p: AttentionProblem, ctx: Any) -> tuple[Tensor, bool]:
    """The int32 ``[batch]`` tensor to bind, and whether the op made it (and must release it).

    Lengths past ``k_len`` act as ``k_len``; negative ones as 0 (a tensor's values are not
    read back to check them; :func:`_check` has checked the tensor itself).
    """
    if isinstance(key_lengths, Tensor):
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


def _mask_strides(attn_mask: Any, p: AttentionProblem, ctx: Any
                  ) -> tuple[Tensor, tuple[int, ...], bool]:
    """The float32 mask to bind, its element strides over ``[b, h, i, j]`` (0 where
    broadcast), and whether the op made it (a float16 mask is widened to float32 first).
    :func:`_check` has checked that it broadcasts to the scores."""
    shape = attn_mask.shape
    padded = (1,) * (4 - len(shape)) + shape
    strides = [0, 0, 0, 0]
    step = 1
    for d in range(3, -1, -1):
        strides[d] = step if padded[d] != 1 else 0
        step *= padded[d]
    if attn_mask.dtype is dtypes.float32:
        return attn_mask, tuple(strides), False
    return cast(attn_mask, "float32"), tuple(strides), True


# -- the path -------------------------------------------------------------------------------


def choose_path(q: Tensor, k: Tensor, v: Tensor | None = None, *, layout: str = "bhsd") -> str:
    """The path :func:`attention` takes for these operands: one of :data:`PATHS`.

    Args:
        q: query tensor ``[batch, heads, q_len, head_dim]`` (``layout="bshd"``:
            ``[batch, q_len, heads, head_dim]``).
        k: key tensor ``[batch, kv_heads, k_len, head_dim]`` (or as q's layout says).
        v: value tensor (defaults to ``k``'s shape and dtype for the checks).
        layout: one of :data:`LAYOUTS`, as for :func:`attention`.

    Returns:
        ``"decode"`` for short queries against keys long enough to split, ``"coopmat"`` for
        float16 on GPUs (not CPU drivers) with usable cooperative matrices and a block config
        that fits, else ``"tiled"`` (see :func:`vkumd.compiler.kernels.attention_plan.
        choose_path`).

    Raises:
        VkumdTypeError, VkumdValueError: the operands are not valid attention inputs, or
            ``VKUMD_ATTENTION_COOPMAT_BLOCK`` is malformed or does not fit.
    """
    verdict = _check(q, k, k if v is None else v, layout=layout, out_layout=layout)
    return planner.choose_path(q.context.caps, verdict.problem)


def attention_path(path: str, q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False,
                   key_lengths: Any = None, attn_mask: Tensor | None = None,
                   scale: float | None = None, out: Tensor | None = None,
                   splits: int | None = None, layout: str = "bhsd",
                   out_layout: str | None = None) -> Tensor:
    """:func:`attention` through a chosen path instead of :func:`choose_path`'s.

    Args:
        path: ``"auto"`` or one of :data:`PATHS`.
        q, k, v, causal, key_lengths, attn_mask, scale, out, layout, out_layout: as for
            :func:`attention`.
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
    p, scale_value, out_shape = _check(q, k, v, key_lengths, attn_mask, causal, scale, layout,
                                       out_layout)
    ctx = q.context
    out = output("attention", ctx, out, out_shape, q.dtype, (q, k, v))
    if p.q_len == 0 or p.batch == 0 or p.q_heads == 0:
        return out
    if p.k_len == 0:
        return fill(out, 0.0)  # no key at all: every row is fully masked

    made: list[Tensor] = []
    try:
        flags = FLAG_CAUSAL if causal else 0
        lengths = None
        if key_lengths is not None:
            lengths, new = _key_lengths_tensor(key_lengths, p, ctx)
            flags |= FLAG_KEY_LENGTHS
            if new:
                made.append(lengths)
        mask, strides = None, (0, 0, 0, 0)
        if attn_mask is not None:
            mask, strides, new = _mask_strides(attn_mask, p, ctx)
            flags |= FLAG_MASK
            if new:
                made.append(mask)
        wide = all(t.allocation is not None and t.allocation.offset % 16 == 0
                   for t in (q, k, v, out))
        plan = planner.attention_plan(ctx.caps, p, path=path, scale=scale_value, flags=flags,
                                      mask_strides=strides, splits=splits, wide=wide)
        ctx.run(plan, (q, k, v, out, lengths, mask))
    finally:
        for t in made:
            t.release()
    return out


def attention(q: Tensor, k: Tensor, v: Tensor, *, causal: bool = False, key_lengths: Any = None,
              attn_mask: Tensor | None = None, scale: float | None = None,
              out: Tensor | None = None, layout: str = "bhsd",
              out_layout: str | None = None) -> Tensor:
    """Fused ``softmax(q @ k^T * scale + attn_mask) @ v`` over ``[batch, heads, seq, head_dim]``
    or ``[batch, seq, heads, head_dim]`` operands.

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
        out: optional tensor to write: the output's shape (below) and q's dtype.
        layout: ``"bhsd"`` (the shapes above) or ``"bshd"``: q, k and v are
            ``[batch, seq, heads, head_dim]`` (flash-attn's convention), read in place. The
            mask keeps its ``[batch, q_heads, q_len, k_len]`` meaning in both.
        out_layout: the output's layout (default: ``layout``); a graph whose output feeds a
            permute to ``[batch, seq, heads, head_dim]`` writes that directly.

    Returns:
        ``out`` (or a new tensor) of q's dtype, ``[batch, q_heads, q_len, head_dim]`` or, for
        ``out_layout="bshd"``, ``[batch, q_len, q_heads, head_dim]``. Rows whose keys are all
        masked are 0.

    Raises:
        VkumdTypeError: non-tensor operands, dtypes other than float32/float16 or that differ,
            an int32-less key_lengths tensor, a non-number scale, a non-bool causal.
        VkumdValueError: not 4-D, batch or head_dim mismatch, heads not divisible, head_dim not
            a multiple of 4 in [4, 256], bad key_lengths length or values, a mask that does
            not broadcast, a bad out=, tensors from other contexts, a layout or out_layout
            not in :data:`LAYOUTS`.
        CapabilityMissing: float16 on a device without 16-bit storage.
    """
    return attention_path("auto", q, k, v, causal=causal, key_lengths=key_lengths,
                          attn_mask=attn_mask, scale=scale, out=out, layout=layout,
                          out_layout=out_layout)


def _attention_heads(heads: Any, kv_heads: Any) -> None:
    """Refuse query heads that are not a whole multiple of the key/value heads."""
    hint = " (grouped-query attention needs kv_heads to divide q_heads)"
    if isinstance(kv_heads, int) and isinstance(heads, int):
        if kv_heads < 1 or heads % kv_heads:
            raise VkumdValueError(f"attention: {heads} query heads are not a multiple of "
                                  f"{kv_heads} key/value heads{hint}")
    elif heads != kv_heads and divide_exact(heads, kv_heads) is None:
        raise VkumdValueError(f"attention: {heads} query heads are not a known multiple of "
                              f"{kv_heads} key/value heads{hint}")


def _attention_optional(key_lengths: TensorType | None, mask: TensorType | None,
                        scores: Shape, dims: DimTable) -> None:
    """Check the key lengths (int32 ``[batch]``) and the mask (additive, broadcasting to the
    ``[batch, heads, q_len, k_len]`` scores)."""
    batch = scores[0]
    if key_lengths is not None:
        if key_lengths.dtype is not dtypes.int32:
            raise VkumdTypeError(f"attention: key_lengths must be int32 [{batch}], got "
                                 f"{key_lengths}")
        if key_lengths.ndim != 1 or not dims.same(key_lengths.shape[0], batch):
            raise VkumdValueError(f"attention: key_lengths has shape "
                                  f"{format_shape(key_lengths.shape)}; expected [{batch}], "
                                  "one length per batch entry")
    if mask is None:
        return
    if mask.dtype.name not in ATTENTION_DTYPES:
        raise VkumdTypeError(f"attention: attn_mask must be {' or '.join(ATTENTION_DTYPES)} "
                             f"(additive), got {mask.dtype.name}; turn a boolean mask into "
                             "0 / -inf")
    try:
        fits = dims.same_shape(dims.broadcast(mask.shape, scores), scores)
    except VkumdValueError:
        fits = False
    if not fits:
        raise VkumdValueError(f"attention: attn_mask of shape {format_shape(mask.shape)} does "
                              "not broadcast to the scores' [batch, heads, q_len, k_len] = "
                              f"{format_shape(scores)}")


def _attention_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    q, k, v, key_lengths, mask = ins
    assert q is not None and k is not None and v is not None
    layout, out_layout = attention_layouts(attrs)
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.ndim != 4:
            raise VkumdValueError(f"attention: {name} must be 4-D {LAYOUT_AXES[layout]} "
                                  f"(layout={layout!r}), got {format_shape(t.shape)}")
    if q.dtype.name not in ATTENTION_DTYPES:
        raise VkumdTypeError(f"attention: q is {q.dtype.name}; attention takes "
                             f"{' or '.join(ATTENTION_DTYPES)} (cast with vkumd.ops.cast)")
    same_dtype("attention", ("q", q), ("k", k), ("v", v))
    flag("attention", attrs["causal"], "causal")
    if attrs["scale"] is not None:
        real("attention", attrs["scale"], "scale")
    if not dims.same_shape(k.shape, v.shape):
        raise VkumdValueError(f"attention: k and v must have the same shape, got "
                              f"{format_shape(k.shape)} and {format_shape(v.shape)}")
    q_shape, k_shape = swap_heads_seq(q.shape, layout), swap_heads_seq(k.shape, layout)
    batch, q_heads, q_len, head_dim = q_shape
    if not dims.same(k.shape[0], batch):
        raise VkumdValueError(f"attention: q has batch {batch} and k/v have {k.shape[0]}")
    if not dims.same(k_shape[3], head_dim):
        raise VkumdValueError(f"attention: q has head_dim {head_dim} and k/v have "
                              f"{k_shape[3]}; they must match")
    _attention_heads(dims.resolve(q_heads), dims.resolve(k_shape[1]))
    _attention_optional(key_lengths, mask, (batch, q_heads, q_len, k_shape[2]), dims)
    return [TensorType(swap_heads_seq(q_shape, out_layout), q.dtype)]


def _attention_reference(args: list[Any], attrs: dict[str, Any], shapes: Any
                         ) -> list[np.ndarray]:
    q, k, v, lengths, mask = args
    layout, out_layout = attention_layouts(attrs)
    if layout == "bshd":
        q, k, v = (np.swapaxes(x, 1, 2) for x in (q, k, v))
    _, heads, q_len, dim = q.shape
    group = heads // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(dim) if attrs["scale"] is None else float(attrs["scale"])
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    k_len = k.shape[2]
    cols = np.arange(k_len)
    if attrs["causal"]:
        rows = np.arange(q_len)[:, None]
        scores = np.where(cols[None, :] > rows + (k_len - q_len), -np.inf, scores)
    if lengths is not None:
        limit = np.clip(lengths, 0, k_len)[:, None, None, None]
        scores = np.where(cols[None, None, None, :] >= limit, -np.inf, scores)
    if mask is not None:
        scores = scores + mask
    out = np.matmul(softmax_rows(scores), v)
    return [np.ascontiguousarray(np.swapaxes(out, 1, 2)) if out_layout == "bshd" else out]


def _attention_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    q, k, v, key_lengths, mask = ins
    at = attrs_of(node)
    attention(q, k, v, causal=at["causal"], key_lengths=key_lengths, attn_mask=mask,
                  scale=at["scale"], out=outs[0], layout=at["layout"],
                  out_layout=at["out_layout"])


define("attention", ("q", "k", "v", "key_lengths?", "attn_mask?"),
       {"causal": False, "scale": None, "layout": "bhsd", "out_layout": None},
       rule=_attention_rule, reference=_attention_reference, lower=_attention_lower,
       eager=attention)
