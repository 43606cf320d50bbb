"""Seeded mutators for the file fuzzer: bytes, JSON values, safetensors headers.

Every mutator takes a :class:`random.Random` and returns new bytes, so a case is fully
determined by its seed (no hypothesis database, no state between cases). The values lean on
what breaks parsers: boundaries, huge and negative numbers, wrong types, deep nesting,
truncation.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable
from typing import Any

# Numbers at the edges of what each layer stores: int32/int64/uint64, float32's range,
# the sizes that overflow an element count times an item size.
HUGE_INTS = [2**31 - 1, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 1, 2**63, 2**64, 10**9, 10**12,
             10**30]
EDGE_INTS = [0, 1, -1, 2, 3, 7, 255, 256, 65535, 65536, -2**31, -2**63] + HUGE_INTS
EDGE_FLOATS = [0.0, -0.0, 1e-45, 1e-300, 1e300, -1e300, 3.5e38, float("inf"), float("-inf"),
               float("nan"), 0.5, -1.0]


def edge_int(rng: random.Random) -> int:
    """A boundary integer, or a small random one."""
    return rng.choice(EDGE_INTS) if rng.random() < 0.8 else rng.randint(-10, 300)


def flip_bits(data: bytes, rng: random.Random) -> bytes:
    """A few bit flips at random positions."""
    if not data:
        return data
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(out))
        out[i] ^= 1 << rng.randrange(8)
    return bytes(out)


def set_bytes(data: bytes, rng: random.Random) -> bytes:
    """A run of bytes overwritten with one boundary value."""
    if not data:
        return data
    out = bytearray(data)
    i = rng.randrange(len(out))
    value = rng.choice([0x00, 0xFF, 0x7F, 0x80, 0x01])
    for j in range(i, min(len(out), i + rng.randint(1, 8))):
        out[j] = value
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    """The data cut short (possibly to nothing)."""
    return data[:rng.randrange(len(data))] if data else data


def splice(data: bytes, rng: random.Random, other: bytes | None = None) -> bytes:
    """A chunk of ``other`` (or of the data itself) inserted or overwritten somewhere."""
    if not data:
        return data
    source = other or data
    start = rng.randrange(len(source))
    chunk = source[start:start + rng.randint(1, 64)]
    at = rng.randrange(len(data))
    if rng.random() < 0.5:
        return data[:at] + chunk + data[at:]
    return data[:at] + chunk + data[at + len(chunk):]


def delete_chunk(data: bytes, rng: random.Random) -> bytes:
    """A chunk removed."""
    if not data:
        return data
    at = rng.randrange(len(data))
    return data[:at] + data[at + rng.randint(1, 32):]


def insert_random(data: bytes, rng: random.Random) -> bytes:
    """Random bytes inserted."""
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]


BYTE_MUTATORS: list[Callable[[bytes, random.Random], bytes]] = [
    flip_bits, set_bytes, truncate, splice, delete_chunk, insert_random]


def mutate_bytes(data: bytes, rng: random.Random, window: int | None = None) -> bytes:
    """One to three byte-level mutations; ``window`` confines them to the first bytes."""
    head, tail = (data, b"") if window is None else (data[:window], data[window:])
    for _ in range(rng.randint(1, 3)):
        mutator = rng.choice(BYTE_MUTATORS)
        if mutator is truncate:  # truncation anywhere, header or payload
            return truncate(head + tail, rng)
        head = mutator(head, rng)
    return head + tail


def odd_value(rng: random.Random, like: Any = None) -> Any:
    """A JSON value of a wrong type, a boundary number, or a near miss of ``like``."""
    choices: list[Callable[[], Any]] = [
        lambda: edge_int(rng),
        lambda: rng.choice(EDGE_FLOATS),
        lambda: rng.choice(["", "a", "12", "bert", "gelu", "\udcff" * 2, "x" * 10000]),
        lambda: rng.choice([True, False, None]),
        lambda: [edge_int(rng)] * rng.randint(0, 3),
        lambda: {"k": edge_int(rng)},
    ]
    if isinstance(like, bool):
        choices.append(lambda: not like)
    elif isinstance(like, int):
        choices += [lambda: like + rng.choice([-1, 1]), lambda: -like, lambda: like * 1000,
                    lambda: float(like), lambda: str(like)]
    elif isinstance(like, float):
        choices += [lambda: -like, lambda: like * 1e300, lambda: int(like)]
    return rng.choice(choices)()


def deep_nesting(rng: random.Random) -> str:
    """A JSON text nested deeper than the recursion limit."""
    depth = rng.choice([1000, 100_000])
    return "[" * depth + "]" * depth if rng.random() < 0.5 else '{"a":' * depth + "1" + "}" * depth


def dumps(value: Any) -> str:
    """JSON text that keeps non-finite floats and lone surrogates (both invalid JSON that
    Python's reader still accepts or chokes on)."""
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


def encode_text(text: str) -> bytes:
    """UTF-8, with lone surrogates written as raw (invalid) bytes."""
    return text.encode("utf-8", errors="surrogateescape")


# Values a config field plausibly takes: each parses, and many disagree with the weights
# (layers, widths, table sizes) or change the computation (activation, eps).
NEAR_MISSES: dict[str, list[Any]] = {
    "hidden_act": ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish", "tanh",
                   "GELU"],
    "layer_norm_eps": [1e-5, 1e-6, 0, 0.0, 1.0, 1e3, 1e-45, 1e30, 1e300],
    "num_hidden_layers": [1, 2, 3, 6, 10**9],
    "num_attention_heads": [1, 2, 4, 8, 16, 3, 32],
    "hidden_size": [8, 15, 16, 32],
    "intermediate_size": [16, 31, 32, 64],
    "max_position_embeddings": [15, 16, 23, 24, 25, 512, 10**9],
    "type_vocab_size": [1, 2, 3, 10**9],
    "vocab_size": [1, 38, 39, 40, 41, 10**9],
    "model_type": ["bert", "roberta", "BERT"],
    "architectures": [["BertModel"], ["BertForMaskedLM"], [], ["RobertaModel"]],
    "position_embedding_type": ["absolute", "relative_key"],
}


def near_miss(rng: random.Random, key: str, like: Any) -> Any:
    """A plausible value for ``key`` (see :data:`NEAR_MISSES`), else a near miss of
    ``like``."""
    if key in NEAR_MISSES:
        return rng.choice(NEAR_MISSES[key])
    if isinstance(like, int) and not isinstance(like, bool):
        return like + rng.choice([-1, 1])
    return odd_value(rng, like)


def mutate_json_object(data: dict[str, Any], rng: random.Random,
                       keys: list[str] | None = None) -> bytes:
    """One to three field mutations of a JSON object (half of them plausible values, see
    :func:`near_miss`), or a text-level break of it."""
    roll = rng.random()
    text = dumps(data)
    if roll < 0.08:
        return encode_text(deep_nesting(rng))
    if roll < 0.14:
        return encode_text(dumps(rng.choice([[], [data], "config", 3, None])))
    if roll < 0.24:
        return mutate_bytes(encode_text(text), rng)
    if roll < 0.28:  # a key given twice: Python's reader keeps the last
        key = rng.choice(list(data))
        return encode_text(text[:-1] + f', "{key}": {dumps(odd_value(rng, data[key]))}}}')
    out = dict(data)
    for _ in range(rng.choice([1, 1, 2, 3])):
        key = rng.choice(keys or list(out))
        action = rng.random()
        if action < 0.1:
            out.pop(key, None)
        elif action < 0.15:
            out[f"unknown_{rng.randint(0, 9)}"] = odd_value(rng)
        elif action < 0.6:
            out[key] = near_miss(rng, key, out.get(key))
        else:
            out[key] = odd_value(rng, out.get(key))
    return encode_text(dumps(out))


# Changes that keep a BERT config.json valid for the same weights but change the result.
_VALID_CONFIG: dict[str, list[Any]] = {
    "hidden_act": ["gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu", "swish"],
    "layer_norm_eps": [1e-5, 1e-6, 0.0, 1.0, 1e-30, 1e30, 1e300],
}
_OPTIONAL_CONFIG = ["hidden_act", "layer_norm_eps", "type_vocab_size", "pad_token_id",
                    "position_embedding_type", "architectures"]


def mutate_config(data: dict[str, Any], rng: random.Random) -> bytes:
    """A config.json mutation: one case in four keeps it valid (another activation or eps,
    an optional field dropped, an unknown one added), the rest as
    :func:`mutate_json_object`."""
    if rng.random() >= 0.25:
        return mutate_json_object(data, rng)
    out = dict(data)
    roll = rng.random()
    if roll < 0.6:
        key = rng.choice(sorted(_VALID_CONFIG))
        out[key] = rng.choice(_VALID_CONFIG[key])
    elif roll < 0.8:
        out.pop(rng.choice(_OPTIONAL_CONFIG), None)
    else:
        out[rng.choice(["torch_dtype", "use_cache", "x" * 100])] = odd_value(rng)
    return encode_text(dumps(out))


def split_safetensors(blob: bytes) -> tuple[dict[str, Any], bytes]:
    """The header object and the payload of a well-formed safetensors file."""
    (length,) = struct.unpack("<Q", blob[:8])
    return json.loads(blob[8:8 + length]), blob[8 + length:]


def join_safetensors(header: bytes, payload: bytes, length: int | None = None) -> bytes:
    """A safetensors file from header text and payload (``length`` overrides the prefix)."""
    return struct.pack("<Q", len(header) if length is None else length) + header + payload


def _mutate_entry(entry: Any, rng: random.Random, others: list[Any]) -> Any:
    if not isinstance(entry, dict):
        return odd_value(rng)
    entry = dict(entry)
    field = rng.choice(["dtype", "shape", "data_offsets", "data_offsets", "shape", "extra"])
    if field == "dtype":
        entry["dtype"] = rng.choice(["F32", "F16", "BF16", "F64", "I64", "I32", "I8", "U8",
                                     "BOOL", "F8_E4M3", "F7", "", "f32", 4, None, ["F32"]])
    elif field == "shape":
        shape = list(entry.get("shape", []))
        roll = rng.random()
        if roll < 0.5 and shape:
            shape[rng.randrange(len(shape))] = odd_value(rng, shape[0])
        elif roll < 0.7:
            shape = shape + [rng.choice([1, 0, 2, 2**40])]
        elif roll < 0.8:
            shape = shape[1:]
        else:
            shape = odd_value(rng)
        entry["shape"] = shape
    elif field == "data_offsets":
        offsets = list(entry.get("data_offsets", [0, 0]))
        roll = rng.random()
        if roll < 0.4 and offsets:
            i = rng.randrange(len(offsets))
            offsets[i] = odd_value(rng, offsets[i])
        elif roll < 0.55 and len(offsets) == 2:
            offsets = offsets[::-1]
        elif roll < 0.7 and others:  # overlap or alias another tensor's bytes
            other = rng.choice(others)
            if isinstance(other, dict) and "data_offsets" in other:
                offsets = list(other["data_offsets"])
        elif roll < 0.85 and len(offsets) == 2 and all(isinstance(o, int) for o in offsets):
            shift = rng.choice([-4, -1, 1, 2, 4, 1 << 20, 1 << 40])
            offsets = [offsets[0] + shift, offsets[1] + shift]
        else:
            offsets = rng.choice([[0], [0, 1, 2], [], None, "0-8", [0.0, 8.0]])
        entry["data_offsets"] = offsets
    else:
        entry[rng.choice(["extra", "dtype", "shape"])] = odd_value(rng)
    return entry


def _plausible(header: dict[str, Any], names: list[str], rng: random.Random
               ) -> dict[str, Any]:
    """A header every reader should accept whose tensors are not what the model expects:
    two same-sized tensors' bytes swapped, a shape refactored, a tensor renamed, dropped or
    added, an offset range aliasing another, entries reordered."""
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in header.items()}
    name = rng.choice(names)
    roll = rng.random()
    if roll < 0.3:
        size = out[name]["data_offsets"][1] - out[name]["data_offsets"][0]
        same = [n for n in names if n != name
                and out[n]["data_offsets"][1] - out[n]["data_offsets"][0] == size]
        if same:
            other = rng.choice(same)
            out[name]["data_offsets"], out[other]["data_offsets"] = (
                out[other]["data_offsets"], out[name]["data_offsets"])
    elif roll < 0.5:
        shape = out[name]["shape"]
        count = 1
        for d in shape:
            count *= d
        out[name]["shape"] = rng.choice([[count], [1, count], shape[::-1], shape + [1], []
                                         if count == 1 else [count, 1]])
    elif roll < 0.65:
        out[rng.choice(["bert." + name, name.replace("layer.1", "layer.2"),
                        name.replace("layer.0", "layer.7"), "extra." + name])] = out.pop(name)
    elif roll < 0.75:
        out.pop(name)
    elif roll < 0.85:
        other = rng.choice(names)
        out[name + ".alias"] = {**out[other]}
    else:
        keys = list(out)
        rng.shuffle(keys)
        out = {k: out[k] for k in keys}
    return out


def mutate_safetensors(blob: bytes, rng: random.Random) -> bytes:
    """One mutation of a safetensors file: the header's length prefix, its JSON (fields
    dtype, shape, data_offsets, metadata, names), its bytes, or the payload's length."""
    header, payload = split_safetensors(blob)
    (length,) = struct.unpack("<Q", blob[:8])
    text = json.dumps(header).encode()
    roll = rng.random()
    if roll < 0.12:
        new = rng.choice([0, 1, 2, length - 1, length + 1, length + 8, len(blob), len(blob) - 8,
                          2**31, 2**63, 2**64 - 1, 100 * 2**20])
        return join_safetensors(text, payload, new)
    if roll < 0.22:
        return mutate_bytes(blob, rng, window=8 + length)
    if roll < 0.3:  # the payload cut short or grown
        cut = rng.randrange(len(payload)) if rng.random() < 0.7 else len(payload)
        return join_safetensors(text, payload[:cut] + (b"" if cut < len(payload) else b"\0" * 7))
    if roll < 0.36:
        whole = rng.choice([[header], "header", 5, None, {}, {"__metadata__": {}}])
        return join_safetensors(encode_text(dumps(whole)), payload)
    if roll < 0.4:
        return join_safetensors(encode_text(deep_nesting(rng)), payload)
    names = [n for n in header if n != "__metadata__"]
    if roll < 0.6:
        return join_safetensors(encode_text(dumps(_plausible(header, names, rng))), payload)
    out = dict(header)
    for _ in range(rng.randint(1, 3)):
        action = rng.random()
        name = rng.choice(names)
        if action < 0.65:
            out[name] = _mutate_entry(out.get(name), rng, [out[n] for n in names if n in out])
        elif action < 0.75:
            out.pop(name, None)
        elif action < 0.85:
            out["__metadata__"] = rng.choice([{"format": odd_value(rng)}, [], "pt", None,
                                              {"format": "pt", "x": {"y": 1}}])
        elif action < 0.92:  # a second name for the same entry, or an empty name
            out[rng.choice(["", name + ".copy", " " + name])] = out.get(name)
        else:
            out[name] = odd_value(rng)
    return join_safetensors(encode_text(dumps(out)), payload)
