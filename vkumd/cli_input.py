"""What ``vkumd embed`` reads: its sentence arguments and the lines of ``--file``, checked and
bounded one at a time, so a file of any size streams through in constant memory.

Line semantics: a line ends at ``\\n`` (``\\r\\n`` counts as one newline); every other
character, ``\\r`` alone, ``\\f``, ``\\x1c``, U+2028 and the rest that ``str.splitlines`` would
also split on, stays inside its line. The last line needs no newline; an empty file has no
lines. A line is UTF-8 of at most ``max_line_bytes`` bytes, not counting its newline.
"""

from __future__ import annotations

import os
import select
import stat
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TextIO

from vkumd.errors import VkumdValueError

MAX_LINE_BYTES = 1 << 20
_PIECE = 1 << 16
STDIN = "-"


@dataclass(frozen=True)
class Sentence:
    """One sentence and where it came from (``argument 2``, ``line 7``)."""

    text: str
    where: str


def _utf8_error(raw: bytes, exc: UnicodeDecodeError) -> str:
    return f"is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at byte offset {exc.start})"


def check_arguments(arguments: list[str], max_line_bytes: int) -> list[Sentence]:
    """The sentence arguments, checked.

    Python hands undecodable argument bytes over as lone surrogates; those are refused here,
    before they reach the tokenizer (which raises a bare ``TypeError``) or a JSON writer.

    Args:
        arguments: the positional sentences as argparse gives them.
        max_line_bytes: the longest argument accepted, in UTF-8 bytes.

    Returns:
        One :class:`Sentence` per argument, named ``argument 1``, ``argument 2``, ...

    Raises:
        VkumdValueError: an argument that is not UTF-8 or is longer than ``max_line_bytes``.
    """
    found = []
    for number, text in enumerate(arguments, 1):
        raw = text.encode("utf-8", "surrogateescape")
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise VkumdValueError(f"embed: argument {number} {_utf8_error(raw, exc)}; pass "
                                  "UTF-8 text") from None
        if len(raw) > max_line_bytes:
            raise VkumdValueError(f"embed: argument {number} is {len(raw)} bytes, over the "
                                  f"limit of {max_line_bytes} (--max-line-bytes); shorten it "
                                  "or raise the limit")
        found.append(Sentence(text, f"argument {number}"))
    return found


def open_input(path: Path) -> tuple[BinaryIO, int | None]:
    """Open ``--file`` for streaming.

    ``-`` is stdin. Regular files, FIFOs and character devices are read as streams, so a
    device that never ends (``/dev/zero``) stops at the line bound rather than filling
    memory. Opening a FIFO waits for its writer, as any reader of one does.

    Args:
        path: the file as given, or ``-``.

    Returns:
        The binary stream (the caller closes it unless it is stdin) and the file's size in
        bytes when it is a regular file, else None.

    Raises:
        VkumdValueError: no such file, a directory, or unreadable.
    """
    if str(path) == STDIN:
        if sys.stdin is None:
            raise VkumdValueError("embed --file -: stdin is closed; give a file")
        return sys.stdin.buffer, None
    try:
        mode = os.stat(path).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError("it is a directory")
        stream = open(path, "rb")  # noqa: SIM115 - the caller closes it after streaming
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise VkumdValueError(f"embed --file {path}: cannot read it ({reason}); give a "
                              "readable text file, or - for stdin") from None
    return stream, (os.fstat(stream.fileno()).st_size if stat.S_ISREG(mode) else None)


class LineReader:
    """The lines of a binary stream, decoded and bounded one at a time.

    Reads the stream's file descriptor in 64 KiB pieces into its own buffer, so it holds at
    most one line past ``max_line_bytes`` plus one piece, and can tell (:meth:`ready`)
    whether the next line is there already or would wait for the writer.

    Args:
        stream: where the lines come from (anything with a ``fileno``).
        name: the file as the user named it, for messages.
        max_line_bytes: the longest line accepted, newline not counted.
    """

    def __init__(self, stream: BinaryIO, name: str, max_line_bytes: int) -> None:
        self.fd = stream.fileno()
        self.name = name
        self.max_line_bytes = max_line_bytes
        self.lines = 0
        self.bytes_read = 0
        self._buf = bytearray()
        self._pos = 0  # where the next line starts in _buf
        self._scan = 0  # _buf[_pos:_scan] holds no newline
        self._eof = False

    def ready(self) -> bool:
        """Whether the next line (or the end) can be had without waiting for more input."""
        if self._eof or self._buf.find(b"\n", self._scan) >= 0:
            return True
        return bool(select.select([self.fd], [], [], 0)[0])

    def _raw_line(self) -> bytes:
        """The next line with its newline; over the limit, what was read of it; b"" at the
        end."""
        buf = self._buf
        while True:
            end = buf.find(b"\n", self._scan)
            if end >= 0:
                raw = bytes(buf[self._pos:end + 1])
                self._pos = self._scan = end + 1
                return raw
            self._scan = len(buf)
            # Past limit + 1 with no newline, the line cannot fit even if a \r\n follows.
            if len(buf) - self._pos > self.max_line_bytes + 1 or self._eof:
                raw = bytes(buf[self._pos:])
                self._pos = self._scan = len(buf)
                return raw
            del buf[:self._pos]  # compact only before a read: once per piece, not per line
            self._scan -= self._pos
            self._pos = 0
            try:
                piece = os.read(self.fd, _PIECE)
            except OSError as exc:
                raise VkumdValueError(f"embed --file {self.name}: reading line "
                                      f"{self.lines + 1} failed ({exc.strerror or exc})"
                                      ) from None
            self._eof = not piece
            buf += piece

    def __iter__(self) -> Iterator[Sentence]:
        limit = self.max_line_bytes
        while raw := self._raw_line():
            self.bytes_read += len(raw)
            self.lines += 1
            content = raw
            if raw.endswith(b"\n"):
                content = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            if len(content) > limit:
                raise VkumdValueError(f"embed --file {self.name}: line {self.lines} is longer "
                                      f"than {limit} bytes (--max-line-bytes); split the line "
                                      "or raise the limit")
            try:
                text = content.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise VkumdValueError(f"embed --file {self.name}: line {self.lines} "
                                      f"{_utf8_error(content, exc)}; convert the file to UTF-8 "
                                      "(iconv -t UTF-8)") from None
            yield Sentence(text, f"line {self.lines}")


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


class StreamProgress:
    """``12345 sentences, 41% of 3.2 MiB, 850.1/s`` on one self-overwriting stderr line.

    The input's length is unknown while streaming, so progress is counted in sentences and,
    for a regular file, in bytes read of its size. Nothing is drawn in the first
    ``after_s`` seconds, so short runs stay quiet; redraws are at most every 0.2 s.

    Args:
        enabled: draw at all.
        total_bytes: the input file's size, when known.
        stream: where to draw (stderr by default).
        after_s: seconds before the first draw.
    """

    def __init__(self, enabled: bool, total_bytes: int | None = None,
                 stream: TextIO | None = None, after_s: float = 1.0) -> None:
        self.enabled = enabled
        self.total_bytes = total_bytes
        self.stream = stream if stream is not None else sys.stderr
        self.started = time.perf_counter()
        self.after_s = after_s
        self.last = float("-inf")
        self.drawn = False

    def update(self, sentences: int, bytes_read: int) -> None:
        """``sentences`` are done and ``bytes_read`` of the file consumed; redraw if due."""
        now = time.perf_counter()
        if not self.enabled or now - self.started < self.after_s or now - self.last < 0.2:
            return
        self.last = now
        rate = sentences / max(now - self.started, 1e-9)
        where = ""
        if self.total_bytes:
            percent = min(100, 100 * bytes_read // self.total_bytes)
            where = f", {percent}% of {_human(self.total_bytes)}"
        self.stream.write(f"\r{sentences} sentences{where}, {rate:.1f}/s ")
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        """End the progress line, if one was drawn."""
        if self.drawn:
            self.stream.write("\n")
            self.stream.flush()
            self.drawn = False
