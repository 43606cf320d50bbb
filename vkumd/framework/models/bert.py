"""A BERT encoder with pooling, built eagerly on :mod:`vkumd.ops`.

The forward pass is one function, :func:`forward`, of the device weights and one batch's
inputs. It has no Python control flow on device values: every branch depends on the config or
on shapes, so a graph builder can trace it, or mirror it op for op. Token states are kept as
one ``(batch * seq, hidden)`` matrix, so each projection is one GEMM with M = batch * seq
(as a batch of ``seq``-row GEMMs, short sentences ran 1.5x slower on lavapipe). Per layer::

    q, k, v = x @ Wq^T + bq, x @ Wk^T + bk, x @ Wv^T + bv     # 3 GEMMs, bias in the epilogue
    q, k, v -> [batch, seq, heads, head_dim]                  # reshape views, no copy
    a = attention(q, k, v, key_lengths=lengths, layout="bshd")  # padded keys masked
    a -> [batch * seq, hidden]                                # reshape view
    h = layer_norm(a @ Wo^T + bo + x)                         # residual in the GEMM epilogue
    y = layer_norm(gelu(h @ W1^T + b1) @ W2^T + b2 + h)       # bias+GELU, bias+residual fused

Layouts: a vkumd tensor is one contiguous row-major allocation, so ``[b, s, h*d]`` and
``[b, s, h, d]`` are the same bytes; :func:`_reshape` makes a second tensor over the same
allocation with the other shape (no copy, no kernel). The head split and merge are such
views too: attention reads and writes ``[batch, seq, heads, head_dim]`` rows in place
(``layout="bshd"``), so no permute runs. Query, key and value stay three GEMMs: a fused
``[3h, h]`` weight would give one ``[b, s, 3, h, d]`` tensor, and attention takes three
whole tensors (the runtime tracks hazards per allocation, so no view may start inside
another tensor).

Token types: a single sentence has type 0 everywhere, so the type-0 row is added to the
position table at upload (constant folding) and the embedding is ``word[ids] + pos[0:s]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes, ops
from vkumd.framework.models.config import BertConfig, SentenceConfig
from vkumd.framework.tensor import Tensor

# F.normalize's clamp (1e-12 on the norm), as an eps under the square root.
_NORM_EPS = 1e-24


class _View(Tensor):
    """A tensor over another tensor's whole allocation, with another shape; it keeps the base
    alive and never frees the memory itself."""

    def __init__(self, base: Tensor, shape: tuple[int, ...]) -> None:
        super().__init__(base.context, shape, base.dtype, base.allocation)
        self._base: Tensor | None = base

    def _release(self) -> None:
        self.allocation = None
        self._base = None


def _reshape(t: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``t`` seen with another shape of the same size (row-major, so no data moves)."""
    if math.prod(shape) != t.size:
        raise VkumdValueError(f"reshape: {t.shape} has {t.size} elements, {shape} has "
                              f"{math.prod(shape)}")
    return _View(t, shape)


@dataclass
class LayerWeights:
    """One encoder layer's device tensors; linear weights are ``(out, in)`` as stored."""

    query: Tensor
    query_bias: Tensor
    key: Tensor
    key_bias: Tensor
    value: Tensor
    value_bias: Tensor
    attn_out: Tensor
    attn_out_bias: Tensor
    attn_norm: Tensor
    attn_norm_bias: Tensor
    ffn_in: Tensor
    ffn_in_bias: Tensor
    ffn_out: Tensor
    ffn_out_bias: Tensor
    ffn_norm: Tensor
    ffn_norm_bias: Tensor


@dataclass
class BertWeights:
    """Every device tensor :func:`forward` reads.

    Attributes:
        config: the sizes.
        sentence: pooling and normalisation.
        dtype: the storage type of weights and activations (float32 or float16).
        word: ``(vocab, hidden)`` token embeddings.
        position: ``(max_positions, hidden)`` position embeddings plus the type-0 row.
        norm, norm_bias: the embedding layer norm.
        layers: the encoder layers.
        unit_scale: ``(hidden,)`` of ``1/sqrt(hidden)``: turns an RMS norm into an L2 one.
    """

    config: BertConfig
    sentence: SentenceConfig
    dtype: dtypes.DType
    word: Tensor
    position: Tensor
    norm: Tensor
    norm_bias: Tensor
    layers: list[LayerWeights]
    unit_scale: Tensor

    def tensors(self) -> list[Tensor]:
        """Every tensor, once."""
        found = [self.word, self.position, self.norm, self.norm_bias, self.unit_scale]
        for layer in self.layers:
            found.extend(vars(layer).values())
        return found

    def release(self) -> None:
        """Free the device memory (safe twice)."""
        for t in self.tensors():
            t.release()


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


def upload(ctx: Any, config: BertConfig, sentence: SentenceConfig,
           host: dict[str, np.ndarray], dtype: Any = "float32") -> BertWeights:
    """Copy checked host weights (see :func:`~vkumd.framework.models.loader.read_weights`)
    to ``ctx`` as ``dtype``; on failure every tensor made so far is freed.

    Raises:
        VkumdValueError: ``dtype`` is not float32 or float16.
        OutOfDeviceMemory: the weights do not fit.
    """
    dt = dtypes.dtype(dtype)
    if dt not in (dtypes.float32, dtypes.float16):
        raise VkumdValueError(f"BERT weights: dtype {dt.name} is not supported; use float32 "
                              "or float16 (attention takes those two)")
    made: list[Tensor] = []

    def put(array: np.ndarray) -> Tensor:
        made.append(ctx.tensor(np.ascontiguousarray(array, dtype=np.float32), dtype=dt))
        return made[-1]

    try:
        position = (host["embeddings.position_embeddings.weight"]
                    + host["embeddings.token_type_embeddings.weight"][0])
        layers = [LayerWeights(**{field: put(host[f"encoder.layer.{i}.{name}"])
                                  for field, name in _LAYER_NAMES.items()})
                  for i in range(config.num_layers)]
        return BertWeights(
            config, sentence, dt, put(host["embeddings.word_embeddings.weight"]), put(position),
            put(host["embeddings.LayerNorm.weight"]), put(host["embeddings.LayerNorm.bias"]),
            layers, put(np.full(config.hidden_size, config.hidden_size ** -0.5)))
    except BaseException:
        for t in made:
            t.release()
        raise


@dataclass
class BatchInputs:
    """One padded batch on the device.

    Attributes:
        ids: int32 ``(batch, seq)`` token ids, padded with 0 past each length.
        positions: int32 ``(seq,)``: ``0 .. seq-1``.
        lengths: int32 ``(batch,)`` tokens per sentence (attention masks keys past it).
        pool: ``(batch, 1, seq)`` in the weights' dtype: each token's weight in the pooled
            vector (``1/length`` for mean pooling, 0 on padding).
    """

    ids: Tensor
    positions: Tensor
    lengths: Tensor
    pool: Tensor


def pool_weights(lengths: np.ndarray, seq: int, mode: str) -> np.ndarray:
    """Each token's weight in its sentence's pooled vector.

    Args:
        lengths: ``(batch,)`` tokens per sentence.
        seq: the padded length.
        mode: ``"mean"``, ``"cls"`` or ``"mean_sqrt_len"`` (see
            :class:`~vkumd.framework.models.config.SentenceConfig`).

    Returns:
        float32 ``(batch, 1, seq)``: 0 on padding.
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    valid = np.arange(seq)[None, :] < lengths[:, None]
    if mode == "cls":
        weights = np.zeros(valid.shape)
        weights[:, 0] = 1.0
    elif mode == "mean_sqrt_len":
        weights = valid / np.sqrt(np.maximum(lengths, 1))[:, None]
    else:
        weights = valid / np.maximum(lengths, 1)[:, None]
    return weights[:, None, :].astype(np.float32)


def make_inputs(weights: BertWeights, ids: np.ndarray, lengths: np.ndarray) -> BatchInputs:
    """Upload one batch: ``ids`` ``(batch, seq)`` and ``lengths`` ``(batch,)``.

    Raises:
        VkumdValueError: shapes that disagree, a sequence past the position table, lengths
            outside ``[1, seq]`` or ids outside the vocabulary.
    """
    ids = np.asarray(ids)
    lengths = np.asarray(lengths)
    config = weights.config
    if ids.ndim != 2 or lengths.shape != ids.shape[:1]:
        raise VkumdValueError(f"BERT inputs: ids {ids.shape} must be (batch, seq) and lengths "
                              f"{lengths.shape} (batch,)")
    batch, seq = ids.shape
    if seq > config.max_positions:
        raise VkumdValueError(f"BERT inputs: {seq} tokens; the position table has "
                              f"{config.max_positions}")
    if batch and (lengths.min() < 1 or lengths.max() > seq):
        raise VkumdValueError(f"BERT inputs: lengths must lie in [1, {seq}]")
    if ids.size and (ids.min() < 0 or ids.max() >= config.vocab_size):
        raise VkumdValueError(f"BERT inputs: token ids must lie in [0, {config.vocab_size})")
    ctx = weights.word.context
    return BatchInputs(ctx.tensor(ids.astype(np.int32)),
                       ctx.tensor(np.arange(seq, dtype=np.int32)),
                       ctx.tensor(lengths.astype(np.int32)),
                       ctx.tensor(pool_weights(lengths, seq, weights.sentence.pooling),
                                  dtype=weights.dtype))


def _layer(p: LayerWeights, x: Tensor, lengths: Tensor, batch: int, config: BertConfig
           ) -> Tensor:
    """One encoder layer on ``x`` of shape ``(batch * seq, hidden)``."""
    tokens, hidden = x.shape
    seq = tokens // batch
    split = (batch, seq, config.num_heads, config.head_dim)

    def heads(weight: Tensor, bias: Tensor) -> Tensor:
        return _reshape(ops.matmul(x, weight, bias=bias, trans_b=True), split)

    q = heads(p.query, p.query_bias)
    k = heads(p.key, p.key_bias)
    v = heads(p.value, p.value_bias)
    mixed = ops.attention(q, k, v, key_lengths=lengths, layout="bshd")
    merged = _reshape(mixed, (tokens, hidden))
    attended = ops.matmul(merged, p.attn_out, bias=p.attn_out_bias, residual=x, trans_b=True)
    h = ops.layer_norm(attended, p.attn_norm, p.attn_norm_bias, eps=config.layer_norm_eps)
    inner = ops.matmul(h, p.ffn_in, bias=p.ffn_in_bias, activation=config.activation,
                       trans_b=True)
    out = ops.matmul(inner, p.ffn_out, bias=p.ffn_out_bias, residual=h, trans_b=True)
    return ops.layer_norm(out, p.ffn_norm, p.ffn_norm_bias, eps=config.layer_norm_eps)


def forward(weights: BertWeights, inputs: BatchInputs, normalize: bool = True) -> Tensor:
    """Sentence embeddings for one batch: ``(batch, hidden)`` in the weights' dtype.

    Args:
        weights: from :func:`upload`.
        inputs: from :func:`make_inputs`.
        normalize: scale each embedding to unit L2 length.

    Returns:
        The pooled (and normalised) embeddings; the work is queued, not waited for.
    """
    config = weights.config
    batch, seq = inputs.ids.shape
    x = ops.add(ops.embedding(inputs.ids, weights.word),
                ops.embedding(inputs.positions, weights.position))
    x = ops.layer_norm(_reshape(x, (batch * seq, config.hidden_size)), weights.norm,
                       weights.norm_bias, eps=config.layer_norm_eps)
    for layer in weights.layers:
        x = _layer(layer, x, inputs.lengths, batch, config)
    hidden = _reshape(x, (batch, seq, config.hidden_size))
    pooled = _reshape(ops.matmul(inputs.pool, hidden), (batch, config.hidden_size))
    if not normalize:
        return pooled
    # x / sqrt(sum x^2 + eps): an RMS norm (mean of squares) scaled by 1/sqrt(hidden).
    return ops.rms_norm(pooled, weights.unit_scale, eps=_NORM_EPS / config.hidden_size)
