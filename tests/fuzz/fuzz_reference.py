"""The fuzzer's oracles, written apart from vkumd's readers: a strict safetensors reader,
a float64 BERT sentence encoder over a model directory, onnxruntime for ONNX models, and
the comparison of results.

Each reader raises :class:`RefusedByReference` where the input is malformed; a vkumd entry
point that accepted the same input is then reported as having accepted an invalid file.
"""

from __future__ import annotations

import json
import math
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

_erf = np.vectorize(math.erf, otypes=[np.float64])
_ITEM = {"F32": ("<f4", 4), "F16": ("<f2", 2), "BF16": ("<u2", 2), "F64": ("<f8", 8),
         "I64": ("<i8", 8), "I32": ("<i4", 4), "I16": ("<i2", 2), "I8": ("i1", 1),
         "U8": ("u1", 1), "BOOL": ("?", 1)}


class RefusedByReference(Exception):
    """The reference reader found the input malformed (the message says where)."""


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file (floats as float64), checked strictly: the length
    prefix within the file, a JSON object of entries with a known dtype, a shape of counts
    and ``data_offsets`` within the payload that hold exactly the shape's bytes. Extra keys
    in an entry and the metadata's contents are ignored (they change no tensor)."""
    data = path.read_bytes()
    if len(data) < 8:
        raise RefusedByReference(f"{len(data)} bytes, no length prefix")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8:
        raise RefusedByReference(f"header length {length} past the file's end")
    try:
        header = json.loads(data[8:8 + length].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RefusedByReference(f"header is not JSON ({type(exc).__name__})") from None
    if not isinstance(header, dict):
        raise RefusedByReference("header is not an object")
    # The metadata is free text no reader here uses; whatever it holds, the tensors read
    # the same, so accepting it is not a wrong result.
    header.pop("__metadata__", None)
    payload = memoryview(data)[8 + length:]
    out = {}
    for name, entry in header.items():
        if not isinstance(entry, dict) or not {"dtype", "shape", "data_offsets"} <= set(entry):
            raise RefusedByReference(f"{name!r}: entry {entry!r}")
        dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
        if not isinstance(dtype, str) or dtype not in _ITEM:
            raise RefusedByReference(f"{name!r}: dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise RefusedByReference(f"{name!r}: shape {shape!r}")
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(o) for o in offsets)
                or not offsets[0] <= offsets[1] <= len(payload)):
            raise RefusedByReference(f"{name!r}: data_offsets {offsets!r}")
        kind, size = _ITEM[dtype]
        if offsets[1] - offsets[0] != math.prod(shape) * size:
            raise RefusedByReference(f"{name!r}: {offsets} for {dtype} {shape}")
        raw = np.frombuffer(payload[offsets[0]:offsets[1]], dtype=kind)
        if dtype == "BF16":
            raw = (raw.astype(np.uint32) << 16).view(np.float32)
        out[name] = raw.astype(np.float64 if dtype[0] in "FB" and dtype != "BOOL"
                               else raw.dtype).reshape(shape)
    return out


def _norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


_ACT = {"gelu": lambda x: 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0))),
        "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                       * (x + 0.044715 * x**3))),
        "relu": lambda x: np.maximum(x, 0.0), "silu": lambda x: x / (1 + np.exp(-x))}
_ACT_NAMES = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
              "relu": "relu", "silu": "silu", "swish": "silu"}
_LAYER = re.compile(r"^(?:bert\.)?encoder\.layer\.(\d+)\.")


def unused_layers(root: Path, weights: dict[str, np.ndarray]) -> str | None:
    """Why the config disagrees with the weights' layer count, or None when it agrees."""
    layers = {int(m.group(1)) for name in weights if (m := _LAYER.match(name))}
    config = json.loads((root / "config.json").read_bytes())
    want = config.get("num_hidden_layers")
    if layers and want != max(layers) + 1:
        return (f"config.json says num_hidden_layers={want!r}; the weights hold "
                f"{max(layers) + 1} layers")
    return None


def _layer(x: np.ndarray, w: dict[str, np.ndarray], p: str, heads: int, eps: float,
           act: Any) -> np.ndarray:
    n, d = x.shape[0], x.shape[1] // heads

    def lin(t: np.ndarray, name: str) -> np.ndarray:
        return t @ w[p + name + ".weight"].T + w[p + name + ".bias"]

    def split(t: np.ndarray) -> np.ndarray:
        return t.reshape(n, heads, d).transpose(1, 0, 2)

    q, k, v = (split(lin(x, "attention.self." + s)) for s in ("query", "key", "value"))
    scores = q @ k.transpose(0, 2, 1) / math.sqrt(d)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    mixed = (probs @ v).transpose(1, 0, 2).reshape(n, heads * d)
    x = _norm(lin(mixed, "attention.output.dense") + x,
              w[p + "attention.output.LayerNorm.weight"],
              w[p + "attention.output.LayerNorm.bias"], eps)
    inner = act(lin(x, "intermediate.dense"))
    return _norm(lin(inner, "output.dense") + x, w[p + "output.LayerNorm.weight"],
                 w[p + "output.LayerNorm.bias"], eps)


def encode(root: Path, sentences: list[str]) -> np.ndarray:
    """Normalized mean-pooled embeddings of the BERT in ``root``, in float64."""
    from tokenizers import Tokenizer

    try:
        config = json.loads((root / "config.json").read_bytes())
        window = json.loads((root / "sentence_bert_config.json").read_bytes())["max_seq_length"]
        heads, layers = config["num_attention_heads"], config["num_hidden_layers"]
        eps = float(config.get("layer_norm_eps", 1e-12))
        act = _ACT[_ACT_NAMES[config.get("hidden_act", "gelu")]]
    except (KeyError, ValueError, TypeError, RecursionError) as exc:
        raise RefusedByReference(f"config: {type(exc).__name__}: {exc}") from None
    w = {k.removeprefix("bert."): v for k, v in read_safetensors(root / "model.safetensors")
         .items()}
    tok = Tokenizer.from_file(str(root / "tokenizer.json"))
    tok.no_padding()
    tok.enable_truncation(max_length=window)
    rows = []
    try:
        for sentence in sentences:
            ids = tok.encode(sentence).ids
            x = (w["embeddings.word_embeddings.weight"][ids]
                 + w["embeddings.position_embeddings.weight"][:len(ids)]
                 + w["embeddings.token_type_embeddings.weight"][0])
            x = _norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
            for i in range(layers):
                x = _layer(x, w, f"encoder.layer.{i}.", heads, eps, act)
            pooled = x.mean(0)
            rows.append(pooled / max(np.linalg.norm(pooled), 1e-12))
    except (KeyError, ValueError, IndexError) as exc:
        raise RefusedByReference(f"weights: {type(exc).__name__}: {exc}") from None
    return np.array(rows)


def onnxruntime_run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The model's outputs by onnxruntime on the CPU (graph optimizations off, so it runs
    what the file says)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        names = [o.name for o in session.get_outputs()]
        return dict(zip(names, session.run(None, feeds), strict=True))
    except Exception as exc:  # noqa: BLE001 - onnxruntime raises its own untyped errors
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise RefusedByReference(f"onnxruntime: {type(exc).__name__}: {first[:300]}") from None


def mismatch(got: Any, want: np.ndarray, rtol: float = 2e-3) -> str | None:
    """Why ``got`` is not ``want`` (shape, NaN/inf positions, values), or None."""
    got = np.asarray(got)
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu" or got.dtype.kind in "biu":
        if not np.array_equal(got.astype(np.float64), want.astype(np.float64)):
            return f"{int((got != want).sum())} of {want.size} values differ"
        return None
    g, w = got.astype(np.float64), want.astype(np.float64)
    finite = np.isfinite(w)
    scale = float(np.abs(w[finite]).max()) if finite.any() else 1.0
    if scale > 1e30:  # past float32's comfortable range the order of operations decides
        return None
    if not np.array_equal(np.isnan(g), np.isnan(w)):
        return f"NaN at {int((np.isnan(g) != np.isnan(w)).sum())} other positions"
    both = finite & np.isfinite(g)
    if not np.array_equal(np.isinf(g) & ~np.isnan(w), np.isinf(w)):
        return "infinities at other positions"
    err = np.abs(g[both] - w[both])
    bound = rtol * np.abs(w[both]) + rtol * max(scale, 1e-6)
    if (err > bound).any():
        return f"max abs error {err.max():.3g} (values up to {scale:.3g})"
    return None
