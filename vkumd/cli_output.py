"""Where ``vkumd embed`` writes: stdout, or ``--out`` (``.npy``/``.jsonl``) written
incrementally to a temporary file beside the target and renamed onto it only when every row
is in, so the output is writable before anything is computed and a failed run leaves neither
a half file nor a clobbered old one."""

from __future__ import annotations

import json
import os
import struct
import sys
import tempfile
from pathlib import Path
from typing import BinaryIO

import numpy as np

from vkumd.errors import VkumdValueError

OUT_FORMATS = (".npy", ".jsonl")
# The .npy header is written last, when the row count is known, into space reserved first:
# 128 bytes hold the float32 2-D header for any row count below 10**40 (the format wants
# the data to start at a multiple of 64).
_NPY_HEADER_BYTES = 128
# JSON lets these stand raw inside strings, but readers that split on every Unicode line break
# (str.splitlines, JavaScript) would cut a .jsonl record at them: written escaped, a record is
# one line under any reader.
_LINE_BREAKS_ESCAPED = str.maketrans({c: f"\\u{ord(c):04x}" for c in "\x85\u2028\u2029"})


def npy_header(rows: int, columns: int) -> bytes:
    """A version 1.0 ``.npy`` header for a C-order little-endian float32 ``(rows, columns)``
    array, padded to exactly 128 bytes."""
    described = f"{{'descr': '<f4', 'fortran_order': False, 'shape': ({rows}, {columns}), }}"
    body = described.ljust(_NPY_HEADER_BYTES - 10 - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(body)) + body.encode("ascii")


def compact(vector: np.ndarray, shown: int = 4) -> str:
    """``[0.0412, -0.0213, ..., 0.0123] (384)``: the first and last few values."""
    values = [f"{v:+.4f}" for v in vector]
    if len(values) > 2 * shown:
        values = values[:shown] + ["..."] + values[-shown:]
    return f"[{', '.join(values)}] ({len(vector)})"


class Output:
    """Rows go to stdout as one compact line each, or to ``path`` through a temporary file.

    Args:
        path: ``--out``, or None for stdout. Creating the temporary file is the writability
            check, so make the Output before computing anything.

    Raises:
        VkumdValueError: the name does not end in .npy or .jsonl, or no file can be created
            in its directory.
    """

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.rows = 0
        self.columns = 0
        self._file: BinaryIO | None = None
        self._temp: str | None = None
        if path is None:
            return
        if path.suffix not in OUT_FORMATS:
            raise VkumdValueError(f"embed --out {path}: the name must end in "
                                  f"{' or '.join(OUT_FORMATS)}")
        if path.is_dir():
            raise VkumdValueError(f"embed --out {path}: it is a directory; name a file in it")
        try:
            fd, self._temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".part",
                                              dir=path.parent)
        except OSError as exc:
            raise VkumdValueError(f"embed --out {path}: cannot write there "
                                  f"({exc.strerror or exc}); choose a writable directory"
                                  ) from None
        # mkstemp makes the file private (0600); the output gets the mode a plain open()
        # would give it.
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)
        self._file = os.fdopen(fd, "wb")
        if path.suffix == ".npy":
            self._file.write(b"\0" * _NPY_HEADER_BYTES)

    def write(self, texts: list[str], embeddings: np.ndarray) -> None:
        """Append rows (one per text, in order).

        Raises:
            VkumdValueError: the disk refused the write.
        """
        self.columns = embeddings.shape[1]
        first = self.rows
        self.rows += len(texts)
        if self._file is None:
            for i, (text, row) in enumerate(zip(texts, embeddings, strict=True), first):
                shown = text if len(text) <= 40 else text[:37] + "..."
                print(f"{i} {compact(row)} {json.dumps(shown, ensure_ascii=False)}")
            sys.stdout.flush()
            return
        try:
            if self.path is not None and self.path.suffix == ".npy":
                self._file.write(np.ascontiguousarray(embeddings, dtype="<f4").tobytes())
            else:
                for text, row in zip(texts, embeddings, strict=True):
                    line = json.dumps({"text": text, "embedding": [float(v) for v in row]},
                                      ensure_ascii=False).translate(_LINE_BREAKS_ESCAPED)
                    self._file.write(line.encode("utf-8") + b"\n")
        except OSError as exc:
            raise VkumdValueError(f"embed --out {self.path}: writing failed after "
                                  f"{first} rows ({exc.strerror or exc})") from None

    def finish(self) -> None:
        """Complete the file and rename it onto ``--out``.

        Raises:
            VkumdValueError: the header, flush or rename failed.
        """
        if self._file is None or self._temp is None:
            return
        try:
            if self.path is not None and self.path.suffix == ".npy":
                self._file.seek(0)
                self._file.write(npy_header(self.rows, self.columns))
            self._file.close()
            os.replace(self._temp, self.path)  # type: ignore[arg-type]
        except OSError as exc:
            self.abort()
            raise VkumdValueError(f"embed --out {self.path}: cannot finish it "
                                  f"({exc.strerror or exc})") from None
        self._file = self._temp = None

    def abort(self) -> None:
        """Drop the temporary file (safe to call more than once)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        if self._temp is not None:
            try:
                os.unlink(self._temp)
            except OSError:
                pass  # already gone: nothing left to clean
            self._temp = None
