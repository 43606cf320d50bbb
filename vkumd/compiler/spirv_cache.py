"""SPIR-V cache: an in-memory dict in front of a checksummed, atomically written disk cache.

The key covers everything that changes the output: the source after include expansion (so
editing a header invalidates its users), the sorted defines, the target environment, the
glslang version and :data:`SCHEMA_VERSION`. Entries live in ``settings.cache_dir()/spirv``;
``VKUMD_CACHE=0`` keeps only the in-memory layer.

Each entry file is ``header + payload``; the header holds a magic, the schema version, the
payload length and the payload's sha256. A corrupt or truncated entry is logged and counted
as a miss, and the fresh compile overwrites it. Writes go to a temporary file in the same
directory followed by ``os.replace``, so concurrent processes never see half an entry.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vkumd import settings
from vkumd.compiler import glslang
from vkumd.compiler.shader_source import expand_source

log = logging.getLogger("vkumd.compiler")

SCHEMA_VERSION = 1
MAGIC = b"VKUMDSPV"
# magic, schema version, reserved, payload length, payload sha256
_HEADER = struct.Struct("<8sIIQ32s")

# Directories already warned about: an unwritable cache is reported once per process, not
# once per kernel.
_WARNED_DIRS: set[Path] = set()
_WARN_LOCK = threading.Lock()


@dataclass
class CacheStats:
    """Counters of a :class:`SpirvCache`.

    Attributes:
        hits_memory: lookups answered by the in-memory dict.
        hits_disk: lookups answered by a valid disk entry.
        misses: lookups that compiled.
        compile_seconds: wall time spent compiling on misses.
        corrupt_entries: disk entries rejected (bad magic, length or checksum).
        disk_write_errors: entries that could not be written.
    """

    hits_memory: int = 0
    hits_disk: int = 0
    misses: int = 0
    compile_seconds: float = 0.0
    corrupt_entries: int = 0
    disk_write_errors: int = 0


def cache_key(expanded_text: str, defines: Sequence[tuple[str, str]], target_env: str,
              compiler_version: str) -> str:
    """Return the hex sha256 that names a cache entry.

    Args:
        expanded_text: source after include expansion.
        defines: sorted ``(name, value)`` pairs.
        target_env: e.g. ``"vulkan1.3"``.
        compiler_version: :func:`glslang.glslang_version`.

    Returns:
        64 hex characters.
    """
    h = hashlib.sha256()
    # Length-prefixed fields, so no two different inputs can concatenate to the same bytes.
    fields = [f"schema={SCHEMA_VERSION}", f"glslang={compiler_version}",
              f"target={target_env}", *(f"define:{k}={v}" for k, v in defines), expanded_text]
    for item in fields:
        data = item.encode("utf-8")
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def encode_entry(payload: bytes) -> bytes:
    """Return the on-disk form of a SPIR-V payload: header followed by the payload."""
    digest = hashlib.sha256(payload).digest()
    return _HEADER.pack(MAGIC, SCHEMA_VERSION, 0, len(payload), digest) + payload


def decode_entry(data: bytes) -> bytes | None:
    """Return the payload of an entry file, or ``None`` if it is corrupt or of another schema.

    Args:
        data: the whole file.

    Returns:
        The SPIR-V bytes when magic, schema, length and checksum all agree.
    """
    if len(data) < _HEADER.size:
        return None
    magic, schema, _reserved, length, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != MAGIC or schema != SCHEMA_VERSION or length != len(payload):
        return None
    if hashlib.sha256(payload).digest() != digest:
        return None
    return payload


class SpirvCache:
    """Compiles GLSL compute shaders once per distinct input, in memory and on disk.

    Args:
        directory: where entries live; ``None`` reads ``settings.cache_dir()/"spirv"`` at
            each call, so ``VKUMD_CACHE_DIR`` set later still applies.
        disk: ``False`` disables the disk layer; ``None`` follows ``VKUMD_CACHE``.
        backend: glslang backend passed to :func:`glslang.compile_expanded`.
    """

    def __init__(self, directory: Path | None = None, *, disk: bool | None = None,
                 backend: str = "auto") -> None:
        self._directory = directory
        self._disk = disk
        self.backend = backend
        self._memory: dict[str, bytes] = {}
        self._lock = threading.Lock()
        self._stats = CacheStats()

    @property
    def directory(self) -> Path:
        """The directory entries are read from and written to."""
        if self._directory is not None:
            return self._directory
        return settings.cache_dir() / "spirv"

    @property
    def disk_enabled(self) -> bool:
        """Whether the disk layer is used (explicit argument, else ``VKUMD_CACHE``)."""
        return settings.disk_cache_enabled() if self._disk is None else self._disk

    def stats(self) -> CacheStats:
        """Return a snapshot of the counters (safe to keep; later lookups do not change it)."""
        with self._lock:
            return replace(self._stats)

    def clear_memory(self) -> None:
        """Forget the in-memory entries; disk entries stay."""
        with self._lock:
            self._memory.clear()

    def entry_path(self, key: str) -> Path:
        """Return the file that holds (or would hold) the entry for ``key``."""
        return self.directory / f"{key}.spv"

    def get_or_compile(
        self,
        source: str,
        *,
        name: str,
        defines: Mapping[str, str | int] | None = None,
        include_dirs: Sequence[Path] | None = None,
        target_env: str = "vulkan1.3",
    ) -> bytes:
        """Return the SPIR-V of a compute shader, compiling only on a miss.

        Args:
            source: GLSL text.
            name: kernel name (error messages, dump files).
            defines: macros defined before the kernel's first line.
            include_dirs: include search path; default ``shaders/include``.
            target_env: ``"vulkan1.0"`` … ``"vulkan1.3"``.

        Returns:
            SPIR-V bytes.

        Raises:
            ShaderCompileError: the source does not compile or an include is missing.
            VkumdValueError: a malformed define or unknown ``target_env``.
        """
        expanded = expand_source(source, name=name, defines=defines, include_dirs=include_dirs)
        version = glslang.glslang_version(self.backend)
        key = cache_key(expanded.text, expanded.defines, target_env, version)

        with self._lock:
            cached = self._memory.get(key)
            if cached is not None:
                self._stats.hits_memory += 1
                return cached

        use_disk = self.disk_enabled
        if use_disk:
            payload = self._read(key)
            if payload is not None:
                with self._lock:
                    self._stats.hits_disk += 1
                    self._memory[key] = payload
                return payload

        start = time.perf_counter()
        spirv = glslang.compile_expanded(expanded, name=name, target_env=target_env,
                                         backend=self.backend)
        elapsed = time.perf_counter() - start
        with self._lock:
            self._stats.misses += 1
            self._stats.compile_seconds += elapsed
            self._memory[key] = spirv
        if use_disk:
            self._write(key, spirv)
        return spirv

    def _read(self, key: str) -> bytes | None:
        path = self.entry_path(key)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.debug("SPIR-V cache: cannot read %s: %s", path, exc)
            return None
        payload = decode_entry(data)
        if payload is None:
            log.warning("SPIR-V cache: entry %s is corrupt or truncated (%d bytes); "
                        "recompiling and overwriting it", path, len(data))
            with self._lock:
                self._stats.corrupt_entries += 1
        return payload

    def _write(self, key: str, spirv: bytes) -> None:
        directory = self.directory
        tmp_name: str | None = None
        try:
            directory.mkdir(parents=True, exist_ok=True)
            fd, tmp_name = tempfile.mkstemp(prefix=f".{key[:16]}-", suffix=".tmp",
                                            dir=directory)
            with os.fdopen(fd, "wb") as handle:
                handle.write(encode_entry(spirv))
            os.replace(tmp_name, self.entry_path(key))
            tmp_name = None
        except OSError as exc:
            with self._lock:
                self._stats.disk_write_errors += 1
            _warn_unwritable(directory, exc)
        finally:
            if tmp_name is not None:
                try:
                    os.unlink(tmp_name)
                except OSError:
                    pass


def _warn_unwritable(directory: Path, exc: OSError) -> None:
    with _WARN_LOCK:
        if directory in _WARNED_DIRS:
            return
        _WARNED_DIRS.add(directory)
    log.warning("SPIR-V cache directory %s is not writable (%s); continuing without the "
                "disk cache. Set VKUMD_CACHE_DIR to a writable directory or VKUMD_CACHE=0.",
                directory, exc)


_DEFAULT: SpirvCache | None = None
_DEFAULT_LOCK = threading.Lock()


def default_cache() -> SpirvCache:
    """Return the process-wide :class:`SpirvCache` (created on first use).

    Returns:
        The shared instance; its directory and disk switch follow the environment.
    """
    global _DEFAULT
    with _DEFAULT_LOCK:
        if _DEFAULT is None:
            _DEFAULT = SpirvCache()
        return _DEFAULT
