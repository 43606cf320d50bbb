"""Converters of ONNX's sequence-model state operators (opset 24 on): TensorScatter (a KV
cache update) and CausalConvWithState (Mamba-style short convolution with carried state).

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
