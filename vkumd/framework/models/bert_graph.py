"""A BERT sentence encoder as a vkumd graph: built with :class:`GraphBuilder`, optimised by the
passes, run by :class:`~vkumd.framework.execute.CompiledGraph`.

The graph is written in plain ops, as a frontend would produce it (``matmul`` then ``add``
of the bias, ``gelu``, ``add`` of the residual), and the passes fuse it: every GEMM takes its
bias, activation and residual as an epilogue, the word + position sum and its norm become one
``add_layer_norm``, and the token-type-0 row is folded into the position table. ``batch`` and
``seq`` are symbolic, so one bucket's memory serves every batch up to it, each size recorded
at its true sizes. Inputs, all int32:

- ``ids`` ``[batch, seq]``: token ids (0 past each sentence's length);
- ``positions`` ``[batch, seq]``: ``0 .. seq-1`` on every row;
- ``lengths`` ``[batch]``: tokens per sentence; attention masks the keys past it, so the
  batch's padding (to its longest sentence) never reaches a real token;
- ``pool_lengths`` ``[batch]``: the tokens pooled (the length; 1 for ``cls`` pooling).

Outputs: ``pooled`` ``[batch, hidden]`` and ``embeddings`` (its L2-normalised form).

Pooling is a masked mean over ``seq``, as attention: keys past ``key_lengths`` (the batch's
padding) are never read, where a GEMM of host-made pooling weights by the hidden states would
multiply them by 0 (not 0 when padding holds a NaN). With a zero query (scale 0) every score
is 0, so softmax weighs the first ``pool_lengths`` keys ``1/length`` each and the output is
their mean, per head; ``pool_lengths`` = 1 gives the ``[CLS]`` state. ``mean_sqrt_len``
multiplies the mean by ``sqrt(length)``, from the input ``pool_scale`` ``[batch, 1]``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from vkumd.errors import VkumdValueError
from vkumd.framework import dtypes
from vkumd.framework.graph import Graph, GraphBuilder, Value, run_passes
from vkumd.framework.models.config import BertConfig, SentenceConfig

# F.normalize's clamp (1e-12 on the norm), as an eps under the square root (as bert.py).
_NORM_EPS = 1e-24
INPUTS = ("ids", "positions", "lengths", "pool_lengths")


def _linear(b: GraphBuilder, x: Value, host: Mapping[str, np.ndarray], name: str,
            dt: dtypes.DType) -> Value:
    """``x @ W^T + bias`` as a frontend writes it: a matmul and an add (fused by the passes)."""
    weight = b.weight(name + ".weight", host[name + ".weight"], dt)
    bias = b.weight(name + ".bias", host[name + ".bias"], dt)
    return b.add(b.matmul(x, weight, trans_b=True), bias)


def _norm(b: GraphBuilder, x: Value, host: Mapping[str, np.ndarray], name: str,
          config: BertConfig, dt: dtypes.DType) -> Value:
    return b.layer_norm(x, b.weight(name + ".weight", host[name + ".weight"], dt),
                        b.weight(name + ".bias", host[name + ".bias"], dt),
                        eps=config.layer_norm_eps)


def _layer(b: GraphBuilder, x: Value, lengths: Value, host: Mapping[str, np.ndarray],
           prefix: str, config: BertConfig, dt: dtypes.DType) -> Value:
    """One encoder layer on ``x`` ``[batch, seq, hidden]``."""
    split = ("batch", "seq", config.num_heads, config.head_dim)

    def heads_first(name: str) -> Value:
        projected = _linear(b, x, host, prefix + name, dt)
        return b.permute(b.reshape(projected, split), (0, 2, 1, 3))

    q, k, v = (heads_first(f"attention.self.{n}") for n in ("query", "key", "value"))
    mixed = b.attention(q, k, v, key_lengths=lengths)
    merged = b.reshape(b.permute(mixed, (0, 2, 1, 3)), ("batch", "seq", config.hidden_size))
    attended = b.add(_linear(b, merged, host, prefix + "attention.output.dense", dt), x)
    h = _norm(b, attended, host, prefix + "attention.output.LayerNorm", config, dt)
    inner = _linear(b, h, host, prefix + "intermediate.dense", dt)
    inner = b.op(config.activation, inner)
    out = b.add(_linear(b, inner, host, prefix + "output.dense", dt), h)
    return _norm(b, out, host, prefix + "output.LayerNorm", config, dt)


def _pool(b: GraphBuilder, x: Value, pool_lengths: Value, config: BertConfig,
          dt: dtypes.DType) -> Value:
    """The masked mean of ``x`` ``[batch, seq, hidden]`` over its first ``pool_lengths``
    tokens, as attention with a zero query (see the module docstring): ``[batch, hidden]``."""
    heads, head_dim = config.num_heads, config.head_dim
    # [batch, seq, heads, head_dim] rows read in place (layout="bshd"): no permute.
    states = b.reshape(x, ("batch", "seq", heads, head_dim))
    # A [batch, 1, heads, head_dim] zero query; it takes its batch size from an input, since
    # a constant cannot have a symbolic dimension.
    per_row = b.reshape(b.cast(pool_lengths, dt), ("batch", 1, 1, 1))
    query = b.mul(per_row, b.constant(np.zeros((1, 1, heads, head_dim)), dt, "zero_query"))
    mean = b.attention(query, states, states, key_lengths=pool_lengths, scale=0.0,
                       layout="bshd")
    return b.reshape(mean, ("batch", config.hidden_size))


def build_graph(config: BertConfig, sentence: SentenceConfig, host: Mapping[str, np.ndarray],
                dtype: Any = "float32") -> Graph:
    """The encoder as an unoptimised graph (see the module docstring for its interface).

    Args:
        config: the encoder's sizes.
        sentence: pooling (mean, cls, mean_sqrt_len).
        host: the checked host weights, by Hugging Face name.
        dtype: float32 or float16: weights and activations (kernels accumulate in float32).

    Returns:
        The checked graph.

    Raises:
        VkumdValueError: another dtype.
    """
    dt = dtypes.dtype(dtype)
    if dt not in (dtypes.float32, dtypes.float16):
        raise VkumdValueError(f"BERT graph: dtype {dt.name} is not supported; use float32 or "
                              "float16 (attention takes those two)")
    b = GraphBuilder("bert")
    ids = b.input("ids", ("batch", "seq"), "int32")
    positions = b.input("positions", ("batch", "seq"), "int32")
    lengths = b.input("lengths", ("batch",), "int32")
    pool_lengths = b.input("pool_lengths", ("batch",), "int32")
    word = b.weight("embeddings.word_embeddings.weight",
                    host["embeddings.word_embeddings.weight"], dt)
    types = b.weight("embeddings.token_type_embeddings.weight",
                     host["embeddings.token_type_embeddings.weight"], dt)
    # A single sentence has token type 0 everywhere: its row is added to every position's
    # (constant folding computes this sum once).
    table = b.add(b.weight("embeddings.position_embeddings.weight",
                           host["embeddings.position_embeddings.weight"], dt),
                  b.slice(types, 0, 0, 1))
    x = b.add(b.embedding(ids, word), b.embedding(positions, table))
    x = _norm(b, x, host, "embeddings.LayerNorm", config, dt)
    for i in range(config.num_layers):
        x = _layer(b, x, lengths, host, f"encoder.layer.{i}.", config, dt)
    pooled = _pool(b, x, pool_lengths, config, dt)
    if sentence.pooling == "mean_sqrt_len":
        pooled = b.mul(pooled, b.input("pool_scale", ("batch", 1), dt))
    # x / sqrt(sum x^2 + eps): an RMS norm (mean of squares) scaled by 1/sqrt(hidden).
    unit = b.constant(np.full(config.hidden_size, config.hidden_size ** -0.5), dt, "unit")
    normalized = b.rms_norm(pooled, unit, eps=_NORM_EPS / config.hidden_size)
    b.output(pooled, normalized)
    return b.build()


def optimize(graph: Graph) -> Graph:
    """``graph`` through the default pass pipeline (fusion, folding, DCE)."""
    return run_passes(graph)


def graph_inputs(lengths: np.ndarray, ids: np.ndarray, pooling: str,
                 dtype: Any = "float32") -> dict[str, np.ndarray]:
    """The host arrays one padded batch feeds the graph.

    Args:
        lengths: ``(batch,)`` tokens per sentence.
        ids: ``(batch, seq)`` token ids, 0 past each length.
        pooling: the sentence config's pooling mode.
        dtype: the graph's float type (for ``pool_scale``).

    Returns:
        Arrays by input name.
    """
    lengths = np.asarray(lengths, dtype=np.int32)
    batch, seq = ids.shape
    feeds = {"ids": np.ascontiguousarray(ids, dtype=np.int32),
             "positions": np.ascontiguousarray(
                 np.broadcast_to(np.arange(seq, dtype=np.int32), (batch, seq))),
             "lengths": lengths,
             "pool_lengths": np.ones_like(lengths) if pooling == "cls" else lengths}
    if pooling == "mean_sqrt_len":
        feeds["pool_scale"] = np.sqrt(lengths.astype(np.float64))[:, None].astype(
            dtypes.dtype(dtype).numpy)
    return feeds
