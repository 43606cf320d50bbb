"""Broken and hostile GGUF files: each is refused with a clear vkumd error naming what is
wrong, and nothing else is raised (no struct.error, MemoryError, IndexError)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import numpy as np
import pytest

from vkumd.errors import VkumdError
from vkumd.framework.models.errors import GGUFError, ModelFileError, UnsupportedModelError
from vkumd.framework.models.gguf import GGUFFile
from vkumd.framework.models.gguf_quant import quantize

from .gguf_writer import TensorSpec, Typed, gguf_bytes, write_gguf
from .tiny_llama import write_tiny_gguf

Q = quantize(np.linspace(-1, 1, 64).reshape(2, 32), "Q8_0").tobytes()


def spec(**kw: object) -> TensorSpec:
    return TensorSpec(**{"shape": (2, 32), "qtype": "Q8_0", "data": Q, **kw})  # type: ignore


def refused(path: Path, match: str, error: type[Exception] = GGUFError) -> str:
    with pytest.raises(error, match=match) as info:
        GGUFFile(path).close()
    assert str(path) in str(info.value)
    return str(info.value)


def test_truncated_anywhere(tmp_path: Path) -> None:
    whole = (tmp_path / "whole.gguf")
    write_tiny_gguf(whole, qtype="Q4_1")
    data = whole.read_bytes()
    with GGUFFile(whole) as f:
        header_end, last = f.data_offset, max(t.offset + t.nbytes for t in f.tensors.values())
    assert last == len(data)
    # Every byte of the fixed header, then a spread over the metadata and tensor table,
    # then inside the data section.
    cuts = sorted({*range(0, 64), *range(64, header_end, 13), header_end,
                   header_end + 1, (header_end + last) // 2, last - 1})
    cut_file = tmp_path / "cut.gguf"
    for cut in cuts:
        cut_file.write_bytes(data[:cut])
        with pytest.raises(GGUFError, match="truncated|ends at|GGUF|past"):
            GGUFFile(cut_file).close()


def test_shrunk_after_open(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "s.gguf", {}, {"w": spec()})
    with GGUFFile(path) as f:
        os.truncate(path, f.data_offset + 10)
        with pytest.raises(GGUFError, match="truncated or changed"):
            f.read("w")


@pytest.mark.parametrize("head,match", [
    (b"GGML", "not a GGUF file"),
    (b"GGUF" + struct.pack("<I", 1), "version 1"),
    (b"GGUF" + struct.pack("<I", 4), "version 4"),
    (b"GGUF" + struct.pack("<IQQ", 3, 2**62, 0), "claims"),
    (b"GGUF" + struct.pack("<IQQ", 3, 0, 2**40), "claims"),
])
def test_bad_headers(tmp_path: Path, head: bytes, match: str) -> None:
    path = tmp_path / "h.gguf"
    path.write_bytes(head + b"\0" * 64)
    refused(path, match)


def kv_file(tmp_path: Path, payload: bytes) -> Path:
    """A file with one key 'k' whose type and value are ``payload``."""
    path = tmp_path / "kv.gguf"
    key = struct.pack("<Q", 1) + b"k"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + key + payload + b"\0" * 32)
    return path


@pytest.mark.parametrize("payload,match", [
    (struct.pack("<I", 13), "value type 13"),
    (struct.pack("<IQ", 8, 2**60), "past the file's end"),
    (struct.pack("<IIQ", 9, 4, 2**61), "holds .* elements"),
    (struct.pack("<IIQ", 9, 8, 2**40), "holds .* elements"),
    (struct.pack("<IIQ", 9, 77, 1), "array of value type 77"),
    (struct.pack("<IQ", 8, 2) + b"\xff\xfe", "not valid UTF-8"),
    (struct.pack("<I", 9) + struct.pack("<IQ", 9, 1) * 5, "nests arrays"),
])
def test_bad_metadata_values(tmp_path: Path, payload: bytes, match: str) -> None:
    refused(kv_file(tmp_path, payload), match)


def test_duplicate_key(tmp_path: Path) -> None:
    one = struct.pack("<Q", 1) + b"k" + struct.pack("<IB", 0, 1)
    path = tmp_path / "dup.gguf"
    path.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 2) + one + one + b"\0" * 32)
    refused(path, "'k' appears twice")


@pytest.mark.parametrize("alignment", [0, 48, -1, "32", True])
def test_bad_alignment(tmp_path: Path, alignment: object) -> None:
    value = (Typed("INT32", alignment) if isinstance(alignment, int)
             and not isinstance(alignment, bool) else alignment)
    path = write_gguf(tmp_path / "a.gguf", {"general.alignment": value}, {"w": spec()})
    refused(path, "power of two")


@pytest.mark.parametrize("tensors,match,error", [
    ({"w": spec(offset=2**30)}, "needs bytes .* file ends", GGUFError),
    ({"w": spec(offset=2**63)}, "needs bytes .* file ends", GGUFError),
    ({"w": spec(offset=16)}, "not a multiple of the alignment 32", GGUFError),
    ({"a": spec(), "b": spec(offset=32)}, "'a' and 'b' overlap", GGUFError),
    ({"w": spec(dims=())}, "0 dimensions", GGUFError),
    ({"w": spec(dims=(32, 1, 1, 1, 2))}, "5 dimensions", GGUFError),
    ({"w": spec(dims=(32, 2**62))}, "more values than", GGUFError),
    ({"w": spec(dims=(2**40, 2**40))}, "more values than", GGUFError),
    ({"w": spec(dims=(31, 2))}, "not a multiple of Q8_0's block of 32", GGUFError),
    ({"blk.3.ffn_up.weight": spec(type_id=12)},
     r"'blk.3.ffn_up.weight' is stored as Q4_K \(K-quants are not supported yet\)",
     UnsupportedModelError),
    ({"w": spec(type_id=99)}, "'w' is stored as type id 99", UnsupportedModelError),
])
def test_bad_tensor_tables(tmp_path: Path, tensors: dict, match: str,
                           error: type[Exception]) -> None:
    path = write_gguf(tmp_path / "t.gguf", {"general.architecture": "llama"}, tensors)
    message = refused(path, match, error)
    assert issubclass(error, ModelFileError) and "vkumd reads" in message or error is GGUFError


def test_duplicate_tensor_name(tmp_path: Path) -> None:
    data = bytearray(gguf_bytes({}, {"aa": spec(), "bb": spec()}))
    at = data.index(b"bb")
    data[at:at + 2] = b"aa"
    path = tmp_path / "d.gguf"
    path.write_bytes(bytes(data))
    refused(path, "'aa' appears twice")


def test_not_a_regular_file(tmp_path: Path) -> None:
    refused(tmp_path, "directory")
    fifo = tmp_path / "fifo.gguf"
    os.mkfifo(fifo)
    refused(fifo, "FIFO")
    refused(tmp_path / "absent.gguf", "missing")


def test_unknown_tensor_names_the_tensor_and_every_error_is_a_vkumd_error(tmp_path: Path
                                                                            ) -> None:
    path = write_gguf(tmp_path / "k.gguf", {}, {"w": spec()})
    with GGUFFile(path) as f:
        with pytest.raises(GGUFError, match="'nope' is missing"):
            f.raw("nope")
    assert issubclass(GGUFError, VkumdError) and issubclass(GGUFError, ValueError)


def test_random_corruption_never_escapes(tmp_path: Path) -> None:
    whole = tmp_path / "whole.gguf"
    write_tiny_gguf(whole, qtype="Q4_0")
    data = whole.read_bytes()
    with GGUFFile(whole) as f:
        header_end = f.data_offset
    rng = np.random.default_rng(5)
    bad = tmp_path / "bad.gguf"
    for _ in range(300):
        blob = bytearray(data)
        for at in rng.integers(0, header_end, rng.integers(1, 4)):
            blob[at] = int(rng.integers(0, 256))
        bad.write_bytes(bytes(blob))
        try:
            with GGUFFile(bad) as f:
                for name in list(f.tensors)[:3]:
                    f.read(name)
        except ModelFileError:
            pass
