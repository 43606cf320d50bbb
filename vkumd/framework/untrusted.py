"""Reading model files as untrusted input: regular files only, every read bounded.

A model file may come from anyone, so nothing here trusts what it is or what it says about
itself. A path is opened with ``O_NONBLOCK`` (opening a FIFO with no writer would otherwise
block forever) and checked with ``fstat`` on the open descriptor (checking the path before
opening it would race with someone swapping the file). Reads go through ``os.pread`` of a
length fixed in advance, never ``mmap``: a file truncated while mapped kills the process with
``SIGBUS``, while a short ``pread`` is an error we can name.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from vkumd.framework.models.errors import ModelFileError

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def open_regular(path: str | os.PathLike[str], error: type[ModelFileError] = ModelFileError
                 ) -> tuple[int, int]:
    """Open ``path`` for reading, refusing anything but a regular file.

    Args:
        path: the file.
        error: the :class:`ModelFileError` subclass to raise.

    Returns:
        ``(fd, size)``: an open descriptor (the caller closes it) and the size at open.

    Raises:
        ModelFileError: (or ``error``) the path is missing, unreadable, or a directory,
            FIFO, device or socket; the message names the path.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise error(f"{path}: the file is missing") from None
    except OSError as exc:
        raise error(f"{path}: cannot open it ({exc.strerror or exc})") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise error(f"{path}: this is {_kind(info.st_mode)}; model files are read only "
                        "from regular files (copy the data into a file and pass that)")
    except BaseException:
        os.close(fd)
        raise
    return fd, info.st_size


def pread_exact(fd: int, length: int, offset: int, path: str | os.PathLike[str], what: str,
                error: type[ModelFileError] = ModelFileError) -> bytes:
    """``length`` bytes at ``offset``, or an error naming the file: the file shrank.

    Args:
        fd: an open descriptor.
        length: how many bytes (checked against the file's size before the call).
        offset: where they start.
        path: the file, for the message.
        what: what the bytes are (``"tensor 'w'"``), for the message.
        error: the error class to raise.

    Returns:
        The bytes.

    Raises:
        ModelFileError: (or ``error``) fewer bytes were there than the size at open promised.
    """
    chunks: list[bytes] = []
    got = 0
    try:
        while got < length:
            # pread returns at most ~2 GiB at once on Linux: loop until all is read.
            chunk = os.pread(fd, min(length - got, 1 << 30), offset + got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as exc:
        raise error(f"{path}: reading {what} failed ({exc.strerror or exc})") from None
    if got != length:
        raise error(f"{path}: {what} needs bytes {offset}..{offset + length} but the file "
                    f"ends at byte {offset + got}; it was truncated or changed while being "
                    "read")
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)  # no copy for one chunk


def read_regular(path: str | os.PathLike[str], limit: int,
                 error: type[ModelFileError] = ModelFileError) -> bytes:
    """The whole of a regular file of at most ``limit`` bytes.

    Args:
        path: the file.
        limit: the largest size accepted (checked before anything is read).
        error: the error class to raise.

    Returns:
        Its bytes.

    Raises:
        ModelFileError: (or ``error``) as :func:`open_regular`, or the file is larger than
            ``limit``, or it shrank while being read.
    """
    fd, size = open_regular(path, error)
    try:
        if size > limit:
            raise error(f"{path}: {size} bytes is more than the {limit} bytes accepted for "
                        f"a {Path(path).suffix or 'model'} file; it is not a model file, or "
                        "the limit is too small for it")
        return pread_exact(fd, size, 0, path, "the file", error)
    finally:
        os.close(fd)
