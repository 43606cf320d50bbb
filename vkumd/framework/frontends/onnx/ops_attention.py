"""The converter of ONNX's ``Attention`` (opsets 23 to 25) onto vkumd's attention ops.

Two routes compute ONNX's function:

- the fused ``attention`` op (flash style, no score buffer) when only ``Y`` and the
  present key/value are asked for, there is no softcap, the value head size equals the
  key's, the head size suits the kernel (a multiple of 4 up to 256) and the dtype is
  float32 or float16;
- otherwise a composition of ops that exist: ``matmul`` (``q @ k^T`` scaled), an optional
  softcap (``c * tanh(s / c)``), ``softmax`` with the additive bias as its mask, ``matmul``
  with ``v``. Grouped-query attention folds each key/value head's query heads into its rows
  (``[b, kv, g * q, d]``), so no key or value is repeated. This route also gives the
  ``qk_matmul_output`` of every mode.

ONNX's masks become one additive bias broadcasting to ``[batch, heads, q_len, kv_len]``: a
boolean ``attn_mask`` is ``where(mask, 0, -inf)``, a mask shorter than the keys is padded
with ``-inf``, ``is_causal`` and the sliding window (opset 25) are a constant ``0 / -inf``
matrix aligned at the cache's offset (``past_key``'s length: ONNX's query ``i`` sees keys
``j <= i + past``, top-left without a cache, which is not the fused kernel's bottom-right
``causal``), and ``nonpad_kv_seqlen`` masks each batch entry's keys past its length (with
``is_causal`` or a window, their frontier is aligned at that entry's ``length - q_len``, a
comparison with the run-time lengths). A row
whose bias is all ``-inf`` gives zeros, as ONNX's guard says (both kernels write such a row
as zeros). The softmax runs in float32 whatever ``softmax_precision`` asks.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from vkumd.compiler.kernels.limits import (
    ATTENTION_DTYPES,
    ATTENTION_HEAD_DIM_MULTIPLE,
    ATTENTION_MAX_HEAD_DIM,
)
from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value

_ATTRS = ("is_causal", "kv_num_heads", "q_num_heads", "qk_matmul_output_mode", "scale",
          "softcap", "softmax_precision", "left_window_size", "right_window_size")
_FLOATS = ("float32", "float16", "bfloat16")
_MODES = (0, 1, 2, 3)


def _static(value: Any, what: str) -> int:
    """A size known at import time, else Unsupported."""
    if not isinstance(value, int):
        raise Unsupported(f"Attention with a symbolic {what} ({value}); the masks and head "
                          "split need it known at import time")
    return value


def _heads_first(st: State, x: Value, heads: int, what: str) -> Value:
    """A 3-D ``[batch, seq, heads * size]`` input as ``[batch, heads, seq, size]``."""
    hidden = _static(x.shape[2], f"{what} hidden size")
    if heads < 1 or hidden % heads:
        raise Unsupported(f"Attention: {what}'s hidden size {hidden} is not a multiple of "
                          f"its {heads} heads")
    split = st.b.reshape(x, (x.shape[0], x.shape[1], heads, hidden // heads))
    return st.b.permute(split, [0, 2, 1, 3])


def _qkv(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
         ) -> tuple[Value, Value, Value, bool]:
    """Q, K, V as ``[batch, heads, seq, size]``, and whether the inputs were 3-D."""
    q, k, v = (st.value(node.input[i]) for i in range(3))
    ranks = {len(q.shape), len(k.shape), len(v.shape)}
    if ranks not in ({3}, {4}):
        raise Unsupported(f"Attention of Q, K, V of ranks {len(q.shape)}, {len(k.shape)}, "
                          f"{len(v.shape)} (all 3-D or all 4-D)")
    if q.dtype.name not in _FLOATS or k.dtype is not q.dtype or v.dtype is not q.dtype:
        raise Unsupported(f"Attention of {q.dtype.name}, {k.dtype.name}, {v.dtype.name} "
                          f"(Q, K and V of one float type: {', '.join(_FLOATS)})")
    if ranks == {4}:
        for name, heads in (("q_num_heads", q.shape[1]), ("kv_num_heads", k.shape[1])):
            if name in attrs and attrs[name] != heads:
                raise Unsupported(f"Attention: {name}={attrs[name]} but the 4-D input has "
                                  f"{heads} heads")
        return q, k, v, False
    if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
        raise Unsupported("Attention of 3-D inputs without q_num_heads and kv_num_heads")
    kv_heads = int(attrs["kv_num_heads"])
    return (_heads_first(st, q, int(attrs["q_num_heads"]), "Q"),
            _heads_first(st, k, kv_heads, "K"), _heads_first(st, v, kv_heads, "V"), True)


def _with_past(st: State, node: onnx.NodeProto, k: Value, v: Value
               ) -> tuple[Value, Value, Any]:
    """K and V after the past key/value (the present ones), and the past's length."""
    has_key, has_value = st.present(node, 4), st.present(node, 5)
    if has_key != has_value:
        raise Unsupported("Attention with only one of past_key and past_value")
    if not has_key:
        return k, v, 0
    past_k, past_v = st.value(node.input[4]), st.value(node.input[5])
    for name, past, now in (("past_key", past_k, k), ("past_value", past_v, v)):
        if len(past.shape) != 4 or past.dtype is not now.dtype:
            raise Unsupported(f"Attention: {name} must be 4-D [batch, kv_heads, past, size] "
                              f"of {now.dtype.name}, got {past.dtype.name} {past.shape}")
    return (st.b.concat([past_k, k], axis=2), st.b.concat([past_v, v], axis=2),
            past_k.shape[2])


def _window(q_len: int, k_len: int, offset: int, causal: bool, left: int, right: int
            ) -> np.ndarray:
    """The ``[q_len, k_len]`` 0/-inf bias of ``is_causal`` and the sliding window, query
    ``i`` at absolute position ``i + offset``."""
    diff = np.arange(q_len)[:, None] + offset - np.arange(k_len)[None, :]
    allowed = np.ones((q_len, k_len), dtype=bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return np.where(allowed, 0.0, -np.inf)


def _user_mask(st: State, name: str, dtype: str, k_len: Any) -> Value:
    """``attn_mask`` as an additive bias of ``dtype`` over ``k_len`` keys."""
    mask = st.value(name)
    if mask.dtype.name == "bool":  # True attends
        mask = st.b.where(mask, st.constant(np.zeros((), np.float32), dtype),
                          st.constant(np.full((), -np.inf, np.float32), dtype))
    elif mask.dtype.name not in _FLOATS:
        raise Unsupported(f"Attention: attn_mask of {mask.dtype.name} (bool or float)")
    elif mask.dtype.name != dtype:
        mask = st.b.cast(mask, dtype)
    if not mask.shape:
        raise Unsupported("Attention: a 0-d attn_mask")
    if mask.shape[-1] == k_len:
        return mask
    width = _static(mask.shape[-1], "attn_mask length")
    k_len = _static(k_len, "key length")
    if width > k_len:
        raise Unsupported(f"Attention: attn_mask covers {width} keys, more than the "
                          f"{k_len} keys (past and new)")
    if width < k_len:  # ONNX pads a short mask with -inf (False)
        lead = tuple(_static(d, "attn_mask shape") for d in mask.shape[:-1])
        pad = st.constant(np.full((*lead, k_len - width), -np.inf, np.float32), dtype)
        mask = st.b.concat([mask, pad], axis=len(mask.shape) - 1)
    return mask


def _length_mask(st: State, name: str, q: Value, k_len: Any, causal: bool, left: int,
                 right: int) -> Value:
    """``nonpad_kv_seqlen`` as a ``[batch, 1, q_len, k_len]`` 0/-inf bias: keys past a batch
    entry's length ``n`` are masked, and ``is_causal`` and the window are aligned at that
    entry's offset ``n - q_len``. Query ``i`` and key ``j`` are ``n - (j - i + q_len)``
    apart, so each frontier is one comparison of the constant ``j - i + q_len`` with ``n``,
    in float (lengths are far below 2**24)."""
    dtype = q.dtype.name
    lengths = st.value(name)
    if len(lengths.shape) != 1:
        raise Unsupported(f"Attention: nonpad_kv_seqlen of shape {lengths.shape} (want "
                          "[batch])")
    q_len, k_len = _static(q.shape[2], "query length"), _static(k_len, "key length")
    n = st.b.reshape(st.b.cast(lengths, "float32"), (q.shape[0], 1, 1, 1))
    ahead = (np.arange(k_len)[None, :] - np.arange(q_len)[:, None] + q_len).astype(np.float32)
    tests = [st.b.lt(st.constant(np.arange(k_len, dtype=np.float32), "float32"), n)]
    if causal:
        tests.append(st.b.le(st.constant(ahead, "float32"), n))
    if left >= 0:
        tests.append(st.b.ge(st.constant(ahead + left, "float32"), n))
    if right >= 0:
        tests.append(st.b.le(st.constant(ahead - right, "float32"), n))
    bias: Value = st.constant(np.zeros((), np.float32), dtype)
    masked = st.constant(np.full((), -np.inf, np.float32), dtype)
    for allowed in tests:
        bias = st.b.where(allowed, bias, masked)
    return bias


def _bias(st: State, node: onnx.NodeProto, attrs: dict[str, Any], q: Value, k_len: Any,
          past: Any) -> Value | None:
    """The additive bias over the scores, or None where nothing is masked."""
    dtype = q.dtype.name
    nonpad = len(node.input) > 6 and node.input[6] != ""
    if nonpad and st.present(node, 4):
        raise Unsupported("Attention with both nonpad_kv_seqlen and a past key/value")
    causal = bool(attrs.get("is_causal", 0))
    left, right = int(attrs.get("left_window_size", -1)), int(attrs.get("right_window_size",
                                                                         -1))
    parts: list[Value] = []
    if st.present(node, 3):
        parts.append(_user_mask(st, node.input[3], dtype, k_len))
    if nonpad:
        parts.append(_length_mask(st, node.input[6], q, k_len, causal, left, right))
    elif causal or left >= 0 or right >= 0:
        window = _window(_static(q.shape[2], "query length"), _static(k_len, "key length"),
                         _static(past, "past length"), causal, left, right)
        parts.append(st.constant(window.astype(np.float32), dtype))
    if not parts:
        return None
    bias = parts[0]
    for part in parts[1:]:
        bias = st.b.add(bias, part)
    return bias


def _fused(q: Value, k: Value, v: Value, softcap: float, qk_wanted: bool) -> bool:
    """Whether the fused attention op computes this node."""
    size = k.shape[3]
    return (not qk_wanted and softcap <= 0 and q.dtype.name in ATTENTION_DTYPES
            and tuple(k.shape) == tuple(v.shape) and isinstance(size, int)
            and size % ATTENTION_HEAD_DIM_MULTIPLE == 0
            and ATTENTION_HEAD_DIM_MULTIPLE <= size <= ATTENTION_MAX_HEAD_DIM)


def _composed(st: State, q: Value, k: Value, v: Value, bias: Value | None, scale: float,
              softcap: float, mode: int) -> tuple[Value, Value]:
    """``(Y [b, h, q, dv], qk_matmul_output [b, h, q, k])`` from matmul, softmax and
    elementwise ops."""
    batch, heads, q_len, size = q.shape
    kv_heads, k_len, v_size = k.shape[1], k.shape[2], v.shape[3]
    group = heads // kv_heads
    rows = st.b.reshape(q, (batch, kv_heads, group * q_len, size))
    scores = st.b.matmul(rows, k, trans_b=True, alpha=scale)
    scores = st.b.reshape(scores, (batch, heads, q_len, k_len))
    if softcap > 0:
        scores = st.b.scale(st.b.tanh(st.b.scale(scores, 1.0 / softcap)), softcap)
    probs = st.b.softmax(scores, mask=bias)
    grouped = st.b.reshape(probs, (batch, kv_heads, group * q_len, k_len))
    y = st.b.reshape(st.b.matmul(grouped, v), (batch, heads, q_len, v_size))
    if mode == 3:
        return y, probs
    if mode == 2 and bias is not None:
        return y, st.b.add(scores, bias)
    return y, scores


@converter("Attention", attrs=_ATTRS)
def attention(st: State, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Bound | None]:
    """ONNX's Attention: Y, and the present key/value and qk_matmul_output when asked for.

    Raises:
        Unsupported: inputs of mixed ranks or types, 3-D inputs without head counts, query
            heads not a multiple of the key/value heads, symbolic sizes the masks need, an
            unknown ``qk_matmul_output_mode``, mode 0's output with a softcap (ONNX's text
            and reference disagree on it), ``nonpad_kv_seqlen`` with a past.
    """
    mode = int(attrs.get("qk_matmul_output_mode", 0))
    if mode not in _MODES:
        raise Unsupported(f"Attention: qk_matmul_output_mode={mode} (0 to 3)")
    q, k, v, three_d = _qkv(st, node, attrs)
    k, v, past = _with_past(st, node, k, v)
    heads, kv_heads = _static(q.shape[1], "head count"), _static(k.shape[1], "head count")
    if kv_heads < 1 or heads % kv_heads or v.shape[1] != k.shape[1]:
        raise Unsupported(f"Attention: {heads} query heads over {kv_heads} key and "
                          f"{v.shape[1]} value heads (grouped-query attention needs one "
                          "key/value head count dividing the query heads)")
    if "scale" in attrs:
        scale = float(attrs["scale"])
    else:
        scale = 1.0 / math.sqrt(_static(q.shape[3], "head size"))
    softcap = float(attrs.get("softcap", 0.0))
    bias = _bias(st, node, attrs, q, k.shape[2], past)
    qk_wanted = len(node.output) > 3 and node.output[3] != ""
    if qk_wanted and mode == 0 and softcap > 0:
        raise Unsupported("Attention: qk_matmul_output_mode=0 with a softcap: ONNX's text "
                          "(the product before the softcap) and its reference (after it) "
                          "disagree; ask for mode 1 (after the softcap) instead")
    qk: Value | None = None
    if _fused(q, k, v, softcap, qk_wanted):
        y = st.b.attention(q, k, v, attn_mask=bias, scale=scale,
                           out_layout="bshd" if three_d else "bhsd")
        if three_d:
            y = st.b.reshape(y, (y.shape[0], y.shape[1], heads * v.shape[3]))
    else:
        y, qk = _composed(st, q, k, v, bias, scale, softcap, mode)
        if three_d:
            y = st.b.reshape(st.b.permute(y, [0, 2, 1, 3]),
                             (y.shape[0], y.shape[2], heads * v.shape[3]))
    return [y, k, v, qk][:len(node.output)]
