"""The SPIR-V cache: memory and disk layers, corruption handling, unwritable directories."""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import struct
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest

import vkumd
from vkumd.compiler import spirv_cache
from vkumd.compiler.cache_files import SECRET_NAME, load_secret
from vkumd.compiler.spirv_cache import (
    MAGIC,
    SCHEMA_VERSION,
    SpirvCache,
    check_spirv,
    decode_entry,
    default_cache,
    encode_entry,
)
from vkumd.errors import ShaderCompileError
from vkumd.framework.ops import add

SOURCE = """#version 450
#include "common.glsl"
layout(local_size_x = VKUMD_WORKGROUP_SIZE) in;
layout(std430, binding = 0) buffer Data { float x[]; };
void main() {
    x[gl_GlobalInvocationID.x] *= SCALE;
}
"""
DEFINES = {"SCALE": "2.0"}


@pytest.fixture(autouse=True)
def _cache_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    cache_root = tmp_path / "cache"
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(cache_root))
    monkeypatch.delenv("VKUMD_CACHE", raising=False)
    monkeypatch.delenv("VKUMD_DUMP_SHADERS", raising=False)
    monkeypatch.delenv("VKUMD_GLSLANG_LIB", raising=False)
    return cache_root


def _compile(cache: SpirvCache, defines: dict[str, str] | None = None) -> bytes:
    return cache.get_or_compile(SOURCE, name="scale", defines=defines or DEFINES,
                                include_dirs=None, target_env="vulkan1.3")


def _entries(cache: SpirvCache) -> list[Path]:
    return sorted(cache.directory.glob("*.spv"))


def test_directory_follows_settings(_cache_env: Path) -> None:
    assert SpirvCache().directory == _cache_env / "spirv"


def test_miss_then_memory_hit_then_disk_hit() -> None:
    first = SpirvCache()
    spirv = _compile(first)
    assert int.from_bytes(spirv[:4], "little") == 0x07230203
    stats = first.stats()
    assert (stats.misses, stats.hits_memory, stats.hits_disk) == (1, 0, 0)
    assert stats.compile_seconds > 0
    assert len(_entries(first)) == 1

    assert _compile(first) == spirv
    assert first.stats().hits_memory == 1

    second = SpirvCache()
    assert _compile(second) == spirv
    stats = second.stats()
    assert (stats.misses, stats.hits_memory, stats.hits_disk) == (0, 0, 1)
    assert _compile(second) == spirv
    assert second.stats().hits_memory == 1


def test_key_changes_with_defines_target_and_headers(tmp_path: Path) -> None:
    cache = SpirvCache()
    _compile(cache)
    _compile(cache, {"SCALE": "3.0"})
    cache.get_or_compile(SOURCE, name="scale", defines=DEFINES, target_env="vulkan1.2")
    assert cache.stats().misses == 3

    inc = tmp_path / "inc"
    inc.mkdir()
    header = inc / "common.glsl"
    header.write_text("#define VKUMD_WORKGROUP_SIZE 32\n")
    cache.get_or_compile(SOURCE, name="scale", defines=DEFINES, include_dirs=[inc])
    header.write_text("#define VKUMD_WORKGROUP_SIZE 16\n")
    cache.get_or_compile(SOURCE, name="scale", defines=DEFINES, include_dirs=[inc])
    assert cache.stats().misses == 5


def test_define_order_does_not_matter() -> None:
    cache = SpirvCache()
    cache.get_or_compile(SOURCE, name="scale", defines={"SCALE": "2.0", "X": 1})
    cache.get_or_compile(SOURCE, name="scale", defines={"X": 1, "SCALE": "2.0"})
    assert cache.stats().misses == 1


@pytest.mark.parametrize("damage", ["flip", "truncate", "empty", "header_only"])
def test_corrupt_entry_is_miss_and_rewritten(damage: str, caplog: pytest.LogCaptureFixture
                                             ) -> None:
    spirv = _compile(SpirvCache())
    (entry,) = _entries(SpirvCache())
    good = entry.read_bytes()
    data = bytearray(good)
    if damage == "flip":
        data[-8] ^= 0xFF
        data[-9] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) - 12]
    elif damage == "empty":
        data = bytearray()
    else:
        data = data[:20]
    entry.write_bytes(bytes(data))

    fresh = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        assert _compile(fresh) == spirv
    stats = fresh.stats()
    assert (stats.misses, stats.hits_disk, stats.corrupt_entries) == (1, 0, 1)
    assert any("corrupt" in r.getMessage() for r in caplog.records)
    assert entry.read_bytes() == good

    again = SpirvCache()
    _compile(again)
    assert again.stats().hits_disk == 1


def test_entry_with_other_schema_is_miss() -> None:
    spirv = _compile(SpirvCache())
    (entry,) = _entries(SpirvCache())
    data = bytearray(entry.read_bytes())
    data[8] += 1  # schema version field follows the 8-byte magic
    entry.write_bytes(bytes(data))
    fresh = SpirvCache()
    assert _compile(fresh) == spirv
    assert fresh.stats().misses == 1


def test_encode_decode_roundtrip() -> None:
    payload = _compile(SpirvCache(disk=False))
    key, secret = "ab" * 32, bytes(range(32))
    assert decode_entry(encode_entry(payload, key, secret), key, secret) == payload
    assert decode_entry(b"", key, secret) is None
    assert decode_entry(encode_entry(payload, key, secret)[:-1], key, secret) is None


def test_unwritable_directory_warns_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    # Tests run as root, which ignores permission bits; a regular file in the path cannot be
    # bypassed.
    blocker = tmp_path / "file_not_dir"
    blocker.write_text("in the way")
    monkeypatch.setenv("VKUMD_CACHE_DIR", str(blocker / "sub"))
    cache = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        first = _compile(cache)
        _compile(cache, {"SCALE": "3.0"})
        _compile(SpirvCache(), {"SCALE": "4.0"})
    assert int.from_bytes(first[:4], "little") == 0x07230203
    warnings = [r for r in caplog.records if "not writable" in r.getMessage()]
    assert len(warnings) == 1
    assert cache.stats().disk_write_errors == 2


def test_disk_cache_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_CACHE", "0")
    cache = SpirvCache()
    _compile(cache)
    _compile(cache)
    assert not cache.directory.exists()
    stats = cache.stats()
    assert (stats.misses, stats.hits_memory) == (1, 1)
    other = SpirvCache()
    _compile(other)
    assert other.stats().misses == 1


def test_no_temp_files_left() -> None:
    cache = SpirvCache()
    _compile(cache)
    _compile(cache, {"SCALE": "5.0"})
    leftovers = [p for p in cache.directory.iterdir() if p.suffix != ".spv"]
    assert leftovers == []


def test_compile_error_is_not_cached() -> None:
    cache = SpirvCache()
    with pytest.raises(ShaderCompileError):
        cache.get_or_compile(SOURCE, name="scale")  # SCALE undefined
    assert cache.stats().misses == 0
    assert _entries(cache) == []


def test_validator_backend_cache() -> None:
    cache = SpirvCache(backend="validator")
    spirv = _compile(cache)
    assert int.from_bytes(spirv[:4], "little") == 0x07230203


def test_default_cache_is_shared() -> None:
    assert default_cache() is default_cache()
    assert isinstance(spirv_cache.default_cache(), SpirvCache)


# -- integrity: what the keyed checksum and the SPIR-V walk reject -------------------------

_UNKEYED_HEADER = struct.Struct("<8sIIQ32s")  # the old layout's field order, sha256 digest


def _secret(cache: SpirvCache) -> bytes:
    secret = load_secret(cache.secret_directory)
    assert secret is not None
    return secret


def _words(*words: int) -> bytes:
    return struct.pack(f"<{len(words)}I", *words)


# Capability Shader; MemoryModel Logical GLSL450 -- a module with no entry point.
_NO_ENTRY_POINT = _words(0x07230203, 0x00010000, 0, 8, 0, 0x00020011, 1, 0x0003000E, 0, 1)


def _garbage(spirv: bytes) -> dict[str, bytes]:
    """Payloads a forger might file, each wrong in one structural way."""
    return {
        "random": os.urandom(len(spirv)),
        "unaligned": spirv[:-2],
        "truncated-mid-instruction": spirv[: len(spirv) // 2 // 4 * 4 + 4],
        "zero-word-count": spirv[:20] + b"\0\0\0\0" + spirv[24:],
        "overlong-instruction": spirv[:20] + _words(0xFFFF0011) + spirv[24:],
        "bad-version": spirv[:4] + _words(0x00070000) + spirv[8:],
        "zero-bound": spirv[:12] + _words(0) + spirv[16:],
        "no-entry-point": _NO_ENTRY_POINT,
    }


GARBAGE_KINDS = sorted(_garbage(b"\0" * 64))


def test_check_spirv_accepts_compiled_and_rejects_garbage() -> None:
    spirv = _compile(SpirvCache(disk=False))
    assert check_spirv(spirv) is None
    for kind, data in _garbage(spirv).items():
        assert check_spirv(data) is not None, kind


def test_garbage_is_also_refused_by_spirv_val(tmp_path: Path) -> None:
    """The walk is no stricter than the spec: spirv-val refuses every garbage kind too."""
    from test_spirv_val import TARGET_ENV, spirv_val  # same directory; pytest puts it on the path

    spirv = _compile(SpirvCache(disk=False))
    module = tmp_path / "module.spv"
    for kind, data in {"compiled": spirv, **_garbage(spirv)}.items():
        module.write_bytes(data)
        done = subprocess.run([str(spirv_val()), "--target-env", TARGET_ENV, str(module)],
                              capture_output=True, text=True, errors="replace", timeout=60)
        assert (done.returncode == 0) == (kind == "compiled"), (kind, done.stderr)


def test_swapped_entries_are_misses(caplog: pytest.LogCaptureFixture) -> None:
    first = SpirvCache()
    two, three = _compile(first), _compile(first, {"SCALE": "3.0"})
    assert two != three
    path_two, path_three = (first.entry_path(k) for k in _keys(first, ["2.0", "3.0"]))
    data_two, data_three = path_two.read_bytes(), path_three.read_bytes()
    path_two.write_bytes(data_three)
    path_three.write_bytes(data_two)

    swapped = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        assert _compile(swapped) == two
        assert _compile(swapped, {"SCALE": "3.0"}) == three
    stats = swapped.stats()
    assert (stats.misses, stats.hits_disk, stats.corrupt_entries) == (2, 0, 2)
    assert sum("checksum does not match" in r.getMessage() for r in caplog.records) == 2
    assert (path_two.read_bytes(), path_three.read_bytes()) == (data_two, data_three)


def _keys(cache: SpirvCache, scales: list[str]) -> list[str]:
    """The cache keys of SOURCE at the given SCALE values (via the file each compile wrote)."""
    keys = []
    for scale in scales:
        probe = SpirvCache(cache.directory / f"probe-{scale}")
        _compile(probe, {"SCALE": scale})
        (entry,) = _entries(probe)
        keys.append(entry.stem)
    return keys


def test_swapped_kernels_run_correctly(monkeypatch: pytest.MonkeyPatch) -> None:
    """The incident: float32 and int32 add entries swapped on disk; an int add ran for a float
    add. Both must recompile and compute the right thing."""
    def run() -> tuple[np.ndarray, np.ndarray]:
        with vkumd.Context() as context:
            f = add(context.tensor(np.full(64, 1.5, np.float32)),
                    context.tensor(np.full(64, 0.25, np.float32))).numpy()
            i = add(context.tensor(np.full(64, 7, np.int32)),
                    context.tensor(np.full(64, -3, np.int32))).numpy()
        return f, i

    cache = SpirvCache()
    monkeypatch.setattr(spirv_cache, "_DEFAULT", cache)
    f_ref, i_ref = np.full(64, 1.75, np.float32), np.full(64, 4, np.int32)
    written: list[set[Path]] = []
    with vkumd.Context() as context:
        for dtype, a, b in ((np.float32, 1.5, 0.25), (np.int32, 7, -3)):
            before = set(_entries(cache))
            add(context.tensor(np.full(64, a, dtype)), context.tensor(np.full(64, b, dtype)))
            written.append(set(_entries(cache)) - before)
    (float_entry,), (int_entry,) = written
    float_data, int_data = float_entry.read_bytes(), int_entry.read_bytes()
    float_entry.write_bytes(int_data)
    int_entry.write_bytes(float_data)

    fresh = SpirvCache()
    monkeypatch.setattr(spirv_cache, "_DEFAULT", fresh)
    f, i = run()
    np.testing.assert_array_equal(f, f_ref)
    np.testing.assert_array_equal(i, i_ref)
    assert (fresh.stats().misses, fresh.stats().corrupt_entries) == (2, 2)


@pytest.mark.parametrize("kind", GARBAGE_KINDS)
def test_forged_entry_with_unkeyed_hash_is_miss(kind: str) -> None:
    """A forger without the secret recomputes the old plain sha256 over garbage SPIR-V."""
    cache = SpirvCache()
    spirv = _compile(cache)
    (entry,) = _entries(cache)
    payload = _garbage(spirv)[kind]
    entry.write_bytes(_UNKEYED_HEADER.pack(MAGIC, SCHEMA_VERSION, 0, len(payload),
                                           hashlib.sha256(payload).digest()) + payload)
    fresh = SpirvCache()
    assert _compile(fresh) == spirv
    assert (fresh.stats().misses, fresh.stats().corrupt_entries) == (1, 1)
    assert SpirvCache().get_or_compile(SOURCE, name="scale", defines=DEFINES) == spirv


@pytest.mark.parametrize("kind", GARBAGE_KINDS)
def test_signed_garbage_spirv_is_miss(kind: str, caplog: pytest.LogCaptureFixture) -> None:
    """Even an entry that verifies (the secret leaked, or a bug wrote it) is walked as SPIR-V
    before it can reach the driver."""
    cache = SpirvCache()
    spirv = _compile(cache)
    (entry,) = _entries(cache)
    entry.write_bytes(encode_entry(_garbage(spirv)[kind], entry.stem, _secret(cache)))
    fresh = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        assert _compile(fresh) == spirv
    assert (fresh.stats().misses, fresh.stats().corrupt_entries) == (1, 1)
    assert any("SPIR-V" in r.getMessage() and "corrupt" in r.getMessage()
               for r in caplog.records)


def test_secret_file_is_private(_cache_env: Path) -> None:
    cache = SpirvCache()
    _compile(cache)
    info = os.lstat(_cache_env / SECRET_NAME)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid() and info.st_size == 32
    assert stat.S_IMODE(os.lstat(_cache_env).st_mode) == 0o700
    assert [p.name for p in _cache_env.iterdir() if p.name.startswith(".")] == []


def test_concurrent_first_use_agrees_on_one_secret(tmp_path: Path) -> None:
    found: list[bytes | None] = []
    threads = [threading.Thread(target=lambda: found.append(load_secret(tmp_path / "c")))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(found) == 8 and found[0] is not None and len(set(found)) == 1


def _other_owner(path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    os.chown(path, 65534, 65534)


@pytest.mark.parametrize("damage", ["mode-0644", "mode-0400", "other-owner", "short",
                                    "symlink"])
def test_unsafe_secret_is_replaced(damage: str, _cache_env: Path, tmp_path: Path,
                                   caplog: pytest.LogCaptureFixture) -> None:
    spirv = _compile(SpirvCache())
    secret_path = _cache_env / SECRET_NAME
    old = secret_path.read_bytes()
    if damage == "mode-0644":
        secret_path.chmod(0o644)
    elif damage == "mode-0400":
        secret_path.chmod(0o400)
    elif damage == "other-owner":
        _other_owner(secret_path)
    elif damage == "short":
        secret_path.write_bytes(old[:16])
    else:
        elsewhere = tmp_path / "planted"
        elsewhere.write_bytes(old)
        elsewhere.chmod(0o600)
        secret_path.unlink()
        secret_path.symlink_to(elsewhere)

    fresh = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        assert _compile(fresh) == spirv
    assert any("unsafe" in r.getMessage() and str(secret_path) in r.getMessage()
               for r in caplog.records)
    info = os.lstat(secret_path)
    assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == 0o600
    assert info.st_uid == os.geteuid() and secret_path.read_bytes() != old
    # The old secret's entry no longer verifies: recompiled and re-signed, then a hit.
    assert (fresh.stats().misses, fresh.stats().corrupt_entries) == (1, 1)
    again = SpirvCache()
    _compile(again)
    assert again.stats().hits_disk == 1


def test_unusable_secret_turns_disk_cache_off(_cache_env: Path,
                                              caplog: pytest.LogCaptureFixture) -> None:
    """No secret can be read or made (a directory sits at its path): entries already on disk
    are not trusted, nothing is written, and compiling still works."""
    spirv = _compile(SpirvCache())
    (entry,) = _entries(SpirvCache())
    secret_path = _cache_env / SECRET_NAME
    secret_path.unlink()
    secret_path.mkdir()
    entry.unlink()
    cache = SpirvCache()
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        assert _compile(cache) == spirv
        assert _compile(SpirvCache()) == spirv
    stats = cache.stats()
    assert (stats.misses, stats.hits_disk, stats.disk_write_errors) == (1, 0, 1)
    assert not entry.exists()
    assert sum("no usable cache secret" in r.getMessage() for r in caplog.records) == 1


_FIFO_SCRIPT = textwrap.dedent("""
    import sys
    from vkumd.compiler.spirv_cache import SpirvCache
    spirv = SpirvCache().get_or_compile(sys.argv[1], name="scale", defines={"SCALE": "2.0"})
    print(len(spirv))
""")


@pytest.mark.parametrize("where", ["entry-fifo", "entry-symlink-to-fifo", "secret-fifo"])
def test_fifo_in_cache_directory_does_not_hang(where: str, _cache_env: Path,
                                               tmp_path: Path) -> None:
    """Opening a FIFO for reading blocks until a writer comes: it must never be opened. Run in
    a subprocess with a timeout so a regression fails instead of hanging the suite."""
    cache = SpirvCache()
    spirv = _compile(cache)
    (entry,) = _entries(cache)
    target = _cache_env / SECRET_NAME if where == "secret-fifo" else entry
    target.unlink()
    if where == "entry-symlink-to-fifo":
        os.mkfifo(tmp_path / "fifo")
        target.symlink_to(tmp_path / "fifo")
    else:
        os.mkfifo(target)
    done = subprocess.run([sys.executable, "-c", _FIFO_SCRIPT, SOURCE], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "VKUMD_LOG": "warning"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(len(spirv))
    assert "skipped" in done.stderr or "unsafe" in done.stderr
    assert stat.S_ISREG(os.lstat(target).st_mode), "the FIFO was not replaced"
