"""A tiny random Llama model for fast tests: a GGUF file (any storage type) and the same model
as a Hugging Face directory (config.json, model.safetensors, tokenizer.json).

The model: 2 layers, width 64, 4 query and 2 key/value heads of 16, SwiGLU 96, a byte-level
BPE vocabulary of 3 control tokens (``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``, ids
0-2, end of turn 2), the 256 byte tokens and a few dozen merges, a ChatML chat template. Both
writers return the weights actually stored (dequantised, float64, under the names of
:mod:`vkumd.framework.models.llama_weights`, in the file's own RoPE convention), which is what
``llama_reference.reference_logits`` takes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path

import numpy as np

from vkumd.framework.models.gguf_quant import dequantize, quantize
from vkumd.framework.models.llama_config import LlamaConfig
from vkumd.framework.models.llama_weights import GGUF_NAMES, HF_NAMES

from .gguf_writer import TensorSpec, Typed, write_gguf

CONTROL = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + "
          "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt "
          "%}{{ '<|im_start|>assistant\n' }}{% endif %}")
MERGES = ("Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "r e", "a t", "e n",
          "o r", "Ġ w", "Ġ o", "l l", "Ġ c", "i s", "Ġ i", "e s", "Ġ Ġ", "ĠĠ ĠĠ", "u s",
          "us er", "a s", "as s", "is t", "ass ist", "a n", "an t", "assist ant", "s y",
          "sy s", "t e", "te m", "sys tem", "he ll", "hell o", "Ġ h", "Ġ hello", "Ã ©",
          "Ċ Ċ", "o u", "Ġ y", "Ġy ou", "d e", "Ġ f", "Ġf or", "Ġ d", "Ġd e", "Ġ (")


def byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet: byte b -> the printable character standing for it."""
    keep = [*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def tiny_vocab() -> tuple[list[str], list[int], list[str]]:
    """The tiny model's tokens, token types (3 control, 1 normal) and merges."""
    tokens = [*CONTROL, *byte_chars()]
    known = set(tokens)
    for merge in MERGES:
        left, right = merge.split(" ")
        assert left in known and right in known, merge
        if left + right not in known:
            tokens.append(left + right)
            known.add(left + right)
    types = [3] * len(CONTROL) + [1] * (len(tokens) - len(CONTROL))
    return tokens, types, list(MERGES)


def tiny_config(**changes: object) -> LlamaConfig:
    """The tiny model's config (GGUF convention: adjacent RoPE pairs, tied head)."""
    base = LlamaConfig(vocab_size=len(tiny_vocab()[0]), hidden_size=64, intermediate_size=96,
                       num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                       rms_eps=float(np.float32(1e-5)),  # GGUF stores a float32
                       rope_theta=10000.0, rope_pairs="adjacent", context_length=256,
                       tie_embeddings=True, bos_id=None, eos_ids=(2, 0), chat_template=CHATML)
    return replace(base, **changes)  # type: ignore[arg-type]


def random_weights(config: LlamaConfig, seed: int) -> dict[str, np.ndarray]:
    """Random float64 weights of ``config``'s shapes, scaled so activations stay O(1)."""
    rng = np.random.default_rng(seed)
    d, f, hd = config.hidden_size, config.intermediate_size, config.head_dim
    out = {"embed": rng.standard_normal((config.vocab_size, d)),
           "norm": 1.0 + 0.1 * rng.standard_normal(d)}
    if not config.tie_embeddings:
        out["output"] = rng.standard_normal((config.vocab_size, d)) / np.sqrt(d)
    shapes = {"q": (config.num_heads * hd, d), "k": (config.num_kv_heads * hd, d),
              "v": (config.num_kv_heads * hd, d), "o": (d, config.num_heads * hd),
              "gate": (f, d), "up": (f, d), "down": (d, f)}
    for i in range(config.num_layers):
        out[f"layers.{i}.attn_norm"] = 1.0 + 0.1 * rng.standard_normal(d)
        out[f"layers.{i}.ffn_norm"] = 1.0 + 0.1 * rng.standard_normal(d)
        for name, shape in shapes.items():
            out[f"layers.{i}.{name}"] = rng.standard_normal(shape) / np.sqrt(shape[1])
    return out


def gguf_name(name: str) -> str:
    """The GGUF tensor name of a weight name (``layers.0.q`` -> ``blk.0.attn_q.weight``)."""
    if name.startswith("layers."):
        _, i, short = name.split(".")
        return f"blk.{i}.{GGUF_NAMES[short]}"
    return GGUF_NAMES[name]


def tiny_metadata(config: LlamaConfig) -> dict[str, object]:
    """The ``general.*``, ``llama.*`` and ``tokenizer.*`` metadata of the tiny model."""
    tokens, types, merges = tiny_vocab()
    meta: dict[str, object] = {
        "general.architecture": "llama", "general.name": "tiny-llama",
        "llama.block_count": config.num_layers,
        "llama.context_length": config.context_length,
        "llama.embedding_length": config.hidden_size,
        "llama.feed_forward_length": config.intermediate_size,
        "llama.attention.head_count": config.num_heads,
        "llama.attention.head_count_kv": config.num_kv_heads,
        "llama.rope.freq_base": config.rope_theta,
        "llama.attention.layer_norm_rms_epsilon": config.rms_eps,
        "llama.rope.dimension_count": config.head_dim,
        "llama.vocab_size": config.vocab_size,
        "tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": Typed("ARRAY", types, element="INT32"),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.padding_token_id": 2,
        "tokenizer.ggml.add_bos_token": config.bos_id is not None,
    }
    if config.chat_template is not None:
        meta["tokenizer.chat_template"] = config.chat_template
    return meta


def write_tiny_gguf(path: str | Path, config: LlamaConfig | None = None, qtype: str = "Q8_0",
                    seed: int = 0, *, embed_qtype: str | None = None, norm_qtype: str = "F32",
                    alignment: int = 32, metadata: dict[str, object] | None = None
                    ) -> dict[str, np.ndarray]:
    """Write a random tiny Llama GGUF.

    Args:
        path: the file to write.
        config: the model's shape (default :func:`tiny_config`; every row length a multiple
            of 32 for the quantized types).
        qtype: the projections' storage type (F32, F16, BF16, Q8_0, Q4_0, Q4_1).
        seed: the weights' random seed.
        embed_qtype: the embedding's (and untied output head's) type; default ``qtype``.
        norm_qtype: the norms' type.
        alignment: the data section's alignment.
        metadata: keys to add or replace (``None`` as a value removes the key).

    Returns:
        The stored weights dequantised to float64, by :mod:`llama_weights` name.
    """
    config = config or tiny_config()
    weights = random_weights(config, seed)
    stored: dict[str, np.ndarray] = {}
    specs: dict[str, TensorSpec] = {}
    for name, w in weights.items():
        kind = (norm_qtype if w.ndim == 1 else
                (embed_qtype or qtype) if name in ("embed", "output") else qtype)
        raw = quantize(w, kind)
        k = w.shape[-1]
        stored[name] = dequantize(raw.reshape(-1, raw.shape[-1]), kind, k).reshape(
            w.shape).astype(np.float64)
        specs[gguf_name(name)] = TensorSpec(w.shape, kind, raw.tobytes())
    meta = tiny_metadata(config)
    for key, value in (metadata or {}).items():
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
    write_gguf(path, meta, specs, alignment=alignment)
    return stored


def halves_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Query/key rows from GGUF's adjacent-pair order to Hugging Face's halves order
    (the inverse of llama.cpp's conversion permutation)."""
    n, k = w.shape
    return w.reshape(heads, n // heads // 2, 2, k).swapaxes(1, 2).reshape(n, k)


def adjacent_rows(w: np.ndarray, heads: int) -> np.ndarray:
    """Query/key rows from Hugging Face's halves order to GGUF's adjacent-pair order."""
    n, k = w.shape
    return w.reshape(heads, 2, n // heads // 2, k).swapaxes(1, 2).reshape(n, k)


def hf_name(name: str) -> str:
    """The Hugging Face tensor name of a weight name."""
    if name.startswith("layers."):
        _, i, short = name.split(".")
        return f"model.layers.{i}.{HF_NAMES[short]}"
    return HF_NAMES[name]


def write_tiny_hf(root: str | Path, config: LlamaConfig | None = None, seed: int = 0
                  ) -> dict[str, np.ndarray]:
    """Write the tiny model as a Hugging Face directory (float32 safetensors).

    The weights are :func:`random_weights` ``(config, seed)`` with the query/key rows put in
    the halves order, so the model computes what the GGUF of the same seed (float32)
    computes with adjacent pairs.

    Returns:
        The stored weights (float64, halves order), by :mod:`llama_weights` name.
    """
    from vkumd.framework.models.llama_tokenizer import tokenizer_from_vocab

    config = config or tiny_config()
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    weights = random_weights(config, seed)
    for i in range(config.num_layers):
        for short, heads in (("q", config.num_heads), ("k", config.num_kv_heads)):
            key = f"layers.{i}.{short}"
            weights[key] = halves_rows(weights[key], heads)
    weights = {k: v.astype(np.float32).astype(np.float64) for k, v in weights.items()}
    header: dict[str, object] = {}
    blobs, offset = [], 0
    for name, w in weights.items():
        blob = w.astype("<f4").tobytes()
        header[hf_name(name)] = {"dtype": "F32", "shape": list(w.shape),
                                 "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    head = json.dumps(header).encode()
    (root / "model.safetensors").write_bytes(struct.pack("<Q", len(head)) + head
                                             + b"".join(blobs))
    hf = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
          "vocab_size": config.vocab_size, "hidden_size": config.hidden_size,
          "intermediate_size": config.intermediate_size,
          "num_hidden_layers": config.num_layers,
          "num_attention_heads": config.num_heads,
          "num_key_value_heads": config.num_kv_heads, "head_dim": config.head_dim,
          "rms_norm_eps": config.rms_eps, "rope_theta": config.rope_theta,
          "max_position_embeddings": config.context_length,
          "tie_word_embeddings": config.tie_embeddings,
          "bos_token_id": 1, "eos_token_id": list(config.eos_ids)}
    (root / "config.json").write_text(json.dumps(hf))
    (root / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": config.chat_template, "add_bos_token": False}))
    tokens, types, merges = tiny_vocab()
    tokenizer_from_vocab(tokens, types, merges).save(str(root / "tokenizer.json"))
    return weights
