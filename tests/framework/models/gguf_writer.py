"""A small GGUF writer for tests, written from the format's description (not from vkumd's
reader): metadata of every value type, a tensor table, alignment padding.

Metadata values are typed by :class:`Typed` when given one, else inferred: bool -> BOOL,
int -> UINT32 (INT64 when out of range), float -> FLOAT32, str -> STRING, list -> ARRAY of
the first element's inferred type.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VTYPE = {"UINT8": (0, "<B"), "INT8": (1, "<b"), "UINT16": (2, "<H"), "INT16": (3, "<h"),
         "UINT32": (4, "<I"), "INT32": (5, "<i"), "FLOAT32": (6, "<f"), "BOOL": (7, "<B"),
         "STRING": (8, None), "ARRAY": (9, None), "UINT64": (10, "<Q"), "INT64": (11, "<q"),
         "FLOAT64": (12, "<d")}
GGML_TYPE = {"F32": 0, "F16": 1, "Q4_0": 2, "Q4_1": 3, "Q8_0": 8, "BF16": 30,
             "Q4_K": 12, "Q6_K": 14}
BLOCK = {"F32": (1, 4), "F16": (1, 2), "BF16": (1, 2), "Q8_0": (32, 34), "Q4_0": (32, 18),
         "Q4_1": (32, 20), "Q4_K": (256, 144), "Q6_K": (256, 210)}


@dataclass(frozen=True)
class Typed:
    """A metadata value with its GGUF type named (``Typed("INT32", 5)``; for an array,
    ``Typed("ARRAY", values, element="INT32")``)."""

    vtype: str
    value: Any
    element: str | None = None


@dataclass(frozen=True)
class TensorSpec:
    """A tensor to write: its numpy-order shape, GGUF type and stored bytes.

    For broken files: ``offset`` places it (relative to the data section) instead of after
    the previous one, ``type_id`` and ``dims`` (GGUF order) replace what is written in the
    table."""

    shape: tuple[int, ...]
    qtype: str
    data: bytes
    offset: int | None = None
    type_id: int | None = None
    dims: tuple[int, ...] | None = None


def _infer(value: Any) -> str:
    if isinstance(value, Typed):
        return value.vtype
    if isinstance(value, bool):
        return "BOOL"
    if isinstance(value, int):
        return "UINT32" if 0 <= value < 2**32 else "INT64"
    if isinstance(value, float):
        return "FLOAT32"
    if isinstance(value, str):
        return "STRING"
    if isinstance(value, (list, tuple)):
        return "ARRAY"
    raise TypeError(f"no GGUF type for {value!r}")


def _string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def encode_value(value: Any, vtype: str | None = None) -> bytes:
    """The bytes of one value (without its type id), typed as ``vtype`` or inferred."""
    element = value.element if isinstance(value, Typed) else None
    vtype = vtype or _infer(value)
    raw = value.value if isinstance(value, Typed) else value
    if vtype == "STRING":
        return _string(raw)
    if vtype == "ARRAY":
        items = list(raw)
        etype = element or (_infer(items[0]) if items else "INT32")
        if etype in ("UINT32", "INT64") and items and all(isinstance(v, int) for v in items):
            etype = "INT32" if all(-2**31 <= v < 2**31 for v in items) else "INT64"
        head = struct.pack("<IQ", VTYPE[etype][0], len(items))
        fmt = VTYPE[etype][1]
        if fmt is not None:
            return head + np.asarray(items, dtype=np.dtype(fmt)).tobytes()
        return head + b"".join(encode_value(v, etype) for v in items)
    return struct.pack(VTYPE[vtype][1], raw)


def tensor_bytes(qtype: str, shape: tuple[int, ...]) -> int:
    """Bytes a tensor of ``shape`` (numpy order) stored as ``qtype`` takes."""
    values, size = BLOCK[qtype]
    rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
    return rows * (shape[-1] // values) * size


def gguf_bytes(metadata: dict[str, Any], tensors: dict[str, TensorSpec], *,
               alignment: int = 32, version: int = 3) -> bytes:
    """A whole GGUF file's bytes.

    Args:
        metadata: key -> value (``general.alignment`` is added when ``alignment`` is not 32
            and the key is absent).
        tensors: name -> :class:`TensorSpec`, written in this order, each aligned.
        alignment: the data section's alignment.
        version: the header's version field.
    """
    meta = dict(metadata)
    if alignment != 32 and "general.alignment" not in meta:
        meta["general.alignment"] = Typed("UINT32", alignment)
    out = bytearray(b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(meta)))
    for key, value in meta.items():
        vtype = _infer(value)
        out += _string(key) + struct.pack("<I", VTYPE[vtype][0]) + encode_value(value, vtype)
    end = 0
    data = bytearray()
    for name, spec in tensors.items():
        offset = -(-end // alignment) * alignment if spec.offset is None else spec.offset
        dims = tuple(reversed(spec.shape)) if spec.dims is None else spec.dims
        tid = GGML_TYPE[spec.qtype] if spec.type_id is None else spec.type_id
        out += _string(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, tid, offset)
        if offset > 1 << 24:
            continue  # an offset past any test file's end: the table says it, no data
        if offset + len(spec.data) > len(data):
            data += b"\0" * (offset + len(spec.data) - len(data))
        data[offset:offset + len(spec.data)] = spec.data
        end = max(end, offset + len(spec.data))
    out += b"\0" * (-len(out) % alignment)
    return bytes(out + data)


def write_gguf(path: str | Path, metadata: dict[str, Any], tensors: dict[str, TensorSpec], *,
               alignment: int = 32, version: int = 3) -> Path:
    """Write :func:`gguf_bytes` to ``path`` and return it."""
    path = Path(path)
    path.write_bytes(gguf_bytes(metadata, tensors, alignment=alignment, version=version))
    return path
