"""A BERT sentence encoder, written once on the tensor surface (:mod:`vkumd.ops`).

:func:`forward` (and :func:`normalize` after it) is the whole model. It runs two ways:

- eagerly, on device :class:`~vkumd.framework.tensor.Tensor` weights and inputs: each op
  launches as it is called (``SentenceEncoder(compiled=False)``);
- traced: :func:`~vkumd.framework.models.bert_graph.build_graph` calls the same function on
  :class:`~vkumd.framework.graph.proxy.TracedTensor` weights and inputs (``batch`` and ``seq``
  symbolic), which records it as a graph for the passes and the compiled executor.

So the function has no Python control flow on device values: every branch depends on the
config or on shapes, and sizes are read from the tensors (ints eagerly, symbolic dimensions
when traced). The weights are one :class:`BertWeights` whose leaves are host arrays
(:func:`prepare`), device tensors (:func:`upload`) or traced tensors; :meth:`BertWeights.named`
names each leaf, so the compiled graph's weights are the eager path's device tensors, found by
name (one device copy serves both paths).

Token states are one ``(batch * seq, hidden)`` matrix, so each projection is one GEMM with
M = batch * seq (as a batch of ``seq``-row GEMMs, short sentences ran 1.5x slower on lavapipe).
Per layer::

    q, k, v = x @ Wq^T + bq, x @ Wk^T + bk, x @ Wv^T + bv     # 3 GEMMs, bias in the epilogue
    q, k, v -> [batch, seq, heads, head_dim]                  # reshape views, no copy
    a = attention(q, k, v, key_lengths=lengths, layout="bshd")  # padded keys masked
    a -> [batch * seq, hidden]                                # reshape view
    h = layer_norm(a @ Wo^T + bo + x)                         # residual in the GEMM epilogue
    y = layer_norm(gelu(h @ W1^T + b1) @ W2^T + b2 + h)       # bias+GELU, bias+residual fused

Layouts: a vkumd tensor is one contiguous row-major allocation, so ``[b*s, h*d]`` and
``[b, s, h, d]`` are the same bytes and ``ops.reshape`` is a view (no copy, no kernel). The
head split and merge are such views: attention reads and writes ``[batch, seq, heads,
head_dim]`` rows in place (``layout="bshd"``), so no permute runs. Query, key and value stay
three GEMMs: a fused ``[3h, h]`` weight would give one ``[b, s, 3, h, d]`` tensor, and
attention takes three whole tensors (the runtime tracks hazards per allocation, so no view may
start inside another tensor).

Token types: a single sentence has type 0 everywhere, so :func:`prepare` adds the type-0 row
to the position table once, in float64 and rounded once to the weights' dtype (as constant
folding would), and the embedding is ``word[ids] + table[positions]``.

Pooling is a masked mean over ``seq``, as attention: keys past ``key_lengths`` (the batch's
padding) are never read, where a GEMM of host-made pooling weights by the hidden states would
multiply them by 0 (not 0 when padding holds a NaN). With a zero query (scale 0) every score
is 0, so softmax weighs the first ``pool_lengths`` keys ``1/length`` each and the output is
their mean, per head; ``pool_lengths`` = 1 gives the ``[CLS]`` state. The query takes its
batch size from ``pool_lengths`` (a constant cannot have a symbolic dimension).
``mean_sqrt_len`` multiplies the mean by ``sqrt(length)``, the input ``pool_scale``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.models.config import BertConfig, SentenceConfig
from vkumd.framework.models.device_weights import upload_leaves

# F.normalize's clamp (1e-12 on the norm), as an eps under the square root.
_NORM_EPS = 1e-24


@dataclass
class LayerWeights:
    """One encoder layer's tensors; linear weights are ``(out, in)`` as stored."""

    query: Any
    query_bias: Any
    key: Any
    key_bias: Any
    value: Any
    value_bias: Any
    attn_out: Any
    attn_out_bias: Any
    attn_norm: Any
    attn_norm_bias: Any
    ffn_in: Any
    ffn_in_bias: Any
    ffn_out: Any
    ffn_out_bias: Any
    ffn_norm: Any
    ffn_norm_bias: Any


# Each field's tensor in the checkpoint, under ``encoder.layer.<i>.``.
_LAYER_NAMES = {
    "query": "attention.self.query.weight", "query_bias": "attention.self.query.bias",
    "key": "attention.self.key.weight", "key_bias": "attention.self.key.bias",
    "value": "attention.self.value.weight", "value_bias": "attention.self.value.bias",
    "attn_out": "attention.output.dense.weight", "attn_out_bias": "attention.output.dense.bias",
    "attn_norm": "attention.output.LayerNorm.weight",
    "attn_norm_bias": "attention.output.LayerNorm.bias",
    "ffn_in": "intermediate.dense.weight", "ffn_in_bias": "intermediate.dense.bias",
    "ffn_out": "output.dense.weight", "ffn_out_bias": "output.dense.bias",
    "ffn_norm": "output.LayerNorm.weight", "ffn_norm_bias": "output.LayerNorm.bias",
}
# The other leaves' names: the checkpoint's where the tensor is one of its own.
_NAMES = {"word": "embeddings.word_embeddings.weight",
          "position": "embeddings.position_embeddings.weight+token_type_0",
          "norm": "embeddings.LayerNorm.weight", "norm_bias": "embeddings.LayerNorm.bias",
          "zero_query": "pooling.zero_query", "unit_scale": "normalize.unit_scale"}


@dataclass
class BertWeights:
    """Every tensor :func:`forward` and :func:`normalize` read, as one kind of leaf: host
    arrays, device tensors or traced tensors.

    Attributes:
        config: the sizes.
        sentence: pooling and normalisation.
        dtype: the storage type of weights and activations (float32 or float16).
        word: ``(vocab, hidden)`` token embeddings.
        position: ``(max_positions, hidden)`` position embeddings plus the type-0 row.
        norm, norm_bias: the embedding layer norm.
        layers: the encoder layers.
        zero_query: ``(1, 1, heads, head_dim)`` zeros: the pooling attention's query.
        unit_scale: ``(hidden,)`` of ``1/sqrt(hidden)``: turns an RMS norm into an L2 one.
    """

    config: BertConfig
    sentence: SentenceConfig
    dtype: dtypes.DType
    word: Any
    position: Any
    norm: Any
    norm_bias: Any
    layers: list[LayerWeights]
    zero_query: Any
    unit_scale: Any

    def named(self) -> dict[str, Any]:
        """Every leaf by its name (the checkpoint's, where it is a checkpoint tensor)."""
        found = {name: getattr(self, field) for field, name in _NAMES.items()}
        for i, layer in enumerate(self.layers):
            found.update({f"encoder.layer.{i}.{name}": getattr(layer, field)
                          for field, name in _LAYER_NAMES.items()})
        return found

    def map(self, fn: Callable[[str, Any], Any]) -> BertWeights:
        """The same weights with each leaf replaced by ``fn(name, leaf)``, called in the
        order of :meth:`named`."""
        new = {name: fn(name, leaf) for name, leaf in self.named().items()}
        layers = [LayerWeights(**{field: new[f"encoder.layer.{i}.{name}"]
                                  for field, name in _LAYER_NAMES.items()})
                  for i in range(len(self.layers))]
        return BertWeights(self.config, self.sentence, self.dtype, layers=layers,
                           **{field: new[name] for field, name in _NAMES.items()})

    def nbytes(self) -> int:
        """The leaves' bytes (host arrays or device tensors)."""
        return sum(int(t.size) * self.dtype.itemsize for t in self.named().values())

    def release(self) -> None:
        """Free device leaves (safe twice)."""
        for t in self.named().values():
            t.release()


def prepare(config: BertConfig, sentence: SentenceConfig, host: dict[str, np.ndarray],
            dtype: Any = "float32") -> BertWeights:
    """The weights as host arrays of ``dtype``, from checked host weights (see
    :func:`~vkumd.framework.models.loader.read_weights`).

    Raises:
        VkumdValueError: ``dtype`` is not float32 or float16.
    """
    dt = dtypes.dtype(dtype)
    if dt not in (dtypes.float32, dtypes.float16):
        raise VkumdValueError(f"BERT weights: dtype {dt.name} is not supported; use float32 "
                              "or float16 (attention takes those two)")

    def stored(array: Any) -> np.ndarray:
        return np.ascontiguousarray(array, dtype=dt.numpy)

    position = (stored(host["embeddings.position_embeddings.weight"]).astype(np.float64)
                + stored(host["embeddings.token_type_embeddings.weight"][0]))
    layers = [LayerWeights(**{field: stored(host[f"encoder.layer.{i}.{name}"])
                              for field, name in _LAYER_NAMES.items()})
              for i in range(config.num_layers)]
    return BertWeights(
        config, sentence, dt, word=stored(host["embeddings.word_embeddings.weight"]),
        position=stored(position), norm=stored(host["embeddings.LayerNorm.weight"]),
        norm_bias=stored(host["embeddings.LayerNorm.bias"]), layers=layers,
        zero_query=stored(np.zeros((1, 1, config.num_heads, config.head_dim))),
        unit_scale=stored(np.full(config.hidden_size, config.hidden_size ** -0.5)))


def upload(ctx: Any, weights: BertWeights) -> BertWeights:
    """Copy :func:`prepare`'s host arrays to ``ctx``; on failure every tensor made so far is
    freed.

    Raises:
        OutOfDeviceMemory: the weights do not fit.
    """
    return upload_leaves(ctx, weights, weights.dtype)


def layer(p: LayerWeights, x: Any, lengths: Any, batch: Any, seq: Any, config: BertConfig
          ) -> Any:
    """One encoder layer on token states ``x`` of shape ``(batch * seq, hidden)``.

    Args:
        p: the layer's weights.
        x: the token states.
        lengths: int32 ``(batch,)``: keys at or past a sentence's length are masked.
        batch, seq: the sizes (ints, or symbolic dimensions when traced).
        config: the sizes of the model.
    """
    split = (batch, seq, config.num_heads, config.head_dim)

    def heads(weight: Any, bias: Any) -> Any:
        return ops.reshape(ops.matmul(x, weight, bias=bias, trans_b=True), split)

    q = heads(p.query, p.query_bias)
    k = heads(p.key, p.key_bias)
    v = heads(p.value, p.value_bias)
    mixed = ops.attention(q, k, v, key_lengths=lengths, layout="bshd")
    merged = ops.reshape(mixed, (batch * seq, config.hidden_size))
    attended = ops.matmul(merged, p.attn_out, bias=p.attn_out_bias, residual=x, trans_b=True)
    h = ops.layer_norm(attended, p.attn_norm, p.attn_norm_bias, eps=config.layer_norm_eps)
    inner = ops.matmul(h, p.ffn_in, bias=p.ffn_in_bias, activation=config.activation,
                       trans_b=True)
    out = ops.matmul(inner, p.ffn_out, bias=p.ffn_out_bias, residual=h, trans_b=True)
    return ops.layer_norm(out, p.ffn_norm, p.ffn_norm_bias, eps=config.layer_norm_eps)


def forward(weights: BertWeights, ids: Any, positions: Any, lengths: Any, pool_lengths: Any,
            pool_scale: Any = None) -> Any:
    """The pooled sentence vectors of one padded batch: ``(batch, hidden)``.

    Args:
        weights: device tensors (eager) or traced tensors.
        ids: int32 ``(batch, seq)`` token ids, 0 past each length.
        positions: int32 ``(batch, seq)``: ``0 .. seq-1`` on every row.
        lengths: int32 ``(batch,)`` tokens per sentence; attention masks the keys past it.
        pool_lengths: int32 ``(batch,)`` tokens pooled (the length; 1 for ``cls`` pooling).
        pool_scale: ``(batch, 1)`` in the weights' dtype: ``sqrt(length)`` for
            ``mean_sqrt_len`` pooling; None for the others.

    Returns:
        The pooled vectors in the weights' dtype (eagerly: queued, not waited for).
    """
    config = weights.config
    hidden, heads, head_dim = config.hidden_size, config.num_heads, config.head_dim
    batch, seq = ids.shape
    tokens = batch * seq
    x = ops.add(ops.embedding(ops.reshape(ids, (tokens,)), weights.word),
                ops.embedding(ops.reshape(positions, (tokens,)), weights.position))
    x = ops.layer_norm(x, weights.norm, weights.norm_bias, eps=config.layer_norm_eps)
    for p in weights.layers:
        x = layer(p, x, lengths, batch, seq, config)
    # [batch, seq, heads, head_dim] rows read in place (layout="bshd"): no permute.
    states = ops.reshape(x, (batch, seq, heads, head_dim))
    per_row = ops.reshape(ops.cast(pool_lengths, weights.dtype), (batch, 1, 1, 1))
    query = ops.mul(per_row, weights.zero_query)
    mean = ops.attention(query, states, states, key_lengths=pool_lengths, scale=0.0,
                         layout="bshd")
    pooled = ops.reshape(mean, (batch, hidden))
    if pool_scale is not None:
        pooled = ops.mul(pooled, pool_scale)
    return pooled


def normalize(weights: BertWeights, pooled: Any) -> Any:
    """``pooled`` scaled to unit L2 length per row (as ``F.normalize``)."""
    # x / sqrt(sum x^2 + eps): an RMS norm (mean of squares) scaled by 1/sqrt(hidden).
    hidden = weights.config.hidden_size
    return ops.rms_norm(pooled, weights.unit_scale, eps=_NORM_EPS / hidden)
