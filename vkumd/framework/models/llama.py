"""A Llama-family decoder, written once on the tensor surface (:mod:`vkumd.ops`).

:func:`forward` is the whole model. As BERT's forward (:mod:`vkumd.framework.models.bert`)
it has no Python control flow on device values, so it runs eagerly on device tensors (the
decode step, captured with ``ctx.capture()`` and replayed) and traced on
:class:`~vkumd.framework.graph.proxy.TracedTensor` leaves (the prefill, a compiled graph
with a symbolic sequence). The two callers differ only in where the keys and values come
from (:class:`Prefill`, :class:`Decode`). Per layer, on token states ``x`` of shape
``(batch * seq, hidden)``::

    h = rms_norm(x)
    q, k, v = h @ Wq^T, h @ Wk^T, h @ Wv^T             # qmatmul on quantized blocks
    q, k = rope(q, positions), rope(k, positions)       # row b's token s at positions[b]+s
    prefill: a = attention(q, k, v, causal)             # k, v returned for the cache
    decode:  kv_write(K, k, positions); kv_write(V, v, positions)
             a = attention(q, K, V, key_lengths=positions + 1)
    x = a @ Wo^T + x                                    # residual in the epilogue
    x = swiglu(rms_norm(x) @ Wg^T, rms_norm(x) @ Wu^T) @ Wd^T + x

then the final norm and the output head (the embedding table when tied) on the last token of
each row only.

Weights (:class:`LlamaWeights`) are one dataclass of leaves as BERT's are: host arrays,
device tensors or traced tensors, each named (the names of
:mod:`vkumd.framework.models.llama_weights`), so the compiled prefill graph reads the very
tensors the decode step reads. A linear weight keeps the layout ``[out, in]``; with
``compute="quantized"`` its Q8_0/Q4_0/Q4_1 leaves stay raw block bytes (uint8
``[out, row_bytes]``) read by ``ops.qmatmul`` / ``ops.qembedding``, else they are
dequantised on the host once, into the activation dtype, and read by ``ops.matmul``
(``trans_b=True``: ``x @ W^T`` without a transposed copy).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.models.device_weights import upload_leaves
from vkumd.framework.models.gguf_quant import FLOAT_QTYPES
from vkumd.framework.opset.attention import attention_path

COMPUTES = ("quantized", "float16", "float32")
CACHE_DTYPES = ("float16", "float32")
LAYER_FIELDS = ("attn_norm", "q", "k", "v", "o", "ffn_norm", "gate", "up", "down")
NORMS = ("attn_norm", "ffn_norm")


@dataclass
class LlamaWeights:
    """Every tensor :func:`forward` reads, as one kind of leaf.

    Attributes:
        config: the model's sizes (a ``LlamaConfig``).
        dtype: the activation dtype (float16 for ``compute="float16"``, else float32); norm
            weights and dequantised matrices are stored in it.
        qtypes: per leaf name, its storage: ``"float"`` or a block type (Q8_0, Q4_0, Q4_1).
        leaves: per name (``embed``, ``norm``, ``output`` when not tied,
            ``layers.{i}.{field}``) the host array, device tensor or traced tensor.
    """

    config: Any
    dtype: dtypes.DType
    qtypes: dict[str, str]
    leaves: dict[str, Any] = field(default_factory=dict)

    def map(self, fn: Callable[[str, Any], Any]) -> LlamaWeights:
        """The same weights with each leaf replaced by ``fn(name, leaf)``."""
        return LlamaWeights(self.config, self.dtype, dict(self.qtypes),
                            {name: fn(name, leaf) for name, leaf in self.leaves.items()})

    def layer(self, i: int, name: str) -> Any:
        """Layer ``i``'s leaf ``name`` (one of :data:`LAYER_FIELDS`)."""
        return self.leaves[f"layers.{i}.{name}"]

    @property
    def head(self) -> str:
        """The output head's leaf name (``embed`` when the embedding is tied)."""
        return "output" if "output" in self.leaves else "embed"

    def nbytes(self) -> int:
        """The leaves' bytes (host arrays or device tensors)."""
        return sum(int(t.nbytes) for t in self.leaves.values())

    def release(self) -> None:
        """Free device leaves (safe twice)."""
        for t in self.leaves.values():
            t.release()


def activation_dtype(compute: str) -> dtypes.DType:
    """The dtype activations (and float weights) have under ``compute``."""
    return dtypes.float16 if compute == "float16" else dtypes.float32


def _names(config: Any) -> list[str]:
    names = ["embed", "norm"]
    if not config.tie_embeddings:
        names.append("output")
    names += [f"layers.{i}.{f}" for i in range(config.num_layers) for f in LAYER_FIELDS]
    return names


def _expected_shape(config: Any, name: str) -> tuple[int, ...]:
    hidden, heads, kv, d = (config.hidden_size, config.num_heads, config.num_kv_heads,
                            config.head_dim)
    field_name = name.rsplit(".", 1)[-1]
    return {"embed": (config.vocab_size, hidden), "output": (config.vocab_size, hidden),
            "norm": (hidden,), "attn_norm": (hidden,), "ffn_norm": (hidden,),
            "q": (heads * d, hidden), "k": (kv * d, hidden), "v": (kv * d, hidden),
            "o": (hidden, heads * d), "gate": (config.intermediate_size, hidden),
            "up": (config.intermediate_size, hidden),
            "down": (hidden, config.intermediate_size)}[field_name]


def prepare(config: Any, weights: Mapping[str, Any], compute: str = "quantized"
            ) -> LlamaWeights:
    """The host arrays :func:`upload` copies, from ``HostWeight`` records.

    Args:
        config: the model's sizes.
        weights: per name, a ``HostWeight`` (``qtype``, ``shape``, ``data``).
        compute: ``"quantized"`` keeps block-quantized matrices as raw blocks (uint8);
            ``"float16"``/``"float32"`` dequantises every matrix into that dtype.

    Returns:
        The weights, their leaves host arrays.

    Raises:
        VkumdValueError: an unknown ``compute``; a missing weight, one of another shape than
            the config gives, or a quantized norm.
    """
    if compute not in COMPUTES:
        raise VkumdValueError(f"LlamaRunner: compute={compute!r}; choose one of "
                              f"{', '.join(COMPUTES)}")
    act = activation_dtype(compute)
    leaves: dict[str, np.ndarray] = {}
    qtypes: dict[str, str] = {}
    for name in _names(config):
        if name not in weights:
            raise VkumdValueError(f"LlamaRunner: weight {name!r} is missing; the config needs "
                                  f"{config.num_layers} layers"
                                  f"{'' if config.tie_embeddings else ' and an output head'}")
        w = weights[name]
        shape = _expected_shape(config, name)
        if tuple(w.shape) != shape:
            raise VkumdValueError(f"LlamaRunner: weight {name!r} has shape {tuple(w.shape)}; "
                                  f"the config gives {shape}")
        quantized = w.qtype not in FLOAT_QTYPES
        norm = len(shape) == 1
        if quantized and norm:
            raise VkumdValueError(f"LlamaRunner: norm weight {name!r} is {w.qtype}; norms "
                                  "must be F32, F16 or BF16")
        if quantized and compute == "quantized":
            leaves[name] = np.ascontiguousarray(w.data, dtype=np.uint8)
            qtypes[name] = w.qtype
            continue
        leaves[name] = np.ascontiguousarray(_dequantized(w, shape), dtype=act.numpy)
        qtypes[name] = "float"
    return LlamaWeights(config, act, qtypes, leaves)


def _dequantized(w: Any, shape: tuple[int, ...]) -> np.ndarray:
    if w.qtype in FLOAT_QTYPES:
        return np.asarray(w.data, dtype=np.float32).reshape(shape)
    return np.asarray(w.dequantize(), dtype=np.float32).reshape(shape)


def upload(ctx: Any, weights: LlamaWeights) -> LlamaWeights:
    """Copy :func:`prepare`'s host arrays to ``ctx`` once; on failure every tensor made so
    far is freed.

    Raises:
        OutOfDeviceMemory: the weights do not fit.
    """
    return upload_leaves(ctx, weights)


def linear(weights: LlamaWeights, name: str, x: Any, residual: Any = None) -> Any:
    """``x @ W^T (+ residual)`` for the ``[out, in]`` weight ``name``: raw blocks through
    ``ops.qmatmul``, float weights through ``ops.matmul``."""
    w = weights.leaves[name]
    qtype = weights.qtypes[name]
    if qtype == "float":
        return ops.matmul(x, w, residual=residual, trans_b=True)
    return ops.qmatmul(x, w, qtype=qtype, in_features=_expected_shape(weights.config, name)[1],
                       residual=residual)


def embed(weights: LlamaWeights, ids: Any) -> Any:
    """Rows of the token embedding for int32 ``ids`` (``(tokens,)``), in the activation
    dtype."""
    table = weights.leaves["embed"]
    qtype = weights.qtypes["embed"]
    if qtype == "float":
        return ops.embedding(ids, table)
    rows = ops.qembedding(ids, table, qtype=qtype, dim=weights.config.hidden_size)
    return rows if rows.dtype is weights.dtype else ops.cast(rows, weights.dtype)


@dataclass
class Prefill:
    """Attention over the sequence itself (causal); each layer's rotated keys and values are
    kept in :attr:`keys` and :attr:`values` (``[batch, seq, kv_heads, head_dim]``, the cache
    dtype) for the caller to store in the cache."""

    cache_dtype: dtypes.DType
    keys: list[Any] = field(default_factory=list)
    values: list[Any] = field(default_factory=list)

    def attend(self, layer: int, q: Any, k: Any, v: Any) -> Any:
        """Causal attention of ``q`` over ``k``, ``v``."""
        k, v = (_as(k, self.cache_dtype), _as(v, self.cache_dtype))
        self.keys.append(k)
        self.values.append(v)
        out = ops.attention(_as(q, self.cache_dtype), k, v, causal=True, layout="bshd")
        return _as(out, q.dtype)


@dataclass
class Decode:
    """Attention over the cache: each row's new key and value are written at its position,
    then its query attends to the first ``lengths[b]`` cached keys.

    Attributes:
        keys, values: per layer, the cache ``[slots, max_context, kv_heads, head_dim]``.
        lengths: int32 ``[slots]``: positions + 1.
        path: the attention path (:data:`~vkumd.compiler.kernels.attention_plan.PATHS` or
            ``"auto"``); decode runs eagerly (captured), never traced.
    """

    keys: list[Any]
    values: list[Any]
    positions: Any
    lengths: Any
    path: str = "auto"

    def attend(self, layer: int, q: Any, k: Any, v: Any) -> Any:
        """Write ``k``, ``v`` into the layer's cache, then attend over it."""
        cache_k, cache_v = self.keys[layer], self.values[layer]
        # kv_write converts to the cache's dtype as it stores.
        ops.kv_write(cache_k, k, self.positions)
        ops.kv_write(cache_v, v, self.positions)
        out = attention_path(self.path, _as(q, cache_k.dtype), cache_k, cache_v,
                             key_lengths=self.lengths, layout="bshd")
        return _as(out, q.dtype)


def _as(x: Any, dt: dtypes.DType) -> Any:
    return x if x.dtype is dt else ops.cast(x, dt)


def layer(weights: LlamaWeights, i: int, x: Any, positions: Any, attention: Any,
          batch: Any, seq: Any) -> Any:
    """Layer ``i`` on token states ``x`` of shape ``(batch * seq, hidden)``.

    Args:
        weights: device or traced weights.
        i: the layer's index.
        x: the token states.
        positions: int32 ``(batch,)``: row ``b``'s first token is at ``positions[b]``.
        attention: a :class:`Prefill` or :class:`Decode`.
        batch, seq: the sizes (ints, or symbolic dimensions when traced).
    """
    config = weights.config
    d, heads, kv = config.head_dim, config.num_heads, config.num_kv_heads
    eps = config.rms_eps
    name = f"layers.{i}."
    h = ops.rms_norm(x, weights.layer(i, "attn_norm"), eps=eps)
    q = ops.reshape(linear(weights, name + "q", h), (batch, seq, heads, d))
    k = ops.reshape(linear(weights, name + "k", h), (batch, seq, kv, d))
    v = ops.reshape(linear(weights, name + "v", h), (batch, seq, kv, d))
    q = ops.rope(q, positions, theta=config.rope_theta, pairs=config.rope_pairs)
    k = ops.rope(k, positions, theta=config.rope_theta, pairs=config.rope_pairs)
    mixed = attention.attend(i, q, k, v)
    x = linear(weights, name + "o", ops.reshape(mixed, (batch * seq, heads * d)), residual=x)
    h = ops.rms_norm(x, weights.layer(i, "ffn_norm"), eps=eps)
    inner = ops.swiglu(linear(weights, name + "gate", h), linear(weights, name + "up", h))
    return linear(weights, name + "down", inner, residual=x)


def forward(weights: LlamaWeights, ids: Any, positions: Any, attention: Any,
            last: Any = None) -> Any:
    """Logits after the last token of each row: ``(batch, vocab)``, the activation dtype.

    Args:
        weights: device tensors (eager) or traced tensors.
        ids: int32 ``(batch, seq)`` token ids.
        positions: int32 ``(batch,)``: the position of each row's first token.
        attention: :class:`Prefill` (the rows' keys are the sequence itself) or
            :class:`Decode` (the rows' keys are the cache).
        last: int32 ``(1,)`` holding ``seq - 1``, the row whose logits a one-row prefill
            returns (None: every row is one token, as in decode).

    Returns:
        The logits (eagerly: queued, not waited for).
    """
    config = weights.config
    batch, seq = ids.shape
    x = embed(weights, ops.reshape(ids, (batch * seq,)))
    for i in range(config.num_layers):
        x = layer(weights, i, x, positions, attention, batch, seq)
    if last is not None:
        # Only the last token's logits are wanted: one row of the head, not seq rows.
        x = ops.embedding(last, x)
    x = ops.rms_norm(x, weights.leaves["norm"], eps=config.rms_eps)
    return linear(weights, weights.head, x)


def check_config(config: Any) -> None:
    """Refuse a config this model cannot run (before anything is allocated).

    Raises:
        VkumdValueError: heads that do not split into key/value groups, an odd head_dim,
            an unknown RoPE pair convention.
        VkumdTypeError: a config without the LlamaConfig fields.
    """
    missing = [f for f in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                           "num_heads", "num_kv_heads", "head_dim", "rms_eps", "rope_theta",
                           "rope_pairs", "tie_embeddings") if not hasattr(config, f)]
    if missing:
        raise VkumdTypeError(f"LlamaRunner: config lacks {', '.join(missing)}; pass a "
                             "LlamaConfig")
    if config.num_kv_heads < 1 or config.num_heads % config.num_kv_heads:
        raise VkumdValueError(f"LlamaRunner: {config.num_heads} query heads do not split into "
                              f"groups of {config.num_kv_heads} key/value heads")
    if config.head_dim % 2:
        raise VkumdValueError(f"LlamaRunner: head_dim {config.head_dim} is odd; RoPE rotates "
                              "pairs")
    if config.rope_pairs not in ("adjacent", "halves"):
        raise VkumdValueError(f"LlamaRunner: rope_pairs={config.rope_pairs!r}; 'adjacent' "
                              "(GGUF) or 'halves' (Hugging Face)")
