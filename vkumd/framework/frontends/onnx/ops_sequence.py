"""Converters of ONNX's sequence-model state operators (opset 24 on): TensorScatter (a KV
cache update), CausalConvWithState (Mamba-style short convolution with carried state) and
LinearAttention (a recurrent state updated per token).

Both are compositions of ops that exist:

- TensorScatter is ``kv_write`` (which writes ``update[b, s]`` at ``write_indices[b] + s``
  and drops a token past the cache), with the sequence axis moved to 1 and the other
  dimensions merged into kv_write's ``[slots, max_len, heads, head_dim]``. Circular mode is
  two writes: at ``w`` and at ``w - max_len``; each drops the tokens the other writes.
  The cache is updated in place where it is already in kv_write's layout (the ONNX runner
  uploads its inputs on every call, so no caller array changes).
- CausalConvWithState is ``concat(past_state or zeros, input)`` along time, a depthwise
  ``conv2d`` (height 1, groups = channels, no padding), an optional SiLU, and the last
  ``k - 1`` columns of the padded input as the present state.
- LinearAttention is its recurrence unrolled over the tokens (up to
  :data:`MAX_UNROLLED_TOKENS`): matmuls and elementwise ops on ``[batch * kv_heads, ...]``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import onnx

from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value


def _as_int_sizes(shape: tuple[Any, ...], what: str) -> tuple[int, ...]:
    if not all(isinstance(d, int) for d in shape):
        raise Unsupported(f"{what} of symbolic shape {shape} (its sizes must be known at "
                          "import time)")
    return tuple(int(d) for d in shape)


@converter("TensorScatter", attrs=("axis", "mode"))
def tensor_scatter(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                   ) -> list[Bound | None]:
    """``present = past_cache`` with ``update`` written along ``axis`` at each batch entry's
    ``write_indices`` (linear, or circular modulo the cache's length)."""
    cache, update = st.value(node.input[0]), st.value(node.input[1])
    shape = _as_int_sizes(tuple(cache.shape), "TensorScatter's past_cache")
    new_shape = _as_int_sizes(tuple(update.shape), "TensorScatter's update")
    ndim = len(shape)
    axis = int(attrs.get("axis", -2))
    if not -ndim <= axis < ndim or axis % ndim == 0:
        raise Unsupported(f"axis {axis} for a {ndim}-d cache (it must be past the batch "
                          "axis 0)")
    axis %= ndim
    mode = attrs.get("mode", "linear")
    if mode not in ("linear", "circular"):
        raise Unsupported(f"mode {mode!r} (ONNX's modes are 'linear' and 'circular')")
    off_axis = [i for i in range(ndim) if i != axis]
    if (len(new_shape) != ndim or any(shape[i] != new_shape[i] for i in off_axis)
            or new_shape[axis] > shape[axis]):
        raise Unsupported(f"update of shape {new_shape} for a cache of shape {shape} (they "
                          f"must agree off axis {axis}, and the update be no longer)")
    batch = shape[0]
    if st.present(node, 2):
        positions = st.value(node.input[2])
        if positions.dtype.name != "int32":
            positions = st.b.cast(positions, "int32")
    else:
        positions = st.constant(np.zeros(batch, np.int32), "int32")
    # kv_write's layout: [batch, seq, heads, head_dim] with seq the scatter axis.
    order = [0, axis, *[d for d in range(1, ndim) if d != axis]]
    heads = math.prod(shape[d] for d in range(1, axis))
    inner = math.prod(shape[d] for d in range(axis + 1, ndim))

    def to_slots(v: Value, length: int) -> Value:
        moved = v if order == list(range(ndim)) else st.b.permute(v, order)
        return st.b.reshape(moved, (batch, length, heads, inner))

    target = to_slots(cache, shape[axis])
    new = to_slots(update, new_shape[axis])
    out = st.b.op("kv_write", target, new, positions)
    if mode == "circular":
        wrapped = st.b.sub(positions, st.constant(np.int32(shape[axis]), "int32"))
        out = st.b.op("kv_write", out, new, wrapped)
    moved_shape = tuple(shape[d] for d in order)
    out = st.b.reshape(out, moved_shape)
    if order != list(range(ndim)):
        out = st.b.permute(out, [order.index(d) for d in range(ndim)])
    return [out]


@converter("CausalConvWithState", attrs=("activation",))
def causal_conv_with_state(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                           ) -> list[Bound | None]:
    """A depthwise causal 1-d convolution over ``[batch, channels, length]`` continuing from
    ``past_state`` (zeros when absent), with the state for the next call."""
    x, w = st.value(node.input[0]), st.value(node.input[1])
    activation = attrs.get("activation", "none")
    if activation not in ("none", "silu", "swish"):
        raise Unsupported(f"activation {activation!r} (ONNX's are 'none', 'silu', 'swish')")
    if len(x.shape) != 3 or len(w.shape) != 3 or w.shape[1] != 1:
        raise Unsupported(f"input {tuple(x.shape)} and weight {tuple(w.shape)} (expected "
                          "[batch, channels, length] and [channels, 1, k])")
    batch, channels, _ = x.shape
    k = w.shape[2]
    if not isinstance(k, int) or not isinstance(channels, int):
        raise Unsupported("a symbolic channel count or kernel size")
    bias = st.value(node.input[2]) if st.present(node, 2) else None
    if st.present(node, 3):
        past = st.value(node.input[3])
    elif isinstance(batch, int):
        past = st.constant(np.zeros((batch, channels, k - 1), np.float32), x.dtype.name)
    else:
        raise Unsupported("no past_state for a symbolic batch (give zeros)")
    padded = x if k == 1 else st.b.concat([past, x], axis=2)
    y = st.b.conv2d(st.b.reshape(padded, (batch, channels, 1, padded.shape[2])),
                    st.b.reshape(w, (channels, 1, 1, k)), bias, groups=channels)
    y = st.b.reshape(y, x.shape)
    if activation != "none":
        y = st.b.op("silu", y)
    length = padded.shape[2]
    if k == 1:
        present = st.b.slice(padded, 2, 0, 0)
    else:
        present = st.b.slice(padded, 2, length - (k - 1), length)
    return [y, present]


# LinearAttention's recurrence is unrolled, a few nodes per token: beyond this many tokens
# the graph would be larger than a kernel of its own is worth writing (not yet done).
MAX_UNROLLED_TOKENS = 256
_RULES = ("linear", "gated", "delta", "gated_delta")


def _heads_first(st: State, x: Value, batch: int, steps: int, heads: int, width: int
                 ) -> Value:
    """``[batch, steps, heads * width]`` as ``[batch * heads, steps, width]``."""
    x = st.b.permute(st.b.reshape(x, (batch, steps, heads, width)), (0, 2, 1, 3))
    return st.b.reshape(x, (batch * heads, steps, width))


@converter("LinearAttention", attrs=("chunk_size", "kv_num_heads", "q_num_heads", "scale",
                                     "update_rule"))
def linear_attention(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                     ) -> list[Bound | None]:
    """The linear-attention recurrence (``linear``, ``gated``, ``delta``, ``gated_delta``)
    unrolled over the tokens, in float32: per token a decay ``mul``, the delta rule's
    ``matmul`` read and correction, the state's outer-product ``mul``/``add``, and one
    ``matmul`` read by the (grouped) queries. ``chunk_size`` is a hint with no effect."""
    rule = attrs.get("update_rule", "gated_delta")
    if rule not in _RULES:
        raise Unsupported(f"update_rule {rule!r} (ONNX's are {', '.join(_RULES)})")
    if "q_num_heads" not in attrs or "kv_num_heads" not in attrs:
        raise Unsupported("q_num_heads and kv_num_heads are required")
    q_heads, kv_heads = int(attrs["q_num_heads"]), int(attrs["kv_num_heads"])
    if q_heads <= 0 or kv_heads <= 0 or q_heads % kv_heads:
        raise Unsupported(f"q_num_heads {q_heads} is not a multiple of kv_num_heads {kv_heads}")
    gating, delta = rule in ("gated", "gated_delta"), rule in ("delta", "gated_delta")
    if gating != st.present(node, 4) or delta != st.present(node, 5):
        given = [name for i, name in ((4, "decay"), (5, "beta")) if st.present(node, i)]
        raise Unsupported(f"update_rule {rule!r} with inputs {given or 'none'} of decay and "
                          "beta (gated rules need decay, delta rules beta, and no others)")
    q, k, v = (st.value(node.input[i]) for i in range(3))
    shapes = [_as_int_sizes(tuple(t.shape), name) for t, name in
              ((q, "query"), (k, "key"), (v, "value"))]
    if any(len(s) != 3 for s in shapes) or q.dtype.name not in ("float32", "float16",
                                                                "bfloat16"):
        raise Unsupported(f"query, key, value of shapes {shapes} (float [batch, tokens, "
                          "heads * size] each)")
    batch, steps, _ = shapes[0]
    d_k, d_v = shapes[0][2] // q_heads, shapes[2][2] // kv_heads
    group, n = q_heads // kv_heads, batch * kv_heads
    if steps > MAX_UNROLLED_TOKENS:
        raise Unsupported(f"{steps} tokens at once (the recurrence is unrolled up to "
                          f"{MAX_UNROLLED_TOKENS}; feed longer inputs in pieces with the state)")
    out_dtype = q.dtype.name

    def f32(x: Value) -> Value:
        return x if x.dtype.name == "float32" else st.b.cast(x, "float32")

    scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(d_k)
    qs = _heads_first(st, st.b.scale(f32(q), scale), batch, steps, kv_heads, group * d_k)
    ks = _heads_first(st, f32(k), batch, steps, kv_heads, d_k)
    vs = _heads_first(st, f32(v), batch, steps, kv_heads, d_v)
    if st.present(node, 3):
        past = st.value(node.input[3])
        state_dtype = past.dtype.name
        state = st.b.reshape(f32(past), (n, d_k, d_v))
    else:
        state_dtype = out_dtype
        state = st.constant(np.zeros((n, d_k, d_v), np.float32), "float32")
    gates = betas = None
    if gating:
        decay = st.value(node.input[4])
        width = decay.shape[2] // kv_heads
        if width not in (1, d_k) or decay.shape[2] % kv_heads:
            raise Unsupported(f"decay of shape {tuple(decay.shape)} (last dimension "
                              f"kv_num_heads or kv_num_heads * d_k)")
        gates = _heads_first(st, st.b.exp(f32(decay)), batch, steps, kv_heads, width)
    if delta:
        beta = f32(st.value(node.input[5]))
        if beta.shape[2] == 1 and kv_heads > 1:
            beta = st.b.add(beta, st.constant(np.zeros(kv_heads, np.float32), "float32"))
        if beta.shape[2] != kv_heads:
            raise Unsupported(f"beta of shape {tuple(beta.shape)} (last dimension "
                              "kv_num_heads or 1)")
        betas = _heads_first(st, beta, batch, steps, kv_heads, 1)
    outs = []
    for t in range(steps):
        k_t = st.b.slice(ks, 1, t, t + 1)                                  # [n, 1, d_k]
        v_t = st.b.slice(vs, 1, t, t + 1)                                  # [n, 1, d_v]
        if gates is not None:
            g_t = st.b.slice(gates, 1, t, t + 1)
            state = st.b.mul(state, st.b.reshape(g_t, (n, g_t.shape[2], 1)))
        if betas is not None:
            read = st.b.matmul(k_t, state)                                 # [n, 1, d_v]
            v_t = st.b.mul(st.b.slice(betas, 1, t, t + 1), st.b.sub(v_t, read))
        state = st.b.add(state, st.b.mul(st.b.reshape(k_t, (n, d_k, 1)), v_t))
        q_t = st.b.reshape(st.b.slice(qs, 1, t, t + 1), (n, group, d_k))
        outs.append(st.b.reshape(st.b.matmul(q_t, state), (n, 1, group * d_v)))
    y = outs[0] if steps == 1 else st.b.concat(outs, axis=1)              # [n, T, g * d_v]
    y = st.b.permute(st.b.reshape(y, (batch, kv_heads, steps, group * d_v)), (0, 2, 1, 3))
    y = st.b.reshape(y, (batch, steps, q_heads * d_v))
    present = st.b.reshape(state, (batch, kv_heads, d_k, d_v))
    if out_dtype != "float32":
        y = st.b.cast(y, out_dtype)
    if state_dtype != "float32":
        present = st.b.cast(present, state_dtype)
    return [y, present]
