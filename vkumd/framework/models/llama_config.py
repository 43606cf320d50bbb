"""A Llama-family decoder's shape, from a GGUF file's metadata or a Hugging Face config.json.

The two sources differ in one convention that changes the numbers: GGUF files (converted by
llama.cpp) store the query and key rows permuted so that rotary embedding turns *adjacent*
pairs ``(2i, 2i+1)``; Hugging Face checkpoints turn the two *halves* ``(i, i + d/2)``.
:attr:`LlamaConfig.rope_pairs` records which, and the weights are used as stored.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vkumd.framework.models.errors import ModelFileError, UnsupportedModelError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.untrusted import read_regular

ROPE_PAIRS = ("adjacent", "halves")
# Tokens that end generation besides the declared end-of-sequence/turn ids (llama.cpp's list).
END_OF_GENERATION = frozenset({"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                               "<|endoftext|>", "<|eom_id|>", "<EOT>", "_<EOT>"})
_MAX_CONFIG_BYTES = 1 << 20
# Every size is checked against this: far past any real model, small enough that products
# of two of them stay exact integers.
_MAX_SIZE = 1 << 24


@dataclass(frozen=True)
class LlamaConfig:
    """The hyper-parameters of a Llama-architecture decoder.

    Attributes:
        vocab_size: tokens in the vocabulary (rows of the embedding).
        hidden_size: the model width ``d``.
        intermediate_size: the SwiGLU feed-forward width.
        num_layers: transformer blocks.
        num_heads: query heads.
        num_kv_heads: key/value heads (``num_heads`` is a multiple of it: grouped queries).
        head_dim: width of one head.
        rms_eps: the RMS norms' epsilon.
        rope_theta: rotary embedding's base.
        rope_pairs: ``"adjacent"`` (GGUF) or ``"halves"`` (Hugging Face).
        context_length: the longest context the model was trained for.
        tie_embeddings: the output head is the token embedding.
        bos_id: the token put before a prompt, or None when the model adds none.
        eos_ids: tokens that end generation (the declared end of sequence first).
        chat_template: the model's Jinja chat template, or None.
    """

    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_eps: float
    rope_theta: float
    rope_pairs: str
    context_length: int
    tie_embeddings: bool
    bos_id: int | None
    eos_ids: tuple[int, ...]
    chat_template: str | None = None

    def check(self, source: str) -> LlamaConfig:
        """Return self after checking the sizes are consistent.

        Args:
            source: where the config came from, for the messages.

        Raises:
            ModelFileError: a size is not a positive integer in range, the heads do not
                group, or a special token id is outside the vocabulary.
        """
        for field in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                      "num_heads", "num_kv_heads", "head_dim", "context_length"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or not (
                    0 < value <= _MAX_SIZE):
                raise ModelFileError(f"{source}: {field} is {value!r}; it must be an integer "
                                     f"from 1 to {_MAX_SIZE}")
        if self.num_heads % self.num_kv_heads:
            raise ModelFileError(f"{source}: {self.num_heads} query heads do not group over "
                                 f"{self.num_kv_heads} key/value heads (a multiple is needed)")
        if self.head_dim % 2:
            raise ModelFileError(f"{source}: head_dim {self.head_dim} is odd; rotary "
                                 "embedding turns pairs")
        if self.rope_pairs not in ROPE_PAIRS:
            raise ModelFileError(f"{source}: rope_pairs {self.rope_pairs!r} is not one of "
                                 f"{ROPE_PAIRS}")
        for what, value in (("rms_eps", self.rms_eps), ("rope_theta", self.rope_theta)):
            if not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                raise ModelFileError(f"{source}: {what} is {value!r}; it must be positive")
        for tid in ((self.bos_id,) if self.bos_id is not None else ()) + self.eos_ids:
            if isinstance(tid, bool) or not isinstance(tid, int) or not (
                    0 <= tid < self.vocab_size):
                raise ModelFileError(f"{source}: special token id {tid!r} is outside the "
                                     f"vocabulary of {self.vocab_size}")
        return self


def _need(meta: dict[str, Any], key: str, source: str, kind: type = int) -> Any:
    if key not in meta:
        raise ModelFileError(f"{source}: metadata {key!r} is missing; it is needed to build "
                             "the model")
    value = meta[key]
    ok = (isinstance(value, (int, float)) and not isinstance(value, bool)) if kind is float \
        else (isinstance(value, kind) and not isinstance(value, bool))
    if not ok:
        raise ModelFileError(f"{source}: metadata {key!r} is {value!r}; "
                             f"{'a number' if kind is float else 'an integer'} was expected")
    return value


def _number(meta: dict[str, Any], key: str, default: float, source: str) -> float:
    value = meta.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ModelFileError(f"{source}: {key!r} is {value!r}; a number was expected")
    return float(value)


def config_from_gguf(gguf: GGUFFile) -> LlamaConfig:
    """The config a GGUF file's ``llama.*`` and ``tokenizer.*`` metadata describe.

    Args:
        gguf: the open file.

    Returns:
        Its :class:`LlamaConfig` (``rope_pairs="adjacent"``; tied when the file has no
        ``output.weight``).

    Raises:
        UnsupportedModelError: ``general.architecture`` is not ``llama``, or its rotary
            embedding covers only part of each head.
        ModelFileError: a needed key is missing or of the wrong type, or the sizes disagree.
    """
    meta, source = gguf.metadata, str(gguf.path)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise UnsupportedModelError(f"{source}: the model's architecture is {arch!r}; vkumd "
                                    "runs 'llama' (Llama, SmolLM, Mistral-style models) only")
    hidden = _need(meta, "llama.embedding_length", source)
    heads = _need(meta, "llama.attention.head_count", source)
    head_dim = meta.get("llama.attention.key_length", hidden // heads if heads else 0)
    rope_dims = meta.get("llama.rope.dimension_count", head_dim)
    if rope_dims != head_dim:
        raise UnsupportedModelError(f"{source}: rotary embedding covers {rope_dims} of "
                                    f"{head_dim} head dimensions; vkumd rotates whole heads")
    tokens = meta.get("tokenizer.ggml.tokens")
    vocab = meta.get("llama.vocab_size", len(tokens) if isinstance(tokens, list) else None)
    if vocab is None:
        raise ModelFileError(f"{source}: neither llama.vocab_size nor tokenizer.ggml.tokens "
                             "says how large the vocabulary is")
    if "tokenizer.ggml.add_bos_token" in meta:
        add_bos = bool(meta["tokenizer.ggml.add_bos_token"])
    else:  # llama.cpp's default: SentencePiece vocabularies add one, byte-level BPE does not
        add_bos = meta.get("tokenizer.ggml.model") == "llama"
    bos = meta.get("tokenizer.ggml.bos_token_id") if add_bos else None
    eos = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                             "tokenizer.ggml.eom_token_id") if k in meta]
    for tid in eos + [bos]:
        if tid is not None and (isinstance(tid, bool) or not isinstance(tid, int)):
            raise ModelFileError(f"{source}: special token id {tid!r} is not an integer")
    if isinstance(tokens, list):  # llama.cpp also ends generation at these, when present
        eos += [i for i, t in enumerate(tokens) if t in END_OF_GENERATION]
    eos = tuple(dict.fromkeys(eos))
    template = meta.get("tokenizer.chat_template")
    return LlamaConfig(
        vocab_size=vocab, hidden_size=hidden,
        intermediate_size=_need(meta, "llama.feed_forward_length", source),
        num_layers=_need(meta, "llama.block_count", source),
        num_heads=heads,
        num_kv_heads=meta.get("llama.attention.head_count_kv", heads),
        head_dim=head_dim,
        rms_eps=float(_need(meta, "llama.attention.layer_norm_rms_epsilon", source, float)),
        rope_theta=_number(meta, "llama.rope.freq_base", 10000.0, source),
        rope_pairs="adjacent",
        context_length=_need(meta, "llama.context_length", source),
        tie_embeddings="output.weight" not in gguf.tensors,
        bos_id=bos, eos_ids=eos,
        chat_template=template if isinstance(template, str) else None,
    ).check(source)


def config_from_hf(path: str | os.PathLike[str]) -> LlamaConfig:
    """The config of a Hugging Face ``LlamaForCausalLM`` directory (its ``config.json``,
    and ``tokenizer_config.json``'s chat template when present).

    Args:
        path: the model directory.

    Returns:
        Its :class:`LlamaConfig` (``rope_pairs="halves"``).

    Raises:
        UnsupportedModelError: the config is not a Llama model, or uses RoPE scaling.
        ModelFileError: config.json is missing, not JSON, or lacks a needed field.
    """
    root = Path(path)
    source = str(root / "config.json")
    try:
        cfg = json.loads(read_regular(root / "config.json", _MAX_CONFIG_BYTES))
    except (ValueError, UnicodeDecodeError) as exc:
        raise ModelFileError(f"{source}: not valid JSON ({exc})") from None
    if not isinstance(cfg, dict):
        raise ModelFileError(f"{source}: not a JSON object")
    archs = cfg.get("architectures") or []
    if cfg.get("model_type") != "llama" and "LlamaForCausalLM" not in archs:
        raise UnsupportedModelError(f"{source}: model_type {cfg.get('model_type')!r} "
                                    f"({archs}); vkumd runs LlamaForCausalLM only")
    if cfg.get("rope_scaling"):
        raise UnsupportedModelError(f"{source}: rope_scaling {cfg['rope_scaling']!r} is not "
                                    "supported yet")
    hidden = _need(cfg, "hidden_size", source)
    heads = _need(cfg, "num_attention_heads", source)
    template, add_bos = None, False
    tok_cfg = root / "tokenizer_config.json"
    if tok_cfg.exists():
        try:
            tc = json.loads(read_regular(tok_cfg, 16 * _MAX_CONFIG_BYTES))
        except (ValueError, UnicodeDecodeError) as exc:
            raise ModelFileError(f"{tok_cfg}: not valid JSON ({exc})") from None
        if isinstance(tc, dict):
            template, add_bos = tc.get("chat_template"), tc.get("add_bos_token") is True
    eos = cfg.get("eos_token_id")
    eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (eos,))
    return LlamaConfig(
        vocab_size=_need(cfg, "vocab_size", source), hidden_size=hidden,
        intermediate_size=_need(cfg, "intermediate_size", source),
        num_layers=_need(cfg, "num_hidden_layers", source),
        num_heads=heads,
        num_kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or (hidden // heads if heads else 0),
        rms_eps=_number(cfg, "rms_norm_eps", 1e-6, source),
        rope_theta=_number(cfg, "rope_theta", 10000.0, source),
        rope_pairs="halves",
        context_length=cfg.get("max_position_embeddings", 2048),
        tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        # The tokenizer adds no special tokens itself (encode with add_special_tokens=False);
        # the caller puts bos_id first, as for a GGUF model.
        bos_id=cfg.get("bos_token_id") if add_bos else None, eos_ids=eos_ids,
        chat_template=template if isinstance(template, str) else None,
    ).check(source)


__all__ = ["LlamaConfig", "ROPE_PAIRS", "config_from_gguf", "config_from_hf"]
