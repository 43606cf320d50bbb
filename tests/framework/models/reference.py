"""A float64 numpy BERT sentence encoder, written apart from vkumd's code path.

It reads the weights with its own few-line safetensors reader, sets up its own tokenizer from
``tokenizer.json`` (truncation at sentence-transformers' window, no padding) and runs one
sentence at a time (no padding, so no mask is needed; :func:`encode_padded` checks the masked
path). GELU is the erf form through ``math.erf``; layer norms use the config's eps.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every F32/F16 tensor of ``path`` as float64."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        kind = {"F32": "<f4", "F16": "<f2"}.get(entry["dtype"])
        if kind is None:
            continue
        begin, end = entry["data_offsets"]
        raw = np.frombuffer(data[8 + length + begin:8 + length + end], dtype=kind)
        out[name] = raw.astype(np.float64).reshape(entry["shape"])
    return out


class ReferenceEncoder:
    """The model in ``root`` (a sentence-transformers directory), in float64."""

    def __init__(self, root: Path) -> None:
        from tokenizers import Tokenizer

        self.config = json.loads((root / "config.json").read_text())
        window = json.loads((root / "sentence_bert_config.json").read_text())["max_seq_length"]
        self.tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self.tokenizer.no_padding()
        self.tokenizer.enable_truncation(max_length=window)
        self.w = read_safetensors(root / "model.safetensors")
        self.eps = self.config["layer_norm_eps"]

    def ids(self, sentence: str) -> list[int]:
        """Token ids with [CLS] and [SEP], truncated to the window."""
        return self.tokenizer.encode(sentence).ids

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        mean = x.mean(-1, keepdims=True)
        var = ((x - mean) ** 2).mean(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.eps) * self.w[name + ".weight"] + self.w[
            name + ".bias"]

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        return x @ self.w[name + ".weight"].T + self.w[name + ".bias"]

    def hidden(self, ids: list[int], mask: np.ndarray | None = None) -> np.ndarray:
        """Last hidden states ``(len, hidden)``; ``mask`` (len,) of bools hides keys."""
        w, c = self.w, self.config
        n = len(ids)
        x = (w["embeddings.word_embeddings.weight"][ids]
             + w["embeddings.position_embeddings.weight"][:n]
             + w["embeddings.token_type_embeddings.weight"][0])
        x = self._norm(x, "embeddings.LayerNorm")
        heads = c["num_attention_heads"]
        d = c["hidden_size"] // heads
        bias = np.zeros(n) if mask is None else np.where(mask, 0.0, -np.inf)
        for i in range(c["num_hidden_layers"]):
            p = f"encoder.layer.{i}."

            def split(t: np.ndarray) -> np.ndarray:
                return t.reshape(n, heads, d).transpose(1, 0, 2)

            q = split(self._linear(x, p + "attention.self.query"))
            k = split(self._linear(x, p + "attention.self.key"))
            v = split(self._linear(x, p + "attention.self.value"))
            scores = q @ k.transpose(0, 2, 1) / math.sqrt(d) + bias
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            probs = scores / scores.sum(-1, keepdims=True)
            mixed = (probs @ v).transpose(1, 0, 2).reshape(n, heads * d)
            x = self._norm(self._linear(mixed, p + "attention.output.dense") + x,
                           p + "attention.output.LayerNorm")
            inner = self._linear(x, p + "intermediate.dense")
            inner = 0.5 * inner * (1.0 + _erf(inner / math.sqrt(2.0)))
            x = self._norm(self._linear(inner, p + "output.dense") + x, p + "output.LayerNorm")
        return x

    def encode(self, sentences: list[str], normalize: bool = True) -> np.ndarray:
        """Mean-pooled (and L2-normalised) embeddings, float64 ``(n, hidden)``."""
        rows = []
        for sentence in sentences:
            pooled = self.hidden(self.ids(sentence)).mean(0)
            if normalize:
                pooled = pooled / max(np.linalg.norm(pooled), 1e-12)
            rows.append(pooled)
        return np.array(rows).reshape(len(sentences), self.config["hidden_size"])

    def encode_padded(self, sentence: str, pad_to: int) -> np.ndarray:
        """The embedding through the masked path: padded to ``pad_to`` tokens."""
        ids = self.ids(sentence)
        n = len(ids)
        mask = np.arange(pad_to) < n
        h = self.hidden(ids + [0] * (pad_to - n), mask)
        pooled = (h * mask[:, None]).sum(0) / n
        return pooled / max(np.linalg.norm(pooled), 1e-12)
