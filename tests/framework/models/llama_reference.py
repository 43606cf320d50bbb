"""A float64 numpy Llama forward pass, written from the architecture's definition and
independent of vkumd's device code: the reference the model tests compare against.

Token embedding; per block RMSNorm, Q/K/V projections, rotary embedding (adjacent pairs
``(2i, 2i+1)`` for GGUF weights, halves ``(i, i + d/2)`` for Hugging Face ones), causal
attention with grouped key/value heads, output projection and residual; RMSNorm, SwiGLU
feed-forward and residual; a final RMSNorm and the output head (the embedding when tied).

Weights are a dict of float arrays under :mod:`vkumd.framework.models.llama_weights`'s names
(``embed``, ``layers.0.q``, ...); float32 ones are widened as they are used.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from vkumd.framework.models.llama_config import LlamaConfig


def dequantized(weights: Mapping[str, object]) -> dict[str, np.ndarray]:
    """Float64 arrays from :class:`HostWeight` values (or arrays, passed through)."""
    out = {}
    for name, w in weights.items():
        values = w.dequantize() if hasattr(w, "dequantize") else np.asarray(w)
        out[name] = np.asarray(values, dtype=np.float64)
    return out


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """``x / sqrt(mean(x**2) + eps) * weight`` over the last axis."""
    x = np.asarray(x, dtype=np.float64)
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rope(x: np.ndarray, positions: np.ndarray, theta: float, pairs: str) -> np.ndarray:
    """Rotate ``x [tokens, heads, head_dim]``: token ``t`` by ``positions[t]``.

    Pair ``i`` (of ``head_dim / 2``) turns by ``position * theta ** (-2 i / head_dim)``; it
    is elements ``(2i, 2i+1)`` for ``pairs="adjacent"``, ``(i, i + head_dim/2)`` for
    ``"halves"``.
    """
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d, 2, dtype=np.float64) / d)
    angle = np.asarray(positions, dtype=np.float64)[:, None] * inv[None, :]  # [t, d/2]
    cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
    if pairs == "adjacent":
        a, b = x[..., 0::2], x[..., 1::2]
    elif pairs == "halves":
        a, b = x[..., : d // 2], x[..., d // 2:]
    else:
        raise ValueError(pairs)
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x, dtype=np.float64)
    if pairs == "adjacent":
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2:] = ra, rb
    return out


def _linear(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    return x @ np.asarray(w, dtype=np.float64).T


def forward(config: LlamaConfig, weights: Mapping[str, np.ndarray], ids: Sequence[int],
            cache: list[list[np.ndarray]] | None = None, *, last_only: bool = False
            ) -> np.ndarray:
    """Logits for ``ids``, continuing the sequence ``cache`` holds.

    Args:
        config: the model.
        weights: float arrays by name.
        ids: the new tokens.
        cache: per layer ``[keys, values]`` (``[tokens, kv_heads, head_dim]``, rotated keys)
            of the tokens before ``ids``; extended in place. None for a fresh sequence.
        last_only: only the last token's logits (the head is the costliest matrix).

    Returns:
        ``float64 [len(ids), vocab]`` (``[1, vocab]`` with ``last_only``).
    """
    c = config
    if cache is None:
        cache = [[np.zeros((0, c.num_kv_heads, c.head_dim))] * 2 for _ in range(c.num_layers)]
    start = cache[0][0].shape[0] if cache else 0
    t = len(ids)
    pos = np.arange(start, start + t)
    x = np.asarray(weights["embed"], dtype=np.float64)[np.asarray(ids, dtype=np.int64)]
    group = c.num_heads // c.num_kv_heads
    # Query t (at absolute position start + t) sees keys 0 .. start + t.
    visible = np.arange(start + t)[None, :] <= pos[:, None]
    for i in range(c.num_layers):
        p = f"layers.{i}."
        h = rms_norm(x, weights[p + "attn_norm"], c.rms_eps)
        q = _linear(h, weights[p + "q"]).reshape(t, c.num_heads, c.head_dim)
        k = _linear(h, weights[p + "k"]).reshape(t, c.num_kv_heads, c.head_dim)
        v = _linear(h, weights[p + "v"]).reshape(t, c.num_kv_heads, c.head_dim)
        q = rope(q, pos, c.rope_theta, c.rope_pairs)
        k = rope(k, pos, c.rope_theta, c.rope_pairs)
        keys = np.concatenate([cache[i][0], k])
        values = np.concatenate([cache[i][1], v])
        cache[i][0], cache[i][1] = keys, values
        heads = []
        for hq in range(c.num_heads):
            kv = hq // group
            scores = q[:, hq, :] @ keys[:, kv, :].T / np.sqrt(c.head_dim)
            scores = np.where(visible, scores, -np.inf)
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            probs = scores / scores.sum(axis=-1, keepdims=True)
            heads.append(probs @ values[:, kv, :])
        attn = np.stack(heads, axis=1).reshape(t, c.num_heads * c.head_dim)
        x = x + _linear(attn, weights[p + "o"])
        h = rms_norm(x, weights[p + "ffn_norm"], c.rms_eps)
        gate = _linear(h, weights[p + "gate"])
        up = _linear(h, weights[p + "up"])
        x = x + _linear(gate / (1.0 + np.exp(-gate)) * up, weights[p + "down"])
    x = rms_norm(x[-1:] if last_only else x, weights["norm"], c.rms_eps)
    head = weights["embed"] if c.tie_embeddings else weights["output"]
    return _linear(x, head)


def reference_logits(config: LlamaConfig, weights: Mapping[str, np.ndarray],
                     ids: Sequence[int]) -> np.ndarray:
    """``float64 [len(ids), vocab]``: the logits after each token of ``ids`` (from 0)."""
    return forward(config, weights, ids)


def greedy(config: LlamaConfig, weights: Mapping[str, np.ndarray], ids: Sequence[int],
           steps: int) -> list[int]:
    """``steps`` tokens chosen by argmax after the prompt ``ids`` (lowest id on a tie)."""
    cache = [[np.zeros((0, config.num_kv_heads, config.head_dim))] * 2
             for _ in range(config.num_layers)]
    logits = forward(config, weights, ids, cache, last_only=True)[-1]
    out: list[int] = []
    for _ in range(steps):
        token = int(np.argmax(logits))
        out.append(token)
        if len(out) < steps:
            logits = forward(config, weights, [token], cache, last_only=True)[-1]
    return out


def top_margin(logits: np.ndarray) -> float:
    """Top-1 minus top-2 of a logits row (how safe the greedy choice is)."""
    top = np.sort(np.asarray(logits, dtype=np.float64))[-2:]
    return float(top[1] - top[0])
