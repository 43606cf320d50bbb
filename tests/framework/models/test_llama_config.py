"""LlamaConfig and the weight loaders: what the files say, and every refusal."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vkumd.framework.models.errors import ModelFileError, UnsupportedModelError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.llama_config import config_from_gguf, config_from_hf
from vkumd.framework.models.llama_weights import (
    expected_shapes,
    load_gguf_weights,
    load_hf_weights,
)

from .gguf_writer import Typed
from .smollm2 import need_smollm2
from .tiny_llama import tiny_config, write_tiny_gguf, write_tiny_hf


def test_smollm2_config_and_weights() -> None:
    with GGUFFile(need_smollm2()) as f:
        config = config_from_gguf(f)
        weights = load_gguf_weights(f, config)
    assert (config.num_layers, config.hidden_size, config.intermediate_size) == (30, 576, 1536)
    assert (config.num_heads, config.num_kv_heads, config.head_dim) == (9, 3, 64)
    assert config.rope_theta == 100000.0 and config.rope_pairs == "adjacent"
    assert config.rms_eps == pytest.approx(1e-5) and config.vocab_size == 49152
    assert config.tie_embeddings and config.bos_id is None and config.eos_ids == (2, 0)
    assert config.context_length == 8192 and "<|im_start|>" in config.chat_template
    assert len(weights) == 2 + 30 * 9 and "output" not in weights
    assert weights["embed"].qtype == "Q8_0" and weights["embed"].data.shape == (49152, 18 * 34)
    q = weights["layers.7.q"]
    assert q.qtype == "Q4_1" and q.shape == (576, 576) and q.data.shape == (576, 18 * 20)
    assert weights["layers.0.down"].data.shape == (576, 48 * 20)
    assert weights["norm"].qtype == "F32" and weights["norm"].data.dtype == np.float32


@pytest.mark.parametrize("changes,error,match", [
    ({"general.architecture": "qwen2"}, UnsupportedModelError, "'qwen2'; vkumd runs"),
    ({"general.architecture": None}, UnsupportedModelError, "architecture is None"),
    ({"llama.block_count": None}, ModelFileError, "'llama.block_count' is missing"),
    ({"llama.embedding_length": "64"}, ModelFileError, "an integer was expected"),
    ({"llama.attention.head_count_kv": 3}, ModelFileError, "do not group"),
    ({"llama.rope.dimension_count": 8}, UnsupportedModelError, "covers 8 of 16"),
    ({"llama.attention.layer_norm_rms_epsilon": Typed("FLOAT32", -1.0)}, ModelFileError,
     "rms_eps is -1.0"),
    ({"llama.context_length": 0}, ModelFileError, "context_length is 0"),
    ({"llama.rope.freq_base": "big"}, ModelFileError, "freq_base' is 'big'; a number"),
    ({"tokenizer.ggml.eos_token_id": 5000}, ModelFileError, "5000 is outside"),
])
def test_bad_gguf_configs(tmp_path: Path, changes: dict, error: type[Exception], match: str
                          ) -> None:
    path = tmp_path / "c.gguf"
    write_tiny_gguf(path, metadata=changes)
    with GGUFFile(path) as f, pytest.raises(error, match=match):
        config_from_gguf(f)


def test_bos_follows_add_bos_token(tmp_path: Path) -> None:
    path = tmp_path / "b.gguf"
    write_tiny_gguf(path, config=tiny_config(bos_id=1))
    with GGUFFile(path) as f:
        assert config_from_gguf(f).bos_id == 1


def test_missing_and_misshapen_tensors_are_named(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    write_tiny_gguf(path)
    with GGUFFile(path) as f:
        config = config_from_gguf(f)
        assert set(load_gguf_weights(f, config)) == set(expected_shapes(config))
        untied = config.__class__(**{**config.__dict__, "tie_embeddings": False})
        with pytest.raises(ModelFileError, match="does not have: output.weight"):
            load_gguf_weights(f, untied)
        wider = config.__class__(**{**config.__dict__, "intermediate_size": 128})
        with pytest.raises(ModelFileError, match=r"'blk.0.ffn_gate.weight' has shape "
                                                 r"\[96, 64\]; the config needs \[128, 64\]"):
            load_gguf_weights(f, wider)
        deeper = config.__class__(**{**config.__dict__, "num_layers": 5})
        with pytest.raises(ModelFileError, match="blk.2.attn_norm.weight, .* and 22 more"):
            load_gguf_weights(f, deeper)


def test_quantized_norms_are_refused_and_bf16_widened(tmp_path: Path) -> None:
    path = tmp_path / "n.gguf"
    write_tiny_gguf(path, norm_qtype="Q8_0", qtype="F16")
    with GGUFFile(path) as f, pytest.raises(ModelFileError, match="norm .* stored as Q8_0"):
        load_gguf_weights(f, config_from_gguf(f))
    stored = write_tiny_gguf(path, qtype="BF16", norm_qtype="BF16")
    with GGUFFile(path) as f:
        weights = load_gguf_weights(f, config_from_gguf(f))
    assert weights["layers.0.q"].qtype == "F32" and weights["norm"].qtype == "F32"
    np.testing.assert_array_equal(weights["layers.0.q"].data, stored["layers.0.q"])
    f16 = write_tiny_gguf(path, qtype="F16")
    with GGUFFile(path) as f:
        h = load_gguf_weights(f, config_from_gguf(f))["layers.1.up"]
    assert h.qtype == "F16" and h.data.dtype == np.float16
    np.testing.assert_array_equal(h.dequantize(), f16["layers.1.up"])


def test_hf_config_refusals(tmp_path: Path) -> None:
    root = tmp_path / "hf"
    write_tiny_hf(root)
    good = json.loads((root / "config.json").read_text())
    assert config_from_hf(root).eos_ids == (2, 0)
    cases = [({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]},
              UnsupportedModelError, "LlamaForCausalLM only"),
             ({"rope_scaling": {"type": "linear", "factor": 2}}, UnsupportedModelError,
              "rope_scaling"),
             ({"hidden_size": None}, ModelFileError, "'hidden_size' is None"),
             ({"rope_theta": "1e4"}, ModelFileError, "'rope_theta' is '1e4'; a number"),
             ({"num_key_value_heads": 5}, ModelFileError, "do not group")]
    for change, error, match in cases:
        (root / "config.json").write_text(json.dumps({**good, **change}))
        with pytest.raises(error, match=match):
            config_from_hf(root)
    (root / "config.json").write_text("{not json")
    with pytest.raises(ModelFileError, match="not valid JSON"):
        config_from_hf(root)
    (root / "config.json").unlink()
    with pytest.raises(ModelFileError, match="missing"):
        config_from_hf(root)


def test_hf_weights_refusals(tmp_path: Path) -> None:
    root = tmp_path / "hf"
    write_tiny_hf(root)
    config = config_from_hf(root)
    untied = config.__class__(**{**config.__dict__, "tie_embeddings": False})
    with pytest.raises(ModelFileError, match="does not have: lm_head.weight"):
        load_hf_weights(root, untied)
    (root / "model.safetensors").unlink()
    (root / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(ModelFileError, match="sharded"):
        load_hf_weights(root, config)


def test_any_wrong_value_is_a_model_file_error(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    keys = ["llama.block_count", "llama.context_length", "llama.embedding_length",
            "llama.feed_forward_length", "llama.attention.head_count",
            "llama.attention.head_count_kv", "llama.rope.freq_base",
            "llama.attention.layer_norm_rms_epsilon", "llama.rope.dimension_count",
            "llama.vocab_size", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.bos_token_id"]
    values = ["x", True, [1, 2], Typed("INT32", -3), 0, Typed("UINT64", 2**40),
              Typed("FLOAT32", float("nan")), Typed("FLOAT32", float("inf"))]
    accepted = []
    for key in keys:
        for value in values:
            extra = {"tokenizer.ggml.add_bos_token": True} if "bos" in key else {}
            write_tiny_gguf(path, metadata={key: value, **extra})
            with GGUFFile(path) as f:
                try:
                    config_from_gguf(f)
                except ModelFileError:
                    continue
            accepted.append((key, getattr(value, "value", value)))
    # Only values that still describe a consistent model pass.
    assert accepted == [("llama.rope.freq_base", 2**40),
                        ("llama.attention.layer_norm_rms_epsilon", 2**40),
                        ("tokenizer.ggml.eos_token_id", 0), ("tokenizer.ggml.bos_token_id", 0)]
