"""A numpy reader for ``.safetensors`` files (the Hugging Face weight format).

The format: an unsigned 64-bit little-endian header length ``n``; ``n`` bytes of JSON mapping
each tensor name to ``{"dtype", "shape", "data_offsets": [begin, end]}`` (offsets relative to
the first byte after the header), plus an optional ``"__metadata__"`` object of strings; then
the raw little-endian tensor bytes. The whole header is checked when the file is opened, so a
truncated or corrupt file fails before any tensor is used.
"""

from __future__ import annotations

import json
import math
import mmap
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from vkumd.framework import dtypes
from vkumd.framework.models.errors import SafetensorsError

# Every dtype the format defines, by item size, so any valid header validates; only the
# float types below can be read as weights.
_ITEMSIZE = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "I16": 2, "U16": 2,
             "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "F64": 8, "I64": 8, "U64": 8}
FLOAT_DTYPES = ("F32", "F16", "BF16")
# A real header is a few KiB per hundred tensors; a bigger one means a corrupt length.
_MAX_HEADER = 100 * 2**20


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

    The file is memory-mapped and closed by :meth:`close` (or the ``with`` block);
    :meth:`read` always returns arrays that own their memory.

    Args:
        path: the file.

    Raises:
        SafetensorsError: the file is shorter than its header says, the header is not a JSON
            object of valid entries, or two tensors' byte ranges overlap or leave the file.
        OSError: the file cannot be opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        with open(self.path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if size else None
        try:
            self.tensors, self.metadata = _parse_header(self.path, self._map, size)
        except BaseException:
            self.close()
            raise

    def read(self, name: str) -> np.ndarray:
        """Tensor ``name`` as a new float32 array (float16 and bfloat16 widened exactly).

        Raises:
            SafetensorsError: no such tensor, or it is not a float tensor.
        """
        info = self.tensors.get(name)
        if info is None:
            raise SafetensorsError(f"{self.path}: tensor {name!r} is missing (the file has "
                                   f"{len(self.tensors)} tensors)")
        if info.dtype not in FLOAT_DTYPES:
            raise SafetensorsError(f"{self.path}: tensor {name!r} has dtype {info.dtype}; "
                                   f"weights must be one of {', '.join(FLOAT_DTYPES)}")
        if self._map is None:
            raise SafetensorsError(f"{self.path}: the file was closed")
        count = math.prod(info.shape)
        storage = {"F32": "<f4", "F16": "<f2", "BF16": "<u2"}[info.dtype]
        raw = np.frombuffer(self._map, dtype=storage, count=count, offset=info.begin)
        if info.dtype == "BF16":
            array = dtypes.bfloat16_bits_to_float32(raw.astype(np.uint16))
        else:
            array = raw.astype(np.float32)  # a copy: nothing keeps the mapping alive
        return array.reshape(info.shape)

    def close(self) -> None:
        """Unmap the file; calling it again does nothing."""
        if self._map is not None:
            self._map.close()
            self._map = None

    def __enter__(self) -> SafetensorsFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _parse_header(path: Path, data: Any, size: int
                  ) -> tuple[dict[str, TensorInfo], dict[str, str]]:
    if size < 8:
        raise SafetensorsError(f"{path}: {size} bytes is shorter than the 8-byte header "
                               "length; the file is truncated or not safetensors")
    length = int.from_bytes(data[:8], "little")
    if length > _MAX_HEADER or 8 + length > size:
        raise SafetensorsError(f"{path}: the header length field says {length} bytes but the "
                               f"file has {size - 8} after it; the file is truncated or not "
                               "safetensors")
    try:
        header = json.loads(bytes(data[8:8 + length]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SafetensorsError(f"{path}: the {length}-byte header is not valid JSON ({exc})"
                               ) from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: the header is a JSON {type(header).__name__}; it "
                               "must be an object of tensor entries")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise SafetensorsError(f"{path}: __metadata__ must be an object of strings")
    base = 8 + length
    tensors = {name: _entry(path, name, entry, base, size) for name, entry in header.items()}
    ranges = sorted((t.begin, t.end, t.name) for t in tensors.values() if t.end > t.begin)
    for (_, end, first), (begin, _, second) in zip(ranges, ranges[1:], strict=False):
        if begin < end:
            raise SafetensorsError(f"{path}: tensors {first!r} and {second!r} overlap "
                                   "(their data_offsets share bytes); the header is corrupt")
    return tensors, {str(k): str(v) for k, v in metadata.items()}


def _entry(path: Path, name: str, entry: Any, base: int, size: int) -> TensorInfo:
    where = f"{path}: tensor {name!r}"
    if not isinstance(entry, dict):
        raise SafetensorsError(f"{where}: its header entry is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if dtype not in _ITEMSIZE:
        raise SafetensorsError(f"{where}: dtype {dtype!r} is not a safetensors dtype")
    if (not isinstance(shape, list)
            or any(isinstance(d, bool) or not isinstance(d, int) or d < 0 for d in shape)):
        raise SafetensorsError(f"{where}: shape {shape!r} is not a list of non-negative ints")
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
