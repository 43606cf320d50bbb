"""The safetensors reader on small files written here: round trips and every corruption."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest

from vkumd.models import SafetensorsError, SafetensorsFile


def write(path: Path, header: dict, payload: bytes) -> Path:
    blob = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(blob)) + blob + payload)
    return path


def test_float32_float16_bfloat16_round_trip(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4)).astype("<f4")
    b = rng.standard_normal(5).astype("<f2")
    c = np.array([1.0, -2.5, 2.0**100], dtype=np.float32)
    c_bits = (c.view(np.uint32) >> 16).astype("<u2")  # exact in bfloat16
    ids = np.arange(4, dtype="<i8")
    parts = [a.tobytes(), b.tobytes(), c_bits.tobytes(), ids.tobytes()]
    offsets = np.cumsum([0] + [len(p) for p in parts]).tolist()
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [3, 4], "data_offsets": offsets[0:2]},
              "b": {"dtype": "F16", "shape": [5], "data_offsets": offsets[1:3]},
              "c": {"dtype": "BF16", "shape": [3], "data_offsets": offsets[2:4]},
              "ids": {"dtype": "I64", "shape": [4], "data_offsets": offsets[3:5]}}
    with SafetensorsFile(write(tmp_path / "w.safetensors", header, b"".join(parts))) as f:
        assert f.metadata == {"format": "pt"}
        assert set(f.tensors) == {"a", "b", "c", "ids"}
        np.testing.assert_array_equal(f.read("a"), a)
        np.testing.assert_array_equal(f.read("b"), b.astype(np.float32))
        np.testing.assert_array_equal(f.read("c"), c)
        assert f.read("a").dtype == np.float32
        with pytest.raises(SafetensorsError, match=r"w.safetensors: tensor 'ids' has dtype I64"):
            f.read("ids")
        with pytest.raises(SafetensorsError, match=r"tensor 'nope' is missing"):
            f.read("nope")


def _one(dtype: str = "F32", shape: list | None = None, offsets: list | None = None) -> dict:
    return {"w": {"dtype": dtype, "shape": [2] if shape is None else shape,
                  "data_offsets": [0, 8] if offsets is None else offsets}}


@pytest.mark.parametrize("header, payload, text", [
    (_one(), b"\0" * 4, r"tensor 'w': data_offsets end at byte .* past its end"),
    (_one(offsets=[0, 12]), b"\0" * 12, r"tensor 'w': data_offsets \[0, 12\] hold 12 bytes; "
     r"a F32 tensor of shape \[2\] needs 8"),
    (_one(offsets=[8, 0]), b"\0" * 8, r"data_offsets \[8, 0\]"),
    (_one(dtype="F7"), b"\0" * 8, r"tensor 'w': dtype 'F7' is not a safetensors dtype"),
    (_one(shape=[-2]), b"\0" * 8, r"shape \[-2\] is not a list of non-negative ints"),
    (_one(offsets=[0]), b"\0" * 8, r"data_offsets \[0\] is not \[begin, end\]"),
    ({"w": [1, 2]}, b"", r"tensor 'w': its header entry is not an object"),
    ({"a": _one()["w"], "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}},
     b"\0" * 12, r"tensors 'a' and 'b' overlap"),
])
def test_corrupt_headers_name_the_file_and_tensor(tmp_path: Path, header, payload, text) -> None:
    path = write(tmp_path / "bad.safetensors", header, payload)
    with pytest.raises(SafetensorsError, match=text) as info:
        SafetensorsFile(path)
    assert "bad.safetensors" in str(info.value)


def test_truncated_and_non_json_files(tmp_path: Path) -> None:
    short = tmp_path / "short.safetensors"
    short.write_bytes(b"\x01\x02")
    with pytest.raises(SafetensorsError, match="shorter than the 8-byte header length"):
        SafetensorsFile(short)
    cut = tmp_path / "cut.safetensors"
    cut.write_bytes(struct.pack("<Q", 1000) + b'{"w": 1}')
    with pytest.raises(SafetensorsError, match="header length field says 1000 bytes"):
        SafetensorsFile(cut)
    garbage = write(tmp_path / "garbage.safetensors", {}, b"")
    data = bytearray(garbage.read_bytes())
    data[8] = ord("x")
    garbage.write_bytes(bytes(data))
    with pytest.raises(SafetensorsError, match="header is not valid JSON"):
        SafetensorsFile(garbage)
    listed = tmp_path / "list.safetensors"
    listed.write_bytes(struct.pack("<Q", 2) + b"[]")
    with pytest.raises(SafetensorsError, match="header is a JSON list"):
        SafetensorsFile(listed)
    empty = tmp_path / "empty.safetensors"
    empty.write_bytes(b"")
    with pytest.raises(SafetensorsError, match="0 bytes is shorter"):
        SafetensorsFile(empty)
