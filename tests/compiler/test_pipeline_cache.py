"""The persisted ``VkPipelineCache``: saved on close, reloaded, and never trusted blindly.

Every test gets its own ``VKUMD_CACHE_DIR`` and its own context, so the file it inspects is
the one that context wrote. A damaged, foreign or unwritable cache must only cost a warning.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import struct
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import vkumd
from vkumd import settings
from vkumd.compiler.cache_files import load_secret
from vkumd.compiler.pipeline_cache import (
    MAGIC,
    PipelineCache,
    cache_file,
    check_payload,
    encode_file,
)
from vkumd.framework.ops import add

_VK_HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne


@pytest.fixture
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(root))
    monkeypatch.delenv("VKUMD_CACHE", raising=False)
    return root


@pytest.fixture
def caps(ctx: vkumd.Context) -> vkumd.DeviceCaps:
    return ctx.caps


def _exercise(context: vkumd.Context) -> None:
    """Build a pipeline through the cache and run it: the context must still work."""
    a = np.arange(100, dtype=np.float32)
    b = np.full(100, 0.5, dtype=np.float32)
    out = add(context.tensor(a), context.tensor(b)).numpy()
    np.testing.assert_array_equal(out, a + b)


def _run_once() -> tuple[int, Path | None]:
    """Open a context, use it, close it; return what it loaded and where it saves."""
    with vkumd.Context() as context:
        loaded = context.pipeline_cache.loaded_bytes
        path = context.pipeline_cache.path
        _exercise(context)
    return loaded, path


def _secret() -> bytes:
    secret = load_secret(settings.cache_dir())
    assert secret is not None
    return secret


def _blob(payload: bytes, caps: vkumd.DeviceCaps) -> bytes:
    """A file as this cache directory would sign it: only the payload is wrong."""
    return encode_file(payload, caps, _secret())


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.levelno == logging.WARNING and text in r.getMessage()]


def test_file_name_carries_device_identity(caps: vkumd.DeviceCaps, cache_root: Path) -> None:
    path = cache_file(caps)
    assert path.parent == cache_root / "pipelines"
    assert path.name == (f"{caps.vendor_id:04x}-{caps.device_id:04x}-{caps.driver_version:08x}-"
                         f"{caps.pipeline_cache_uuid.hex()}.bin")


def test_saved_on_close_and_reloaded(caps: vkumd.DeviceCaps, cache_root: Path) -> None:
    loaded, path = _run_once()
    assert loaded == 0, "a fresh cache directory must start empty"
    assert path == cache_file(caps)
    assert path.is_file()
    data = path.read_bytes()
    assert check_payload(data, caps, _secret()) is None

    loaded_again, _ = _run_once()
    assert loaded_again == len(data) - len(MAGIC) - 32 > 0


def test_save_leaves_no_temporary_files(cache_root: Path) -> None:
    _run_once()
    _run_once()
    assert [p.name for p in (cache_root / "pipelines").iterdir() if p.name.startswith(".")] == []


def _flip(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes([data[middle] ^ 0xFF]) + data[middle + 1:]


def _flip_payload_byte(data: bytes) -> bytes:
    at = len(MAGIC) + 32 + 4  # inside the Vulkan header's version field
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


CORRUPTIONS = {
    "flipped": _flip,
    "flipped-payload": _flip_payload_byte,
    "flipped-digest": lambda d: d[:len(MAGIC)] + bytes([d[len(MAGIC)] ^ 0xFF]) + d[len(MAGIC) + 1:],
    "truncated": lambda d: d[:len(d) - 7],
    "truncated-to-magic": lambda d: d[:len(MAGIC)],
    "empty": lambda d: b"",
    "junk": lambda d: os.urandom(4096),
    "junk-with-magic": lambda d: MAGIC + os.urandom(200),
}


@pytest.mark.parametrize("damage", sorted(CORRUPTIONS))
def test_corrupt_file_is_ignored_and_replaced(damage: str, caps: vkumd.DeviceCaps,
                                              cache_root: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    _, path = _run_once()
    assert path is not None
    good = path.read_bytes()
    path.write_bytes(CORRUPTIONS[damage](good))

    caplog.set_level(logging.WARNING, logger="vkumd")
    loaded, _ = _run_once()
    assert loaded == 0
    assert _warnings(caplog, str(path)), f"no warning naming {path}"

    assert check_payload(path.read_bytes(), caps, _secret()) is None, \
        "the bad file was not replaced"
    caplog.clear()
    assert _run_once()[0] > 0
    assert not _warnings(caplog, str(path))


def _foreign_header(caps: vkumd.DeviceCaps, **change: object) -> bytes:
    fields = {"vendor": caps.vendor_id, "device": caps.device_id,
              "uuid": caps.pipeline_cache_uuid}
    fields.update(change)
    return _VK_HEADER.pack(_VK_HEADER.size, 1, fields["vendor"], fields["device"],
                           fields["uuid"])


FOREIGN = {
    "vendor": {"vendor": 0x10DE},
    "device": {"device": 0x2330},
    "uuid": {"uuid": bytes(range(16))},
}


@pytest.mark.parametrize("field", sorted(FOREIGN))
def test_foreign_file_is_ignored_and_replaced(field: str, caps: vkumd.DeviceCaps,
                                              cache_root: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    path = cache_file(caps)
    path.parent.mkdir(parents=True)
    payload = _foreign_header(caps, **FOREIGN[field]) + b"\0" * 64
    assert payload[:_VK_HEADER.size] != _foreign_header(caps), "pick another foreign value"
    path.write_bytes(_blob(payload, caps))
    assert check_payload(path.read_bytes(), caps, _secret()) == "made by another device or driver"

    caplog.set_level(logging.WARNING, logger="vkumd")
    loaded, _ = _run_once()
    assert loaded == 0
    assert any("another device" in m for m in _warnings(caplog, str(path)))
    assert check_payload(path.read_bytes(), caps, _secret()) is None


def test_unknown_header_version_is_ignored(caps: vkumd.DeviceCaps, cache_root: Path,
                                           caplog: pytest.LogCaptureFixture) -> None:
    path = cache_file(caps)
    path.parent.mkdir(parents=True)
    payload = _VK_HEADER.pack(_VK_HEADER.size, 7, caps.vendor_id, caps.device_id,
                              caps.pipeline_cache_uuid)
    path.write_bytes(_blob(payload, caps))
    caplog.set_level(logging.WARNING, logger="vkumd")
    assert _run_once()[0] == 0
    assert any("header version 7" in m for m in _warnings(caplog, str(path)))


def test_disabled_disk_cache_writes_nothing(cache_root: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_CACHE", "0")
    loaded, path = _run_once()
    assert (loaded, path) == (0, None)
    written = list(cache_root.rglob("*")) if cache_root.exists() else []
    assert written == []


@pytest.fixture
def blocked_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A cache directory that cannot be created: its path runs through a regular file.

    (The suite may run as root, so permission bits would not stop it.)
    """
    blocker = tmp_path / "afile"
    blocker.write_text("not a directory")
    root = blocker / "sub"
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(root))
    monkeypatch.delenv("VKUMD_CACHE", raising=False)
    yield root
    assert blocker.read_text() == "not a directory"


def test_unwritable_directory_warns_and_continues(blocked_root: Path,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="vkumd")
    with vkumd.Context() as context:
        cache = context.pipeline_cache
        assert cache.path is not None and cache.path.is_relative_to(blocked_root)
        assert cache.loaded_bytes == 0
        _exercise(context)
        assert cache.save() is False
    assert any("cannot save pipeline cache" in m for m in _warnings(caplog, str(blocked_root)))
    assert not blocked_root.exists()


def test_unreadable_file_warns(caps: vkumd.DeviceCaps, cache_root: Path,
                               caplog: pytest.LogCaptureFixture) -> None:
    # A directory where the file should be: reading fails, saving fails, nothing crashes.
    path = cache_file(caps)
    path.mkdir(parents=True)
    caplog.set_level(logging.WARNING, logger="vkumd")
    loaded, _ = _run_once()
    assert loaded == 0
    messages = _warnings(caplog, str(path))
    assert any("cannot read pipeline cache" in m for m in messages)
    assert any("cannot save pipeline cache" in m for m in messages)
    assert [p.name for p in path.parent.iterdir()] == [path.name], "temporary file left behind"


def test_explicit_path_and_release_twice(ctx: vkumd.Context, tmp_path: Path) -> None:
    path = tmp_path / "explicit.bin"
    cache = PipelineCache(ctx.device.handle, ctx.caps, path=path)
    try:
        assert cache.save() is True
        assert check_payload(path.read_bytes(), ctx.caps, load_secret(tmp_path)) is None
    finally:
        cache.release()
        cache.release()
    assert cache.save() is False, "a released cache has nothing to save"


FORGERIES = {
    # The old format: anyone could recompute a plain sha256 over a payload of their making.
    "unkeyed-sha256": lambda caps, payload: (b"VKUMDPC1" + hashlib.sha256(payload).digest()
                                             + payload),
    "unkeyed-sha256-new-magic": lambda caps, payload: (MAGIC + hashlib.sha256(payload).digest()
                                                       + payload),
    "another-secret": lambda caps, payload: encode_file(payload, caps, os.urandom(32)),
    # Signed for another driver version's file name, then renamed to ours.
    "renamed": lambda caps, payload: encode_file(
        payload, dataclasses.replace(caps, driver_version=caps.driver_version + 1), _secret()),
}


def test_header_size_beyond_the_file_is_refused(caps: vkumd.DeviceCaps, cache_root: Path
                                                ) -> None:
    header = _VK_HEADER.pack(4096, 1, caps.vendor_id, caps.device_id, caps.pipeline_cache_uuid)
    assert check_payload(_blob(header, caps), caps, _secret()) == "header size 4096 out of range"


@pytest.mark.parametrize("forgery", sorted(FORGERIES))
def test_forged_file_never_reaches_the_driver(forgery: str, caps: vkumd.DeviceCaps,
                                              cache_root: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """A valid Vulkan header followed by garbage, under a checksum the forger could compute."""
    path = cache_file(caps)
    path.parent.mkdir(parents=True)
    payload = _foreign_header(caps) + os.urandom(4096)
    path.write_bytes(FORGERIES[forgery](caps, payload))
    caplog.set_level(logging.WARNING, logger="vkumd")
    loaded, _ = _run_once()
    assert loaded == 0
    assert _warnings(caplog, str(path))
    assert check_payload(path.read_bytes(), caps, _secret()) is None


_FIFO_SCRIPT = textwrap.dedent("""
    import numpy as np
    import vkumd
    from vkumd.framework.ops import add
    with vkumd.Context() as context:
        loaded = context.pipeline_cache.loaded_bytes
        out = add(context.tensor(np.ones(8, np.float32)), context.tensor(np.ones(8, np.float32)))
        print(loaded, out.numpy().sum())
""")


def test_fifo_at_cache_path_does_not_hang(caps: vkumd.DeviceCaps, cache_root: Path) -> None:
    """A FIFO blocks whoever opens it for reading; it must be skipped, unopened, and replaced.
    In a subprocess with a timeout, so a regression fails rather than hangs."""
    path = cache_file(caps)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    done = subprocess.run([sys.executable, "-c", _FIFO_SCRIPT], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "VKUMD_LOG": "warning"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0", "16.0"]
    assert "FIFO" in done.stderr and str(path) in done.stderr
    assert stat.S_ISREG(os.lstat(path).st_mode)
    assert check_payload(path.read_bytes(), caps, _secret()) is None
