"""The GGUF reader: metadata of every value type, every storage type's decoding checked
against a per-block decode written here, quantize round trips, and the real SmolLM2 file."""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.models.gguf import GGUFFile, dequantize, quantize, row_bytes

from .gguf_writer import TensorSpec, Typed, write_gguf
from .smollm2 import need_smollm2
from .tiny_llama import gguf_name, tiny_config, write_tiny_gguf

BLOCK_BYTES = {"Q8_0": 34, "Q4_0": 18, "Q4_1": 20}


def decode_block(qtype: str, block: bytes) -> list[float]:
    """One block's 32 values, decoded byte by byte from the format's description."""
    d = struct.unpack("<e", block[0:2])[0]
    if qtype == "Q8_0":
        return [d * q for q in struct.unpack("<32b", block[2:34])]
    m = struct.unpack("<e", block[2:4])[0] if qtype == "Q4_1" else 0.0
    packed = block[-16:]
    out = []
    for j in range(32):
        byte = packed[j % 16]
        nibble = byte & 0x0F if j < 16 else byte >> 4
        out.append(d * nibble + m if qtype == "Q4_1" else d * (nibble - 8))
    return out


def random_blocks(rng: np.random.Generator, qtype: str, rows: int, blocks: int) -> np.ndarray:
    raw = rng.integers(0, 256, (rows, blocks, BLOCK_BYTES[qtype]), dtype=np.uint8)
    scales = 2 if qtype == "Q4_1" else 1
    heads = (rng.standard_normal((rows, blocks, scales)) * 0.1).astype("<f2")
    raw[..., : 2 * scales] = heads.view(np.uint8).reshape(rows, blocks, 2 * scales)
    return raw.reshape(rows, blocks * BLOCK_BYTES[qtype])


@pytest.mark.parametrize("qtype", ["Q8_0", "Q4_0", "Q4_1"])
@pytest.mark.parametrize("k", [32, 96, 70, 5])
def test_dequantize_matches_a_per_block_decode(qtype: str, k: int) -> None:
    rng = np.random.default_rng(len(qtype) * 100 + k)
    rows, blocks = 7, math.ceil(k / 32)
    raw = random_blocks(rng, qtype, rows, blocks)
    got = dequantize(raw, qtype, k)
    assert got.dtype == np.float32 and got.shape == (rows, k)
    size = BLOCK_BYTES[qtype]
    want = np.array([[v for b in range(blocks)
                      for v in decode_block(qtype, raw[r, b * size:(b + 1) * size].tobytes())]
                     for r in range(rows)])[:, :k]
    # d * q is exact in float32; Q4_1's "+ m" rounds once.
    scale = np.abs(want).max() + 1e-30
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6 * scale)
    if qtype != "Q4_1":
        np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("qtype,bound", [("Q8_0", 1 / 254), ("Q4_0", 1 / 15),
                                         ("Q4_1", 1 / 29)])
@pytest.mark.parametrize("k", [64, 45])
def test_quantize_round_trip_stays_within_half_a_step(qtype: str, bound: float, k: int
                                                      ) -> None:
    rng = np.random.default_rng(k)
    w = rng.standard_normal((9, k))
    raw = quantize(w, qtype)
    assert raw.dtype == np.uint8 and raw.shape == (9, row_bytes(qtype, k))
    back = dequantize(raw, qtype, k).astype(np.float64)
    # Per block the error is at most half a step of the block's range (plus float16 scales).
    for b in range(0, k, 32):
        blk, got = w[:, b:b + 32], back[:, b:b + 32]
        span = np.abs(blk).max(axis=1, keepdims=True) * 2
        assert np.all(np.abs(got - blk) <= span * bound * 1.05 + 1e-3 * span)
    # Stable: quantizing the decoded values again gives the same blocks.
    if qtype == "Q8_0":
        np.testing.assert_array_equal(quantize(back, qtype), raw)


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16"])
def test_float_types_round_trip(qtype: str) -> None:
    w = np.array([[1.0, -2.5, 3.0e-3], [65504.0, 0.0, -1.0 / 3.0]])
    got = dequantize(quantize(w, qtype), qtype, 3)
    tol = {"F32": 1e-7, "F16": 1e-3, "BF16": 8e-3}[qtype]
    np.testing.assert_allclose(got, w, rtol=tol)


def test_codec_errors_are_clear() -> None:
    with pytest.raises(VkumdValueError, match="Q5_K.*not supported"):
        dequantize(np.zeros((1, 34), np.uint8), "Q5_K", 32)
    with pytest.raises(VkumdValueError, match=r"take 34 bytes"):
        dequantize(np.zeros((1, 33), np.uint8), "Q8_0", 32)
    with pytest.raises(VkumdTypeError, match="uint8"):
        dequantize(np.zeros((1, 34), np.int16), "Q8_0", 32)
    with pytest.raises(VkumdValueError, match="NaN"):
        quantize(np.array([[np.nan] * 32]), "Q4_0")


def test_metadata_of_every_value_type(tmp_path: Path) -> None:
    meta = {
        "u8": Typed("UINT8", 250), "i8": Typed("INT8", -100), "u16": Typed("UINT16", 60000),
        "i16": Typed("INT16", -30000), "u32": Typed("UINT32", 4_000_000_000),
        "i32": Typed("INT32", -2_000_000_000), "f32": Typed("FLOAT32", 0.5),
        "yes": True, "no": False, "text": "naïve 🎉", "empty": "",
        "u64": Typed("UINT64", 2**63 + 5), "i64": Typed("INT64", -(2**62)),
        "f64": Typed("FLOAT64", 1.0 / 3.0),
        "ints": Typed("ARRAY", [1, -2, 3], element="INT16"),
        "floats": Typed("ARRAY", [0.25, -1.5], element="FLOAT64"),
        "bools": Typed("ARRAY", [True, False, True], element="BOOL"),
        "strings": ["a", "", "ü b"], "none": Typed("ARRAY", [], element="UINT8"),
        "nested": Typed("ARRAY", [[1, 2], [3]], element="ARRAY"),
    }
    path = write_gguf(tmp_path / "m.gguf", meta, {}, alignment=64)
    with GGUFFile(path) as f:
        assert f.version == 3 and f.alignment == 64 and f.tensors == {}
        got = f.metadata
    expected = {k: (v.value if isinstance(v, Typed) else v) for k, v in meta.items()}
    expected["general.alignment"] = 64
    assert got == expected
    assert isinstance(got["yes"], bool) and isinstance(got["bools"][0], bool)


@pytest.mark.parametrize("qtype", ["F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1"])
def test_tiny_model_tensors_read_back(tmp_path: Path, qtype: str) -> None:
    path = tmp_path / "tiny.gguf"
    stored = write_tiny_gguf(path, qtype=qtype, seed=3, alignment=128)
    with GGUFFile(path) as f:
        assert f.data_offset % 128 == 0 and f.version == 3
        assert len(f.tensors) == len(stored)
        for name, values in stored.items():
            info = f.tensors[gguf_name(name)]
            assert info.shape == values.shape and info.offset % 128 == 0
            np.testing.assert_array_equal(f.read(info.name), values.astype(np.float32))
        q = f.tensors["blk.0.attn_q.weight"]
        raw = f.raw(q.name)
        if qtype in ("Q8_0", "Q4_0", "Q4_1"):
            assert raw.dtype == np.uint8 and raw.shape == (64, 2 * BLOCK_BYTES[qtype])
        else:
            assert raw.shape == (64, 64)
    with pytest.raises(VkumdValueError, match="closed"):
        f.read(q.name)


def test_version_2_reads(tmp_path: Path) -> None:
    spec = TensorSpec((2, 32), "Q8_0", quantize(np.ones((2, 32)), "Q8_0").tobytes())
    path = write_gguf(tmp_path / "v2.gguf", {"general.architecture": "llama"}, {"w": spec},
                      version=2)
    with GGUFFile(path) as f:
        assert f.version == 2
        np.testing.assert_allclose(f.read("w"), np.ones((2, 32)), rtol=1e-3)


def test_smollm2_file() -> None:
    path = need_smollm2()
    with GGUFFile(path) as f:
        m = f.metadata
        assert m["general.architecture"] == "llama"
        assert m["llama.block_count"] == 30 and m["llama.embedding_length"] == 576
        assert m["llama.attention.head_count"] == 9
        assert m["llama.attention.head_count_kv"] == 3
        assert m["llama.feed_forward_length"] == 1536
        assert m["llama.rope.freq_base"] == 100000.0
        assert m["llama.vocab_size"] == 49152
        assert len(m["tokenizer.ggml.tokens"]) == 49152
        assert len(m["tokenizer.ggml.merges"]) == 48900
        assert m["tokenizer.ggml.eos_token_id"] == 2
        kinds = {}
        for t in f.tensors.values():
            kinds.setdefault(t.qtype, []).append(t.name)
        assert kinds["Q8_0"] == ["token_embd.weight"]
        assert len(kinds["Q4_1"]) == 210 and len(kinds["F32"]) == 61
        assert f.tensors["token_embd.weight"].shape == (49152, 576)
        assert f.tensors["blk.0.attn_k.weight"].shape == (192, 576)
        assert f.tensors["blk.0.ffn_down.weight"].shape == (576, 1536)
        raw = f.raw("blk.29.ffn_down.weight")
        assert raw.shape == (576, 48 * 20)
        w = f.read("blk.29.ffn_down.weight")
        # Spot-check rows against the per-block decode.
        for r in (0, 575):
            want = [v for b in range(48) for v in decode_block("Q4_1", raw[r, b * 20:(b + 1)
                                                                          * 20].tobytes())]
            np.testing.assert_allclose(w[r], want, rtol=1e-6, atol=1e-7)
        norm = f.read("output_norm.weight")
        assert norm.shape == (576,) and np.all(np.isfinite(norm))


def test_matches_the_gguf_package(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf", reason="the `gguf` package is not installed (pip "
                               "install --no-deps gguf); the cross-check needs it")
    paths = [write_tiny_gguf(tmp_path / f"{q}.gguf", qtype=q) and tmp_path / f"{q}.gguf"
             for q in ("Q8_0", "Q4_0", "Q4_1", "F16")]
    from .smollm2 import smollm2_path

    real = smollm2_path()
    if real is not None:
        paths.append(real)
    for path in paths:
        theirs = gguf.GGUFReader(str(path))
        with GGUFFile(path) as ours:
            assert ours.data_offset == theirs.data_offset
            assert len(theirs.tensors) == len(ours.tensors)
            for t in theirs.tensors[:12] + theirs.tensors[-3:]:
                mine = ours.tensors[t.name]
                assert mine.qtype == t.tensor_type.name and mine.nbytes == t.n_bytes
                want = gguf.dequantize(t.data, t.tensor_type)
                np.testing.assert_array_equal(ours.read(t.name).reshape(want.shape), want)
            assert ours.metadata["general.architecture"] == "llama"
    assert tiny_config().vocab_size > 256
