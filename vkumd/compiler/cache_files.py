"""Files of the on-disk caches: the keyed checksum's secret, safe reads and atomic writes.

Both caches (SPIR-V entries, the pipeline-cache file) sign what they write with
HMAC-SHA256 under a 32-byte secret kept in the cache directory, readable by its owner only.
Someone who can drop files into the directory but cannot read the secret (another local
user of a shared or group-writable directory, a cache copied in from elsewhere) cannot make
an entry that verifies. See ``docs/cache.md``.

Reads never open anything but a regular file: a FIFO would block ``open`` forever and a
device could be endless, so the path is ``lstat``-ed first and opened with ``O_NOFOLLOW`` and
``O_NONBLOCK``, and the open file is ``fstat``-ed again in case it was swapped in between.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import stat
import tempfile
import threading
from collections.abc import Hashable
from pathlib import Path

log = logging.getLogger("vkumd.compiler")

SECRET_NAME = "secret"
SECRET_BYTES = 32
_OPEN_FLAGS = (os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
               | getattr(os, "O_CLOEXEC", 0))

_WARNED: set[Hashable] = set()
_WARNED_LOCK = threading.Lock()


class NotRegularFile(OSError):
    """A cache path holds something other than a regular file (FIFO, socket, link, ...)."""


def warn_once(topic: Hashable, message: str, *args: object) -> None:
    """Log ``message`` as a warning the first time ``topic`` is seen in this process.

    An unusable cache directory is reported once, not once per kernel.
    """
    with _WARNED_LOCK:
        if topic in _WARNED:
            return
        _WARNED.add(topic)
    log.warning(message, *args)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISLNK, "a symbolic link"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a regular file"


def _open_regular(path: Path) -> tuple[int, os.stat_result] | None:
    """Open ``path`` for reading if it is a regular file; ``None`` if it does not exist."""
    try:
        before = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(before.st_mode):
        raise NotRegularFile(f"{path} is {_kind(before.st_mode)}, not a regular file; skipped")
    fd = os.open(path, _OPEN_FLAGS)
    try:
        after = os.fstat(fd)
        if not stat.S_ISREG(after.st_mode) or (after.st_dev, after.st_ino) != (
                before.st_dev, before.st_ino):
            raise NotRegularFile(f"{path} changed while it was opened; skipped")
    except BaseException:
        os.close(fd)
        raise
    return fd, after


def read_regular(path: Path, max_bytes: int) -> bytes | None:
    """Return the contents of a regular file, never opening anything else.

    Args:
        path: the file.
        max_bytes: refuse a file larger than this (a cache file is never that large).

    Returns:
        The bytes, or ``None`` when nothing is at ``path``.

    Raises:
        NotRegularFile: ``path`` is a FIFO, socket, device, directory or symbolic link, or is
            larger than ``max_bytes``.
        OSError: it cannot be read.
    """
    opened = _open_regular(path)
    if opened is None:
        return None
    fd, info = opened
    with os.fdopen(fd, "rb") as handle:
        if info.st_size > max_bytes:
            raise NotRegularFile(f"{path} holds {info.st_size} bytes, more than any cache "
                                 f"file ({max_bytes}); skipped")
        data = handle.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise NotRegularFile(f"{path} grew past {max_bytes} bytes while read; skipped")
    return data


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file and ``os.replace``.

    Readers see the old file or the new one, never half of one; whatever was at ``path``
    (a damaged entry, a FIFO, a link) is replaced, not written through.

    Raises:
        OSError: the directory cannot be created or written.
    """
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:16]}-", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def keyed_digest(secret: bytes, *fields: bytes) -> bytes:
    """HMAC-SHA256 of length-prefixed ``fields``, so no two field lists give the same input."""
    mac = hmac.new(secret, digestmod=hashlib.sha256)
    for field in fields:
        mac.update(len(field).to_bytes(8, "little"))
        mac.update(field)
    return mac.digest()


def digests_match(a: bytes, b: bytes) -> bool:
    """Compare two digests in constant time."""
    return hmac.compare_digest(a, b)


class _UnsafeSecret(Exception):
    """The secret file exists but must not be trusted (why is the message)."""


def _read_secret(path: Path) -> bytes | None:
    try:
        opened = _open_regular(path)
    except NotRegularFile as exc:
        raise _UnsafeSecret(str(exc)) from None
    if opened is None:
        return None
    fd, info = opened
    with os.fdopen(fd, "rb") as handle:
        if info.st_uid != os.geteuid():
            raise _UnsafeSecret(f"owned by uid {info.st_uid}, not by this user "
                                f"(uid {os.geteuid()})")
        if stat.S_IMODE(info.st_mode) != 0o600:
            raise _UnsafeSecret(f"mode {stat.S_IMODE(info.st_mode):04o}, not 0600 (others may "
                                "have read it)")
        data = handle.read(SECRET_BYTES + 1)
    if len(data) != SECRET_BYTES:
        raise _UnsafeSecret(f"{len(data)} bytes, not {SECRET_BYTES}")
    return data


def _install_secret(path: Path, *, overwrite: bool) -> None:
    """Put a fresh secret at ``path``: created 0600 with O_EXCL, then linked or renamed in.

    Linking a complete file in (rather than writing the final name in place) means a
    concurrent reader never sees a half-written secret; ``os.link`` fails if another process
    got there first, and then its secret is the one to use.
    """
    tmp = path.with_name(f".{SECRET_NAME}-{secrets.token_hex(8)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                 | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o600)  # the umask may have taken owner bits away
            handle.write(secrets.token_bytes(SECRET_BYTES))
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def load_secret(directory: Path) -> bytes | None:
    """Return the cache directory's secret, creating it on first use.

    A secret file that is not a regular file owned by this user with mode 0600 is replaced
    by a new one (entries signed with the old one then miss once). When no secret can be
    read or made, a warning is logged once and ``None`` is returned: the caller then works
    without its disk cache.

    Args:
        directory: the cache directory (created with mode 0700 if missing).

    Returns:
        ``SECRET_BYTES`` bytes, or ``None``.
    """
    path = directory / SECRET_NAME
    problem = "it kept changing while read"
    for _attempt in range(4):
        try:
            secret = _read_secret(path)
            if secret is not None:
                return secret
            directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            _install_secret(path, overwrite=False)
        except FileExistsError:
            continue  # another process made it first: read theirs
        except _UnsafeSecret as unsafe:
            log.warning("cache secret %s is unsafe (%s); replacing it with a new one, so "
                        "entries signed with the old one are recompiled once", path, unsafe)
            try:
                _install_secret(path, overwrite=True)
            except OSError as exc:
                problem = f"it cannot be replaced: {exc}"
                break
        except OSError as exc:
            problem = str(exc)
            break
    warn_once(("secret", path), "no usable cache secret at %s (%s): the cache directory is "
              "not writable, or not ours; continuing without the disk cache. Set "
              "VKUMD_CACHE_DIR to a writable directory you own, or VKUMD_CACHE=0.", path,
              problem)
    return None
