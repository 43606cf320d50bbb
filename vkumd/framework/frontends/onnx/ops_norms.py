"""Converters of ONNX's transformer and image normalisations and of RotaryEmbedding, as
compositions of vkumd's row kernels and elementwise ops.

- ``RMSNormalization`` (opset 23): ``rms_norm`` over the axes from ``axis`` on, flattened
  into one row; a scale of the normalised shape is the kernel's weight, any other is
  multiplied after (broadcast).
- ``GroupNormalization`` (18, 21), ``InstanceNormalization`` and
  ``MeanVarianceNormalization``: ``layer_norm`` (no weight) over each group, channel or the
  given axes made one row, then the per-channel scale and bias as broadcast elementwise
  ops (which fuse into one kernel).
- ``RotaryEmbedding`` (opset 23): ONNX gives the cos/sin caches (not vkumd ``rope``'s
  theta), so the rotation is written out: the caches gathered by ``position_ids``
  (``embedding``), the halves (or the interleaved pairs, as a trailing axis of 2) rotated by
  ``mul``/``add``/``sub`` and concatenated, the part past ``rotary_embedding_dim`` passed
  through.
"""

from __future__ import annotations

from typing import Any

import onnx

from vkumd.framework.frontends.onnx.errors import Unsupported
from vkumd.framework.frontends.onnx.ops_linalg import _axis
from vkumd.framework.frontends.onnx.state import Bound, State, converter
from vkumd.framework.graph import Value, product

_FLOATS = ("float32", "float16", "bfloat16")


def _float_input(st: State, node: onnx.NodeProto, i: int, like: Value | None = None) -> Value:
    """Input ``i`` as a float value (of ``like``'s dtype when given)."""
    x = st.value(node.input[i])
    if x.dtype.name not in _FLOATS:
        raise Unsupported(f"{node.op_type} of {x.dtype.name} (float32, float16 or bfloat16)")
    if like is not None and x.dtype is not like.dtype:
        x = st.b.cast(x, like.dtype.name)
    return x


def _stash(node: onnx.NodeProto, attrs: dict[str, Any]) -> None:
    if attrs.get("stash_type", 1) != 1:
        raise Unsupported(f"{node.op_type} with stash_type={attrs['stash_type']} (vkumd's "
                          "norms compute in float32: only 1)")


def _grows(param: tuple[Any, ...], shape: tuple[Any, ...]) -> bool:
    """Whether broadcasting ``param`` against ``shape`` would change ``shape``."""
    if len(param) > len(shape):
        return True
    return any(p != 1 and p != s for p, s in zip(param[::-1], shape[::-1], strict=False))


@converter("RMSNormalization", attrs=("axis", "epsilon", "stash_type"))
def rms_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                      ) -> list[Bound | None]:
    """``x / sqrt(mean(x**2) + epsilon) * scale`` over the axes from ``axis`` on."""
    _stash(node, attrs)
    x = _float_input(st, node, 0)
    ndim = len(x.shape)
    if ndim == 0:
        raise Unsupported("RMSNormalization of a 0-d tensor")
    axis = _axis(attrs.get("axis", -1), ndim)
    eps = float(attrs.get("epsilon", 1e-5))
    scale = _float_input(st, node, 1, x)
    tail = tuple(x.shape[axis:])
    row = product(tail)
    flat = x if axis == ndim - 1 else st.b.reshape(x, (*x.shape[:axis], row))
    if tuple(scale.shape) == tail:
        weight = scale if len(tail) == 1 else st.b.reshape(scale, (row,))
        y = st.b.rms_norm(flat, weight, eps=eps)
        return [y if axis == ndim - 1 else st.b.reshape(y, x.shape)]
    if _grows(tuple(scale.shape), tuple(x.shape)):
        raise Unsupported(f"RMSNormalization: a scale of shape {scale.shape} does not "
                          f"broadcast to X's {x.shape}")
    y = st.b.rms_norm(flat, None, eps=eps)
    y = y if axis == ndim - 1 else st.b.reshape(y, x.shape)
    return [st.b.mul(y, scale)]


def _channels(st: State, node: onnx.NodeProto, x: Value, i: int, channels: Any) -> Value:
    """Input ``i``, a per-channel ``[C]`` vector, shaped ``[C, 1, ...]`` to broadcast over x's
    ``[N, C, ...]``."""
    p = _float_input(st, node, i, x)
    if tuple(p.shape) != (channels,):
        raise Unsupported(f"{node.op_type}: input {i} has shape {p.shape}; expected "
                          f"[{channels}] (one value per channel)")
    return st.b.reshape(p, (channels, *([1] * (len(x.shape) - 2))))


def _image(node: onnx.NodeProto, x: Value) -> None:
    if len(x.shape) < 2:
        raise Unsupported(f"{node.op_type} of a {len(x.shape)}-D tensor (at least [N, C])")


@converter("InstanceNormalization", attrs=("epsilon",))
def instance_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                           ) -> list[Bound | None]:
    """Each ``(n, c)`` plane normalised (biased variance), then ``* scale[c] + B[c]``."""
    x = _float_input(st, node, 0)
    _image(node, x)
    n, c = x.shape[0], x.shape[1]
    rows = st.b.reshape(x, (n, c, product(x.shape[2:])))
    y = st.b.reshape(st.b.layer_norm(rows, eps=float(attrs.get("epsilon", 1e-5))), x.shape)
    y = st.b.mul(y, _channels(st, node, x, 1, c))
    return [st.b.add(y, _channels(st, node, x, 2, c))]


@converter("GroupNormalization", attrs=("epsilon", "num_groups", "stash_type"))
def group_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                        ) -> list[Bound | None]:
    """Each group of ``C / num_groups`` channels normalised as one row, then the scale and
    bias: per channel from opset 21, per group before it (opset 18)."""
    _stash(node, attrs)
    x = _float_input(st, node, 0)
    _image(node, x)
    if "num_groups" not in attrs:
        raise Unsupported("GroupNormalization without num_groups")
    groups, (n, c) = int(attrs["num_groups"]), x.shape[:2]
    if not isinstance(c, int) or groups < 1 or c % groups:
        raise Unsupported(f"GroupNormalization: {c} channels in {groups} groups (the "
                          "groups must divide a known channel count)")
    eps = float(attrs.get("epsilon", 1e-5))
    rows = st.b.layer_norm(st.b.reshape(x, (n, groups, product(x.shape[1:]) // groups)),
                           eps=eps)
    if st.opset >= 21:
        y = st.b.reshape(rows, x.shape)
        y = st.b.mul(y, _channels(st, node, x, 1, c))
        return [st.b.add(y, _channels(st, node, x, 2, c))]
    scale, bias = (_float_input(st, node, i, x) for i in (1, 2))
    for p in (scale, bias):
        if tuple(p.shape) != (groups,):
            raise Unsupported(f"GroupNormalization (opset {st.opset}): scale and bias of "
                              f"shape {p.shape}; expected [{groups}], one per group")
    rows = st.b.add(st.b.mul(rows, st.b.reshape(scale, (groups, 1))),
                    st.b.reshape(bias, (groups, 1)))
    return [st.b.reshape(rows, x.shape)]


@converter("MeanVarianceNormalization", attrs=("axes",))
def mean_variance_normalization(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                                ) -> list[Bound | None]:
    """``(x - mean) / (sqrt(var) + 1e-9)`` over ``axes`` (default ``[0, 2, 3]``): the axes
    moved last and made one row for ``layer_norm``, whose ``sqrt(var + 1e-18)`` equals
    ONNX's denominator to float32 precision and keeps a constant row at 0, as ONNX's does."""
    x = _float_input(st, node, 0)
    ndim = len(x.shape)
    axes = sorted({_axis(a, ndim, "MeanVarianceNormalization axis")
                   for a in attrs.get("axes", [0, 2, 3])})
    if not axes:
        raise Unsupported("MeanVarianceNormalization over no axes")
    rest = [d for d in range(ndim) if d not in axes]
    order = rest + axes
    moved = x if order == list(range(ndim)) else st.b.permute(x, order)
    kept = [x.shape[d] for d in rest]
    rows = st.b.reshape(moved, (*kept, product([x.shape[d] for d in axes])))
    y = st.b.reshape(st.b.layer_norm(rows, eps=1e-18), [x.shape[d] for d in order])
    if order == list(range(ndim)):
        return [y]
    return [st.b.permute(y, [order.index(d) for d in range(ndim)])]


def _caches(st: State, node: onnx.NodeProto, x: Value, batch: Any, seq: Any, half: int
            ) -> tuple[Value, Value]:
    """The cos and sin of each token, ``[batch, seq, half]``: the caches gathered by
    ``position_ids`` when given, else the caches themselves."""
    cos, sin = _float_input(st, node, 1, x), _float_input(st, node, 2, x)
    if tuple(cos.shape) != tuple(sin.shape):
        raise Unsupported(f"RotaryEmbedding: cos_cache {cos.shape} and sin_cache "
                          f"{sin.shape} differ")
    if cos.shape[-1] != half:
        raise Unsupported(f"RotaryEmbedding: the caches' last dimension {cos.shape[-1]} is "
                          f"not rotary_embedding_dim / 2 = {half}")
    if st.present(node, 3):
        ids = st.value(node.input[3])
        if len(cos.shape) != 2 or len(ids.shape) != 2 or ids.dtype.name != "int32":
            raise Unsupported(f"RotaryEmbedding: position_ids {ids.shape} into caches "
                              f"{cos.shape} (want integer [batch, seq] into [max_pos, half])")
        return st.b.embedding(ids, cos), st.b.embedding(ids, sin)
    if tuple(cos.shape) != (batch, seq, half):
        raise Unsupported(f"RotaryEmbedding without position_ids: caches of shape "
                          f"{cos.shape}; expected [{batch}, {seq}, {half}]")
    return cos, sin


def _rotate(st: State, x1: Value, x2: Value, cos: Value, sin: Value) -> tuple[Value, Value]:
    """``(cos x1 - sin x2, sin x1 + cos x2)``."""
    real = st.b.sub(st.b.mul(cos, x1), st.b.mul(sin, x2))
    imag = st.b.add(st.b.mul(sin, x1), st.b.mul(cos, x2))
    return real, imag


@converter("RotaryEmbedding", attrs=("interleaved", "num_heads", "rotary_embedding_dim"))
def rotary_embedding(st: State, node: onnx.NodeProto, attrs: dict[str, Any]
                     ) -> list[Bound | None]:
    """Rotate the first ``rotary_embedding_dim`` features of each head by the caches'
    angles: as two halves, or as adjacent pairs with ``interleaved``; 4-D input is
    ``[batch, heads, seq, head]``, 3-D ``[batch, seq, heads * head]`` with ``num_heads``."""
    x = _float_input(st, node, 0)
    if len(x.shape) == 4:
        batch, heads, seq, size = x.shape
        heads_axis = 1
        x4 = x
    elif len(x.shape) == 3:
        heads = int(attrs.get("num_heads", 0))
        batch, seq, hidden = x.shape
        if heads < 1 or not isinstance(hidden, int) or hidden % heads:
            raise Unsupported(f"RotaryEmbedding of 3-D input {x.shape} with num_heads="
                              f"{heads} (a known hidden size that the heads divide)")
        size, heads_axis = hidden // heads, 2
        x4 = st.b.reshape(x, (batch, seq, heads, size))
    else:
        raise Unsupported(f"RotaryEmbedding of a {len(x.shape)}-D input (3-D or 4-D)")
    rot = int(attrs.get("rotary_embedding_dim", 0)) or size
    if not isinstance(size, int) or rot % 2 or not 0 < rot <= size:
        raise Unsupported(f"RotaryEmbedding: rotary_embedding_dim={rot} for heads of {size} "
                          "(an even size up to the head size)")
    half = rot // 2
    cos, sin = _caches(st, node, x, batch, seq, half)
    lead = (batch, 1, seq) if heads_axis == 1 else (batch, seq, 1)
    cos, sin = (st.b.reshape(c, (*lead, half)) for c in (cos, sin))
    x_rot = x4 if rot == size else st.b.slice(x4, 3, 0, rot)
    if attrs.get("interleaved", 0):
        pairs = st.b.reshape(x_rot, (*x4.shape[:3], half, 2))
        cos, sin = (st.b.reshape(c, (*lead, half, 1)) for c in (cos, sin))
        real, imag = _rotate(st, st.b.slice(pairs, 4, 0, 1), st.b.slice(pairs, 4, 1, 2),
                             cos, sin)
        rotated = st.b.reshape(st.b.concat([real, imag], axis=4), (*x4.shape[:3], rot))
    else:
        real, imag = _rotate(st, st.b.slice(x_rot, 3, 0, half), st.b.slice(x_rot, 3, half, rot),
                             cos, sin)
        rotated = st.b.concat([real, imag], axis=3)
    y = rotated if rot == size else st.b.concat([rotated, st.b.slice(x4, 3, rot, size)], 3)
    return [y if y.shape == x.shape else st.b.reshape(y, x.shape)]

