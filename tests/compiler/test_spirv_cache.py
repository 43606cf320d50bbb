"""The SPIR-V cache: memory and disk layers, corruption handling, unwritable directories."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from vkumd.compiler import spirv_cache
from vkumd.compiler.spirv_cache import SpirvCache, decode_entry, default_cache, encode_entry
from vkumd.errors import ShaderCompileError

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
    payload = bytes(range(256)) * 3
    assert decode_entry(encode_entry(payload)) == payload
    assert decode_entry(b"") is None
    assert decode_entry(encode_entry(payload)[:-1]) is None


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
