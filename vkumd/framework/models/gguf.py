"""A reader for GGUF files (llama.cpp's model format), written from the format's description.

The layout (little-endian): the magic ``GGUF``; a uint32 version (2 or 3 here); uint64 tensor
and key/value counts; the key/value pairs (a string key, a uint32 value type, the value;
strings are a uint64 length and UTF-8 bytes; an array is an element type, a uint64 count and
the elements); the tensor table (name, uint32 dimension count, uint64 dimensions fastest
first, uint32 storage type, uint64 offset from the data section); then the data section, which
starts at the next multiple of ``general.alignment`` (default 32), each tensor's offset a
multiple of it too.

The file is untrusted input (:mod:`vkumd.framework.untrusted`): only a regular file is
opened, every count, length, offset and size is checked against the bytes the file has
before anything is allocated, and tensors are read lazily with ``pread`` (never ``mmap``: a
file truncated under a mapping kills the process with ``SIGBUS``).
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.framework.models.errors import GGUFError, UnsupportedModelError
from vkumd.framework.models.gguf_quant import (
    FLOAT_QTYPES,
    QTYPES,
    STORAGE,
    dequantize,
    quantize,
    row_bytes,
)
from vkumd.framework.untrusted import open_regular, pread_exact

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # ggml's limit
# Metadata value types: id -> (name, struct format or None for string/array).
VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("UINT8", "<B"), 1: ("INT8", "<b"), 2: ("UINT16", "<H"), 3: ("INT16", "<h"),
    4: ("UINT32", "<I"), 5: ("INT32", "<i"), 6: ("FLOAT32", "<f"), 7: ("BOOL", "<B"),
    8: ("STRING", None), 9: ("ARRAY", None), 10: ("UINT64", "<Q"), 11: ("INT64", "<q"),
    12: ("FLOAT64", "<d"),
}
# ggml tensor types: the ones read here, and the others' names for the error message.
TENSOR_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 8: "Q8_0", 30: "BF16"}
OTHER_TENSOR_TYPES = {
    6: "Q5_0", 7: "Q5_1", 9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K",
    14: "Q6_K", 15: "Q8_K", 16: "IQ2_XXS", 17: "IQ2_XS", 18: "IQ3_XXS", 19: "IQ1_S",
    20: "IQ4_NL", 21: "IQ3_S", 22: "IQ2_S", 23: "IQ4_XS", 24: "I8", 25: "I16", 26: "I32",
    27: "I64", 28: "F64", 29: "IQ1_M", 34: "TQ1_0", 35: "TQ2_0",
}
TYPE_IDS = {name: tid for tid, name in TENSOR_TYPES.items()}
_MAX_NESTING = 3  # arrays of arrays: real files nest at most once
_CHUNK = 1 << 20


@dataclass(frozen=True)
class GGUFTensor:
    """One entry of the tensor table.

    Attributes:
        name: the tensor's name (``"blk.0.attn_q.weight"``).
        shape: its dimensions in numpy order (slowest first: ``[N, K]`` for a matrix whose
            rows hold ``K`` values; GGUF lists them the other way round).
        qtype: its storage type, one of :data:`QTYPES`.
        offset: absolute byte offset of its data in the file.
        nbytes: bytes of data.
    """

    name: str
    shape: tuple[int, ...]
    qtype: str
    offset: int
    nbytes: int


class _Cursor:
    """Sequential reads of the header through a buffer, every one checked against the
    file's size first."""

    def __init__(self, path: Path, fd: int, size: int) -> None:
        self.path, self.fd, self.size = path, fd, size
        self.pos = 0
        self._buf = b""
        self._buf_at = 0

    def remaining(self) -> int:
        return self.size - self.pos

    def take(self, n: int, what: str) -> bytes:
        if n > self.remaining():
            raise GGUFError(f"{self.path}: {what} needs {n} bytes at byte {self.pos} but the "
                            f"file ends at byte {self.size}; it is truncated or corrupt")
        start = self.pos - self._buf_at
        if start + n > len(self._buf):
            want = min(max(n, _CHUNK), self.size - self.pos)
            self._buf = pread_exact(self.fd, want, self.pos, self.path, what, GGUFError)
            self._buf_at, start = self.pos, 0
        self.pos += n
        return self._buf[start:start + n]

    def unpack(self, fmt: str, what: str) -> Any:
        return struct.unpack(fmt, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str) -> str:
        n = self.unpack("<Q", f"the length of {what}")
        if n > self.remaining():
            raise GGUFError(f"{self.path}: {what} says it is {n} bytes long at byte "
                            f"{self.pos}, past the file's end at byte {self.size}")
        data = self.take(n, what)
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            raise GGUFError(f"{self.path}: {what} is not valid UTF-8") from None


def _value(cur: _Cursor, vtype: int, what: str, depth: int = 0) -> Any:
    spec = VALUE_TYPES.get(vtype)
    if spec is None:
        raise GGUFError(f"{cur.path}: {what} has value type {vtype}, which GGUF does not "
                        f"define (0..12); the file is corrupt")
    name, fmt = spec
    if fmt is not None:
        value = cur.unpack(fmt, what)
        return bool(value) if name == "BOOL" else value
    if name == "STRING":
        return cur.string(what)
    if depth >= _MAX_NESTING:
        raise GGUFError(f"{cur.path}: {what} nests arrays {depth + 1} deep; at most "
                        f"{_MAX_NESTING} are accepted")
    etype = cur.unpack("<I", f"the element type of {what}")
    count = cur.unpack("<Q", f"the element count of {what}")
    espec = VALUE_TYPES.get(etype)
    if espec is None:
        raise GGUFError(f"{cur.path}: {what} is an array of value type {etype}, which GGUF "
                        "does not define (0..12); the file is corrupt")
    # The least each element takes: its size, or a string's or array's length fields.
    least = struct.calcsize(espec[1]) if espec[1] else (8 if espec[0] == "STRING" else 12)
    if count * least > cur.remaining():
        raise GGUFError(f"{cur.path}: {what} says it holds {count} elements of "
                        f"{espec[0]} ({count * least} bytes at least) but only "
                        f"{cur.remaining()} bytes of the file are left; it is corrupt")
    if espec[1] is not None:
        data = cur.take(count * least, what)
        arr = np.frombuffer(data, dtype=np.dtype(espec[1]))
        return [bool(v) for v in arr] if espec[0] == "BOOL" else arr.tolist()
    return [_value(cur, etype, f"{what}[{i}]", depth + 1) for i in range(count)]


class GGUFFile:
    """An open GGUF file: its metadata and tensor table, tensors read on request.

    The header is read and checked when the file is opened; tensor data is read only by
    :meth:`raw` and :meth:`read`. Use it as a context manager, or call :meth:`close`.

    Args:
        path: the ``.gguf`` file.

    Attributes:
        metadata: every key/value pair (arrays as lists).
        tensors: the tensor table by name, in file order.
        version: the format version (2 or 3).
        alignment: ``general.alignment``.
        data_offset: where the data section starts.

    Raises:
        GGUFError: the file is missing, not a regular file, not GGUF, of another version,
            truncated, or says something inconsistent (counts past its end, overlapping or
            misaligned tensors, duplicate names).
        UnsupportedModelError: a tensor has a storage type not supported yet (the K-quants
            and others); the message names the tensor and the type.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._fd, self.size = open_regular(self.path, GGUFError)
        try:
            self._parse(_Cursor(self.path, self._fd, self.size))
        except BaseException:
            self.close()
            raise

    def _parse(self, cur: _Cursor) -> None:
        magic = cur.take(4, "the magic number")
        if magic != MAGIC:
            raise GGUFError(f"{self.path}: not a GGUF file (it starts with {magic!r}, a GGUF "
                            f"file with {MAGIC!r})")
        self.version = cur.unpack("<I", "the version")
        if self.version not in VERSIONS:
            raise GGUFError(f"{self.path}: GGUF version {self.version}; vkumd reads versions "
                            f"{', '.join(map(str, VERSIONS))} (re-convert the model with a "
                            "current llama.cpp)")
        n_tensors = cur.unpack("<Q", "the tensor count")
        n_kv = cur.unpack("<Q", "the metadata count")
        # Each pair takes 13 bytes at least, each tensor entry 32: bound them by the file.
        if n_kv * 13 > cur.remaining() or n_tensors * 32 > cur.remaining():
            raise GGUFError(f"{self.path}: the header claims {n_kv} metadata entries and "
                            f"{n_tensors} tensors, more than the file's {self.size} bytes "
                            "can hold; it is corrupt")
        self.metadata: dict[str, Any] = {}
        for i in range(n_kv):
            key = cur.string(f"metadata key {i}")
            if key in self.metadata:
                raise GGUFError(f"{self.path}: metadata key {key!r} appears twice")
            vtype = cur.unpack("<I", f"the value type of {key!r}")
            self.metadata[key] = _value(cur, vtype, f"metadata {key!r}")
        self.alignment = self.metadata.get("general.alignment", DEFAULT_ALIGNMENT)
        if (not isinstance(self.alignment, int) or isinstance(self.alignment, bool)
                or self.alignment <= 0 or self.alignment & (self.alignment - 1)):
            raise GGUFError(f"{self.path}: general.alignment is {self.alignment!r}; it must "
                            "be a power of two")
        table = [self._entry(cur, i) for i in range(n_tensors)]
        self.data_offset = -(-cur.pos // self.alignment) * self.alignment
        self.tensors: dict[str, GGUFTensor] = {}
        for name, shape, qtype, rel, nbytes in table:
            if name in self.tensors:
                raise GGUFError(f"{self.path}: tensor {name!r} appears twice in the table")
            if rel % self.alignment:
                raise GGUFError(f"{self.path}: tensor {name!r} starts at data offset {rel}, "
                                f"not a multiple of the alignment {self.alignment}")
            start = self.data_offset + rel
            if start + nbytes > self.size:
                raise GGUFError(f"{self.path}: tensor {name!r} needs bytes {start}.."
                                f"{start + nbytes} but the file ends at byte {self.size}; it "
                                "is truncated or corrupt")
            self.tensors[name] = GGUFTensor(name, shape, qtype, start, nbytes)
        spans = sorted((t.offset, t.offset + t.nbytes, t.name) for t in self.tensors.values())
        for (_, end, a), (begin, _, b) in zip(spans, spans[1:], strict=False):
            if begin < end:
                raise GGUFError(f"{self.path}: tensors {a!r} and {b!r} overlap in the file")

    def _entry(self, cur: _Cursor, i: int) -> tuple[str, tuple[int, ...], str, int, int]:
        name = cur.string(f"the name of tensor {i}")
        what = f"tensor {name!r}"
        n_dims = cur.unpack("<I", f"the dimension count of {what}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise GGUFError(f"{self.path}: {what} has {n_dims} dimensions; GGUF allows 1 to "
                            f"{MAX_DIMS}")
        dims = struct.unpack(f"<{n_dims}Q", cur.take(8 * n_dims, f"the dimensions of {what}"))
        tid = cur.unpack("<I", f"the type of {what}")
        rel = cur.unpack("<Q", f"the offset of {what}")
        qtype = TENSOR_TYPES.get(tid)
        if qtype is None:
            kind = OTHER_TENSOR_TYPES.get(tid, f"type id {tid}")
            later = " (K-quants are not supported yet)" if kind.endswith("_K") else ""
            raise UnsupportedModelError(
                f"{self.path}: {what} is stored as {kind}{later}; vkumd reads "
                f"{', '.join(QTYPES)}. Re-quantize the model to one of them (llama.cpp's "
                "llama-quantize ... Q8_0, Q4_0 or Q4_1)")
        values, block = QTYPES[qtype]
        # Bound each dimension by the file before multiplying: no huge intermediate.
        limit = self.size * values
        if any(d > limit for d in dims) or math.prod(dims) > limit:
            raise GGUFError(f"{self.path}: {what} claims dimensions {list(dims)}, more values "
                            f"than the file's {self.size} bytes can hold; it is corrupt")
        if dims[0] % values:
            raise GGUFError(f"{self.path}: {what} has rows of {dims[0]} values, not a "
                            f"multiple of {qtype}'s block of {values}")
        nbytes = math.prod(dims[1:]) * row_bytes(qtype, dims[0])
        return name, tuple(reversed(dims)), qtype, rel, nbytes

    def _tensor(self, name: str) -> GGUFTensor:
        info = self.tensors.get(name)
        if info is None:
            raise GGUFError(f"{self.path}: tensor {name!r} is missing (the file has "
                            f"{len(self.tensors)} tensors)")
        if self._fd is None:
            raise GGUFError(f"{self.path}: the file was closed")
        return info

    def raw(self, name: str) -> np.ndarray:
        """Tensor ``name`` as stored, in a new array.

        Returns:
            For a quantized tensor ``uint8 [N, row_bytes]`` (``N`` the product of all but the
            last numpy dimension); for F32/F16 the values (float32/float16) in the tensor's
            shape; for BF16 their uint16 bit patterns in its shape.

        Raises:
            GGUFError: no such tensor, the file was closed, or it shrank since it was opened.
        """
        info = self._tensor(name)
        data = pread_exact(self._fd, info.nbytes, info.offset, self.path,  # type: ignore[arg-type]
                           f"tensor {name!r}", GGUFError)
        if info.qtype in FLOAT_QTYPES:
            return np.frombuffer(data, dtype=STORAGE[info.qtype]).reshape(info.shape).copy()
        rows = math.prod(info.shape[:-1])
        return np.frombuffer(data, dtype=np.uint8).reshape(rows, -1).copy()

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` dequantised to a new float32 array of its shape.

        Raises:
            GGUFError: as :meth:`raw`.
        """
        info = self._tensor(name)
        k = info.shape[-1]
        return dequantize(self.raw(name).reshape(-1, row_bytes(info.qtype, k) if
                                                 info.qtype not in FLOAT_QTYPES else k),
                          info.qtype, k).reshape(info.shape)

    def close(self) -> None:
        """Close the file; calling it again does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GGUFFile", "GGUFTensor", "QTYPES", "TENSOR_TYPES", "VALUE_TYPES", "dequantize",
           "quantize", "row_bytes"]
