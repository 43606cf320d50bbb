"""Loading a model directory: the installed files, and copies of them broken on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vkumd.errors import VkumdValueError
from vkumd.models import (
    ModelFileError,
    ModelNotFound,
    SafetensorsError,
    SentenceEncoder,
    find_model,
    load_model_files,
)

from .model_checks import WEIGHTS, edit_json, needs_model

pytestmark = needs_model


def _patch_weights(root: Path, old: bytes, new: bytes, *, cut: int | None = None) -> None:
    data = (root / WEIGHTS).read_bytes()
    (root / WEIGHTS).unlink()
    assert old in data[:20000]
    data = data.replace(old, new, 1)
    (root / WEIGHTS).write_bytes(data[:cut] if cut else data)


def test_the_installed_model_loads_whole(model_dir: Path) -> None:
    files = load_model_files("all-MiniLM-L6-v2")
    assert files.root == model_dir == find_model("sentence-transformers/all-MiniLM-L6-v2")
    c = files.config
    assert (c.hidden_size, c.num_layers, c.num_heads, c.intermediate_size) == (384, 6, 12, 1536)
    assert c.layer_norm_eps == 1e-12 and c.activation == "gelu"
    s = files.sentence
    assert (s.pooling, s.normalize, s.max_seq_length) == ("mean", True, 256)
    assert len(files.weights) == 5 + 16 * 6
    # tokenizer.json pads to 128 and truncates at 128; sentence-transformers does neither.
    assert len(files.tokenizer.encode("hi").ids) == 3
    assert len(files.tokenizer.encode("word " * 300).ids) == 256


def test_unknown_names_and_directories(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="'no-such-model': no such directory"):
        find_model("no-such-model")
    with pytest.raises(ModelFileError, match=r"config.json: the file is missing"):
        load_model_files(tmp_path)


@pytest.mark.parametrize("name, changes, text", [
    ("config.json", {"model_type": "gpt2", "architectures": ["GPT2Model"]},
     r"config.json: model_type='gpt2', architectures=\['GPT2Model'\]; only BERT"),
    ("config.json", {"hidden_act": "tanh"}, r"config.json: field 'hidden_act' = 'tanh'"),
    ("config.json", {"num_attention_heads": 5}, r"hidden_size 384 is not a multiple of "
     "num_attention_heads 5"),
    ("config.json", {"num_hidden_layers": 0}, r"field 'num_hidden_layers' = 0"),
    ("config.json", {"intermediate_size": 1024}, r"model.safetensors: tensor "
     r"'encoder.layer.0.intermediate.dense.weight' has shape \[1536, 384\]; config.json "
     r"implies \[1024, 384\]"),
    ("config.json", {"num_hidden_layers": 7}, r"tensor 'encoder.layer.6.\S+' is missing"),
    ("1_Pooling/config.json", {"pooling_mode_mean_tokens": False,
                               "pooling_mode_max_tokens": True},
     r"1_Pooling/config.json: pooling modes \['pooling_mode_max_tokens'\]"),
    ("sentence_bert_config.json", {"max_seq_length": 1000},
     r"field 'max_seq_length' = 1000 is past config.json's max_position_embeddings 512"),
])
def test_config_fields_that_cannot_run_are_refused(copy: Path, name, changes, text) -> None:
    edit_json(copy / name, **changes)
    with pytest.raises(ModelFileError, match=text):
        load_model_files(copy)


def test_modules_other_than_transformer_pooling_normalize(copy: Path) -> None:
    modules = json.loads((copy / "modules.json").read_text())
    modules.insert(2, {"idx": 2, "name": "2", "path": "2_Dense",
                       "type": "sentence_transformers.models.Dense"})
    (copy / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelFileError, match=r"modules.json: module type "
                       r"'sentence_transformers.models.Dense'"):
        load_model_files(copy)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "modules.json",
                                  "1_Pooling/config.json", "sentence_bert_config.json",
                                  WEIGHTS])
def test_a_missing_file_is_named(copy: Path, name: str) -> None:
    (copy / name).unlink()
    with pytest.raises(ModelFileError, match=f"{name}: the file is missing"):
        load_model_files(copy)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json", "modules.json"])
def test_a_corrupt_json_file_is_named(copy: Path, name: str) -> None:
    (copy / name).write_text('{"truncated": ')
    with pytest.raises(ModelFileError, match=f"{name}: (not valid JSON|tokenizers cannot)"):
        load_model_files(copy)


def test_truncated_weights(copy: Path) -> None:
    _patch_weights(copy, b"", b"", cut=50_000_000)
    with pytest.raises(SafetensorsError, match=r"model.safetensors: tensor '.*': data_offsets "
                       r"end at byte \d+ of the file, past its end \(50000000 bytes\)"):
        load_model_files(copy)


def test_weights_with_a_bad_json_header(copy: Path) -> None:
    _patch_weights(copy, b'{"__metadata__"', b'{"__metadata__[')
    with pytest.raises(SafetensorsError, match=r"model.safetensors: the \d+-byte header is "
                       "not valid JSON"):
        load_model_files(copy)


def test_weights_missing_a_tensor(copy: Path) -> None:
    name = b"encoder.layer.3.output.dense.bias"
    _patch_weights(copy, name, name[:-1] + b"_")
    with pytest.raises(SafetensorsError, match=r"model.safetensors: tensor "
                       r"'encoder.layer.3.output.dense.bias' is missing"):
        load_model_files(copy)


def test_nothing_stays_allocated_when_loading_fails(ctx, copy: Path, monkeypatch) -> None:
    before = ctx.memory.used_bytes()
    edit_json(copy / "config.json", model_type="roberta")
    with pytest.raises(ModelFileError):
        SentenceEncoder.from_pretrained(copy, ctx=ctx)
    with pytest.raises(VkumdValueError, match="dtype bfloat16 is not supported"):
        SentenceEncoder.from_pretrained("all-MiniLM-L6-v2", ctx=ctx, dtype="bfloat16")
    # An upload that fails half-way frees what it made.
    made = []
    real = ctx.tensor

    def failing(*args, **kwargs):
        if len(made) == 20:
            raise MemoryError("out of device memory (injected)")
        made.append(real(*args, **kwargs))
        return made[-1]

    monkeypatch.setattr(ctx, "tensor", failing)
    with pytest.raises(MemoryError, match="injected"):
        SentenceEncoder.from_pretrained("all-MiniLM-L6-v2", ctx=ctx)
    assert made and all(t.released for t in made)
    ctx.synchronize()
    assert ctx.memory.used_bytes() == before
