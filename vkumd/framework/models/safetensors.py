"""A numpy reader for ``.safetensors`` files (the Hugging Face weight format).

The format: an unsigned 64-bit little-endian header length ``n``; ``n`` bytes of JSON mapping
each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to
the first byte after the header), plus an optional ``"__metadata__"`` object of strings; then
the raw little-endian tensor bytes. The whole header is checked when the file is opened, so a
truncated or corrupt file fails before any tensor is used.

The file is untrusted input (:mod:`vkumd.framework.untrusted`): only a regular file is
opened, nothing is memory-mapped (a file truncated under a mapping kills the process with
``SIGBUS``), and a tensor is read with one ``pread`` of the span its header entry declares,
checked against the file's size before anything is allocated.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.models.errors import SafetensorsError
from vkumd.framework.untrusted import open_regular, pread_exact

# Every dtype the format defines, by item size, so any valid header validates; only the
# float types below can be read as weights.
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
FLOAT_DTYPES = ("F32", "F16", "BF16")
# A real header is a few KiB per hundred tensors; a bigger one means a corrupt length.
_MAX_HEADER = 100 * 2**20
# numpy's dimensions are int64; a zero elsewhere in a shape would let a bigger one pass the
# byte-count check and fail in numpy instead.
_MAX_DIM = 2**62


@dataclass(frozen=True)
class TensorInfo:
    """Where one tensor lies in the file.

    Attributes:
        name: the tensor's key in the header.
        dtype: the format's dtype string (``"F32"``, ``"F16"``, ``"BF16"``, ...).
        shape: its dimensions.
        begin: absolute byte offset of its first byte in the file.
        end: absolute byte offset one past its last byte.
    """

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsFile:
    """An open ``.safetensors`` file: its validated header and float tensors on request.

    The file stays open until :meth:`close` (or the end of the ``with`` block); :meth:`read`
    reads a tensor's bytes with ``pread`` and returns an array that owns its memory.

    Args:
        path: the file.

    Raises:
        SafetensorsError: the file is shorter than its header says, the header is not a JSON
            object of valid entries, or two tensors' byte ranges overlap or leave the file;
            the path is missing, unreadable or not a regular file (a FIFO, a directory).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._fd: int | None = None
        self._fd, self.size = open_regular(self.path, SafetensorsError)
        try:
            self.tensors, self.metadata = _parse_header(self.path, self._fd, self.size)
        except BaseException:
            self.close()
            raise

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a new float32 array (float16 and bfloat16 widened exactly).

        Raises:
            SafetensorsError: no such tensor, it is not a float tensor, or the file no longer
                holds its bytes (it shrank since it was opened).
        """
        info = self.tensors.get(name)
        if info is None:
            raise SafetensorsError(f"{self.path}: tensor {name!r} is missing (the file has "
                                   f"{len(self.tensors)} tensors)")
        if info.dtype not in FLOAT_DTYPES:
            raise SafetensorsError(f"{self.path}: tensor {name!r} has dtype {info.dtype}; "
                                   f"weights must be one of {', '.join(FLOAT_DTYPES)}")
        if self._fd is None:
            raise SafetensorsError(f"{self.path}: the file was closed")
        storage = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[info.dtype]
        data = pread_exact(self._fd, info.end - info.begin, info.begin, self.path,
                           f"tensor {name!r}", SafetensorsError)
        raw = np.frombuffer(data, dtype=storage)
        if info.dtype == "BF16":
            array = dtypes.bfloat16_bits_to_float32(raw.astype(np.uint16))
        else:
            array = raw.astype(np.float32)  # a copy: a writable array of its own
        return array.reshape(info.shape)

    def close(self) -> None:
        """Close the file; calling it again does nothing."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            # Two entries for one name: which one a reader keeps is up to the reader.
            raise ValueError(f"the key {key!r} appears twice")
        out[key] = value
    return out


def _parse_header(path: Path, fd: int, size: int
                  ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    if size < 8:
        raise SafetensorsError(f"{path}: {size} bytes is shorter than the 8-byte header "
                               "length; the file is truncated or not safetensors")
    length = int.from_bytes(pread_exact(fd, 8, 0, path, "the header length",
                                        SafetensorsError), "little")
    if length > _MAX_HEADER or 8 + length > size:
        raise SafetensorsError(f"{path}: the header length field says {length} bytes but the "
                               f"file has {size - 8} after it (and at most {_MAX_HEADER} are "
                               "accepted); the file is truncated or not safetensors")
    blob = pread_exact(fd, length, 8, path, "the header", SafetensorsError)
    try:
        header = json.loads(blob.decode("utf-8"), object_pairs_hook=_unique_keys)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        # json.JSONDecodeError is a ValueError; RecursionError: nesting thousands deep.
        raise SafetensorsError(f"{path}: the {length}-byte header is not valid JSON "
                               f"({type(exc).__name__}: {str(exc)[:200]})") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is a JSON {type(header).__name__}; it "
                               "must be an object of tensor entries")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        raise SafetensorsError(f"{path}: __metadata__ must be an object of strings")
    base = 8 + length
    tensors = {name: _entry(path, name, entry, base, size) for name, entry in header.items()}
    ranges = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.end > t.begin)
    for (_, end, first), (begin, _, second) in zip(ranges, ranges[1:], strict=False):
        if begin < end:
            raise SafetensorsError(f"{path}: tensors {first!r} and {second!r} overlap "
                                   "(their data_offsets share bytes); the header is corrupt")
    return tensors, dict(metadata)


def _entry(path: Path, name: str, entry: Any, base: int, size: int) -> TensorInfo:
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{where}: its header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _ITEMSIZE:
        raise SafetensorsError(f"{where}: dtype {str(dtype)[:100]!r} is not a safetensors "
                               "dtype")
    if (not isinstance(shape, list)
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape)):
        raise SafetensorsError(f"{where}: shape {str(shape)[:200]} is not a list of "
                               "non-negative ints")
    if len(shape) > 64 or any(d > _MAX_DIM for d in shape):
        raise SafetensorsError(f"{where}: shape {str(shape)[:200]} has more than 64 dimensions "
                               f"or one above {_MAX_DIM}; the header is corrupt")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or any(isinstance(o, bool) or not isinstance(o, int) for o in offsets)):
        raise SafetensorsError(f"{where}: data_offsets {offsets!r} is not [begin, end]")
    begin, end = offsets
    expected = math.prod(shape) * _ITEMSIZE[dtype]
    if not 0 <= begin <= end or end - begin != expected:
        raise SafetensorsError(f"{where}: data_offsets [{begin}, {end}] hold {end - begin} "
                               f"bytes; a {dtype} tensor of shape {shape} needs {expected}")
    if base + end > size:
        raise SafetensorsError(f"{where}: data_offsets end at byte {base + end} of the file, "
                               f"past its end ({size} bytes); the file is truncated")
    return TensorInfo(name, dtype, tuple(shape), base + begin, base + end)
