"""Model directories as untrusted input: FIFOs, files that shrink, configs that lie.

Each case that could hang, allocate gigabytes or kill the process on a regression runs in a
child process (``tests/isolated.py``) with a timeout and an address-space limit.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from isolated import run_isolated

from vkumd.models import ModelFileError, SafetensorsError, SafetensorsFile, load_model_files

from .model_checks import WEIGHTS, edit_json, needs_model


def _write(path: Path, header: object, payload: bytes = b"") -> Path:
    blob = header if isinstance(header, bytes) else json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + payload)
    return path


@pytest.mark.parametrize("kind", ["safetensors", "config", "tokenizer"])
def test_a_fifo_is_refused_not_waited_on(tmp_path: Path, kind: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    call = {"safetensors": "SafetensorsFile(path)",
            "config": "read_bert_config(path)",
            "tokenizer": "load_tokenizer(path, 128)"}[kind]
    done = run_isolated(
        """
        from pathlib import Path
        from vkumd.models import ModelFileError, SafetensorsFile
        from vkumd.framework.models.config import read_bert_config
        from vkumd.framework.models.loader import load_tokenizer
        """, f"""
        path = Path({str(fifo)!r})
        try:
            {call}
        except ModelFileError as exc:
            print("refused:", exc)
        """, timeout=30)
    assert done.returncode == 0, done.stderr
    if kind == "tokenizer" and "needs the tokenizers package" in done.stdout:
        pytest.skip("tokenizers is not installed")
    assert f"refused: {fifo}: this is a FIFO (named pipe)" in done.stdout, done.stdout


def test_a_directory_is_refused_by_name(tmp_path: Path) -> None:
    with pytest.raises(SafetensorsError, match=r"this is a directory; model files are read "
                       "only from regular files"):
        SafetensorsFile(tmp_path)


def test_a_file_truncated_while_open_is_an_error_not_sigbus(tmp_path: Path) -> None:
    path = tmp_path / "w.safetensors"
    _write(path, {"w": {"dtype": "F32", "shape": [4096],
                        "data_offsets": [0, 4 * 4096]}}, b"\0" * 4 * 4096)
    done = run_isolated(
        "from vkumd.models import SafetensorsError, SafetensorsFile",
        f"""
        import os
        f = SafetensorsFile({str(path)!r})
        os.truncate({str(path)!r}, 100)
        try:
            f.read("w")
        except SafetensorsError as exc:
            print("refused:", exc)
        """, timeout=60)
    assert done.returncode == 0, f"killed by signal {-done.returncode}: {done.stderr}"
    assert "refused:" in done.stdout and "truncated or changed while being read" in done.stdout


@pytest.mark.parametrize("header, text", [
    (b'{"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "a": {"dtype": "F32", '
     b'"shape": [1], "data_offsets": [4, 8]}}', r"not valid JSON .*the key 'a' appears twice"),
    (b"[" * 100000 + b"]" * 100000, r"header is not valid JSON \(RecursionError"),
    ({"w": {"dtype": "F32", "shape": [0, 2**70], "data_offsets": [0, 0]}},
     r"tensor 'w': shape \[0, 1180591620717411303424\] has more than 64 dimensions or one "
     r"above"),
    ({"w": {"dtype": "F32", "shape": [1] * 100, "data_offsets": [0, 4]}},
     r"more than 64 dimensions"),
    ({"w": {"dtype": "F32", "shape": [2**40, 2**40], "data_offsets": [0, 8]}},
     r"hold 8 bytes; a F32 tensor of shape \[1099511627776, 1099511627776\] needs"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [2**70, 2**70 + 8]}},
     r"data_offsets end at byte \d+ of the file, past its end"),
    ({"w": {"dtype": "F32", "shape": "2", "data_offsets": [0, 8]}}, r"is not a list"),
    ({"w": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}},
     r"dtype .\['F32'\]. is not a safetensors dtype"),
    ({"__metadata__": {"format": {"nested": 1}}}, r"__metadata__ must be an object of strings"),
    ("a string", r"the header is a JSON str"),
])
def test_hostile_headers_name_the_file(tmp_path: Path, header: object, text: str) -> None:
    path = _write(tmp_path / "bad.safetensors", header, b"\0" * 8)
    with pytest.raises(SafetensorsError, match=text) as info:
        SafetensorsFile(path)
    assert str(path) in str(info.value)


def test_a_header_length_past_the_file_allocates_nothing(tmp_path: Path) -> None:
    path = tmp_path / "huge.safetensors"
    path.write_bytes(struct.pack("<Q", 2**63) + b"{}")
    with pytest.raises(SafetensorsError, match=r"header length field says 9223372036854775808 "
                       r"bytes but the file has 2 after it"):
        SafetensorsFile(path)


def test_reads_still_own_their_memory(tmp_path: Path) -> None:
    a = np.arange(6, dtype="<f4").reshape(2, 3)
    path = _write(tmp_path / "w.safetensors",
                  {"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}}, a.tobytes())
    with SafetensorsFile(path) as f:
        got = f.read("a")
    got[0, 0] = 7  # writable, and alive after the file closed
    np.testing.assert_array_equal(got[1], a[1])


@pytest.mark.parametrize("content, text", [
    (b"\xff\xfe", r"config.json: cannot read it"),
    (b"[" * 100000, r"config.json: not "),
    (b'{"vocab_size": 1' + b"0" * 5000 + b"}", r"config.json: not a JSON file vkumd reads"),
    (b"[1, 2]", r"config.json: expected a JSON object, found list"),
])
def test_config_json_that_is_not_a_config(tmp_path: Path, content: bytes, text: str) -> None:
    from vkumd.framework.models.config import read_bert_config

    (tmp_path / "config.json").write_bytes(content)
    with pytest.raises(ModelFileError, match=text):
        read_bert_config(tmp_path / "config.json")


_BERT = {"model_type": "bert", "architectures": ["BertModel"], "vocab_size": 100,
         "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
         "intermediate_size": 128, "max_position_embeddings": 32}


@pytest.mark.parametrize("changes, text", [
    ({"hidden_act": ["gelu"]}, r"field 'hidden_act' = \['gelu'\]"),
    ({"hidden_size": "64"}, r"field 'hidden_size' = 64; it must be an int >= 1"),
    ({"vocab_size": 10**30}, r"field 'vocab_size' = 10{30} is more than 16777216, the most"),
    ({"num_hidden_layers": 10**9}, r"field 'num_hidden_layers' = 1000000000 is more than 1024"),
    ({"num_attention_heads": 10**12}, r"field 'num_attention_heads' = 1000000000000 is more"),
    ({"layer_norm_eps": "1e-12"}, r"field 'layer_norm_eps' = '1e-12'"),
    ({"layer_norm_eps": 1e300}, r"field 'layer_norm_eps' = 1e\+300; it must be a number from"),
    ({"layer_norm_eps": 10**400}, r"field 'layer_norm_eps' = 1000"),
    ({"layer_norm_eps": -1e-5}, r"field 'layer_norm_eps' = -1e-05"),
])
def test_config_fields_of_the_wrong_type_or_size(tmp_path: Path, changes: dict, text: str
                                                 ) -> None:
    from vkumd.framework.models.config import read_bert_config

    (tmp_path / "config.json").write_text(json.dumps({**_BERT, **changes}))
    with pytest.raises(ModelFileError, match=text) as info:
        read_bert_config(tmp_path / "config.json")
    assert "config.json" in str(info.value)


@needs_model
def test_a_billion_layers_is_refused_at_once(copy: Path) -> None:
    edit_json(copy / "config.json", num_hidden_layers=10**9)
    done = run_isolated(
        "from vkumd.models import ModelFileError, load_model_files",
        f"""
        try:
            load_model_files({str(copy)!r})
        except ModelFileError as exc:
            print("refused:", exc)
        """, timeout=60, address_space_gib=6)
    assert done.returncode == 0, done.stderr
    assert "field 'num_hidden_layers' = 1000000000 is more than 1024" in done.stdout
    assert done.growth_mib < 256, done.growth_mib


@needs_model
def test_fewer_layers_in_the_config_than_in_the_weights_is_refused(copy: Path) -> None:
    edit_json(copy / "config.json", num_hidden_layers=1)
    with pytest.raises(ModelFileError, match=r"model.safetensors: the file has 6 encoder "
                       r"layers, among them layers 1..5 that config.json's field "
                       r"'num_hidden_layers' = 1 does not use"):
        load_model_files(copy)


@needs_model
def test_more_layers_in_the_config_than_in_the_weights_reads_nothing(copy: Path) -> None:
    edit_json(copy / "config.json", num_hidden_layers=9)
    with pytest.raises(SafetensorsError, match=r"tensor 'encoder.layer.6.\S+' is missing"):
        load_model_files(copy)


@needs_model
def test_a_pooling_module_outside_the_model_directory_is_refused(copy: Path) -> None:
    modules = json.loads((copy / "modules.json").read_text())
    modules[1]["path"] = "../../elsewhere"
    (copy / "modules.json").write_text(json.dumps(modules))
    with pytest.raises(ModelFileError, match=r"modules.json: module path '../../elsewhere' "
                       "leads outside the model directory"):
        load_model_files(copy)


@needs_model
def test_weights_truncated_after_the_header_are_refused_before_any_read(copy: Path) -> None:
    data = (copy / WEIGHTS).read_bytes()
    (copy / WEIGHTS).unlink()
    (copy / WEIGHTS).write_bytes(data[: len(data) // 2])
    with pytest.raises(SafetensorsError, match=r"past its end .*the file is truncated"):
        load_model_files(copy)
