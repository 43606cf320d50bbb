"""Linear algebra: matmul (batched, with a fused bias, activation, alpha and residual
epilogue) and attention (fused softmax(q k^T * scale + mask) v, grouped-query heads, causal
and per-sequence key lengths, ``[batch, heads, seq, head_dim]`` or ``[batch, seq, heads,
head_dim]`` layouts)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from vkumd.compiler.kernels.limits import ATTENTION_DTYPES, GEMM_DTYPES
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.execute.arena import view
from vkumd.framework.graph.attention_layout import (
    LAYOUT_AXES,
    attention_layouts,
    swap_heads_seq,
)
from vkumd.framework.graph.dims import Shape, divide_exact, format_shape, product
from vkumd.framework.graph.ir import Node
from vkumd.framework.graph.operands import Types, flag, real, same_dtype
from vkumd.framework.graph.reference import ACTIVATIONS, softmax_rows
from vkumd.framework.graph.registry import OPS, TensorType, define
from vkumd.framework.graph.symbols import DimTable
from vkumd.framework.ops.attention import attention
from vkumd.framework.ops.matmul import matmul
from vkumd.framework.opset.common import attrs_of
from vkumd.framework.tensor import Tensor

MATMUL_DTYPES = GEMM_DTYPES


def epilogue_activations() -> tuple[str | None, ...]:
    """The activations a matmul's epilogue applies: None and every op declared one."""
    return (None, *(name for name, op in OPS.items() if op.epilogue))


def _matmul_batch(a: Shape, b: Shape, dims: DimTable) -> Shape:
    # As vkumd's matmul: a 2-D (or single-entry) side is shared by the other side's batch;
    # otherwise the batch shapes must be equal (no general broadcasting).
    if not b or (product(b) == 1 and len(b) <= len(a)):
        return a
    if not a or (product(a) == 1 and len(a) <= len(b)):
        return b
    if not dims.same_shape(a, b):
        raise VkumdValueError(f"matmul: batch dimensions {format_shape(a)} and "
                              f"{format_shape(b)} differ; use equal batch shapes or a 2-D "
                              "operand shared by the batch")
    return a


def _matmul_dtype(a: TensorType, b: TensorType, bias: TensorType | None,
                  residual: TensorType | None) -> dtypes.DType:
    """The operands' one dtype, refusing ones that differ or that GEMM does not take."""
    dt = a.dtype
    if b.dtype is not dt:
        raise VkumdTypeError(f"matmul: operands must share a dtype, got a {dt.name}, b "
                             f"{b.dtype.name}; cast one so both have the same dtype")
    if dt.name not in MATMUL_DTYPES:
        raise VkumdTypeError(f"matmul: {dt.name} is not supported; matmul takes "
                             f"{', '.join(MATMUL_DTYPES)} (int8 products are int32)")
    for name, t in (("bias", bias), ("residual", residual)):
        if t is not None and t.dtype is not dt:
            raise VkumdTypeError(f"matmul: {name} is {t.dtype.name}; it must be {dt.name} "
                                 "like a and b")
    return dt


def _matmul_rule(ins: Types, attrs: dict[str, Any], dims: DimTable) -> list[TensorType]:
    a, b, bias, residual = ins
    assert a is not None and b is not None
    dt = _matmul_dtype(a, b, bias, residual)
    activations = epilogue_activations()
    if attrs["activation"] not in activations:
        raise VkumdValueError(f"matmul: activation={attrs['activation']!r} is unknown; use one "
                              f"of {', '.join(repr(x) for x in activations)}")
    alpha = real("matmul", attrs["alpha"], "alpha")
    trans_a = flag("matmul", attrs["trans_a"], "trans_a")
    trans_b = flag("matmul", attrs["trans_b"], "trans_b")
    if a.ndim < 2 or b.ndim < 2:
        raise VkumdValueError(f"matmul: a and b need at least 2 dimensions, got "
                              f"{format_shape(a.shape)} and {format_shape(b.shape)}; reshape "
                              "vectors to [1, K] or [K, 1]")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if not dims.same(k, k2):
        raise VkumdValueError(f"matmul: inner dimensions differ: op(a) is {m} x {k} and op(b) "
                              f"is {k2} x {n} (a {format_shape(a.shape)}"
                              f"{' transposed' if trans_a else ''}, b {format_shape(b.shape)}"
                              f"{' transposed' if trans_b else ''})")
    out = (*_matmul_batch(a.shape[:-2], b.shape[:-2], dims), m, n)
    if dt is dtypes.int8:
        if (bias is not None or residual is not None or attrs["activation"] is not None
                or alpha != 1.0):
            raise VkumdValueError("matmul: int8 inputs give the exact int32 product only; "
                                  "bias, activation, residual and alpha need float inputs")
        return [TensorType(out, dtypes.int32)]
    if bias is not None and (bias.ndim != 1 or not dims.same(bias.shape[0], n)):
        raise VkumdValueError(f"matmul: bias has shape {format_shape(bias.shape)}; it must be "
                              f"[{n}], one value per output column")
    if residual is not None and not (
            dims.same_shape(residual.shape, out)
            or (len(out) > 2 and dims.same_shape(residual.shape, (m, n)))):
        raise VkumdValueError(f"matmul: residual has shape {format_shape(residual.shape)}; it "
                              f"must be the output's {format_shape(out)} or [{m}, {n}]")
    return [TensorType(out, dt)]


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


def _matmul_reference(args: list[Any], attrs: dict[str, Any], shapes: Any) -> list[np.ndarray]:
    a, b, bias, residual = args
    if attrs["trans_a"]:
        a = np.swapaxes(a, -1, -2)
    if attrs["trans_b"]:
        b = np.swapaxes(b, -1, -2)
    y = np.matmul(a, b) * float(attrs["alpha"])
    if bias is not None:
        y = y + bias
    y = ACTIVATIONS[attrs["activation"]](y)
    if residual is not None:
        y = y + residual
    return [np.broadcast_to(y, shapes[0]).copy()]


def _rows(a: Tensor, b: Tensor, residual: Tensor | None, out: Tensor, trans_a: bool) -> bool:
    """Whether ``a``'s batch can join its rows: a batched ``a`` (not transposed) times one
    2-D matrix shared by the batch is a single GEMM of ``batch * M`` rows."""
    return (a.ndim > 2 and b.ndim == 2 and not trans_a
            and (residual is None or residual.shape == out.shape))


def _matmul_lower(node: Node, ins: list[Any], outs: list[Tensor]) -> None:
    a, b, bias, residual = ins
    at = attrs_of(node)
    out = outs[0]
    if _rows(a, b, residual, out, at["trans_a"]):
        # One GEMM, not batch entries of M rows each: short entries leave row tiles part
        # empty (batch entries measured 1.5x slower for short sentences on lavapipe).
        a = view(a, (a.size // a.shape[-1], a.shape[-1]))
        out = view(out, (out.size // out.shape[-1], out.shape[-1]))
        if residual is not None:
            residual = view(residual, out.shape)
    matmul(a, b, bias=bias, activation=at["activation"], residual=residual,
               alpha=at["alpha"], trans_a=at["trans_a"], trans_b=at["trans_b"], out=out)


define("matmul", ("a", "b", "bias?", "residual?"),
       {"trans_a": False, "trans_b": False, "activation": None, "alpha": 1.0},
       inplace=("residual",), rule=_matmul_rule, reference=_matmul_reference,
       lower=_matmul_lower, eager=matmul)


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
