"""SPIR-V cache: an in-memory dict in front of a checksummed, atomically written disk cache.

The key covers everything that changes the output: the source after include expansion (so
editing a header invalidates its users), the sorted defines, the target environment, the
glslang version and :data:`SCHEMA_VERSION`. Entries live in ``settings.cache_dir()/spirv``;
``VKUMD_CACHE=0`` keeps only the in-memory layer.

Each entry file is ``header + payload``; the header holds a magic, the schema version, the
payload length and an HMAC-SHA256 of the key and the payload under the cache directory's
secret (:mod:`vkumd.compiler.cache_files`), so an entry copied over another's name, or
written by someone who cannot read the secret, does not verify. A payload that verifies is
still walked as SPIR-V (:func:`check_spirv`) before it reaches the driver. Any entry that
fails, and anything at an entry's path that is not a regular file, is logged and counted as a
miss; the fresh compile replaces it through a temporary file and ``os.replace``, so
concurrent processes never see half an entry. See ``docs/cache.md``.
"""

from __future__ import annotations

import array
import hashlib
import logging
import struct
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from vkumd import settings
from vkumd.compiler import glslang
from vkumd.compiler.cache_files import (
    NotRegularFile,
    digests_match,
    keyed_digest,
    load_secret,
    read_regular,
    warn_once,
    write_atomic,
)
from vkumd.compiler.shader_source import expand_source

log = logging.getLogger("vkumd.compiler")

# 2: the checksum became an HMAC over key and payload (version 1 entries are misses).
SCHEMA_VERSION = 2
MAGIC = b"VKUMDSPV"
# magic, schema version, reserved, payload length, HMAC-SHA256(secret; key, payload)
_HEADER = struct.Struct("<8sIIQ32s")
_DOMAIN = b"vkumd spirv entry"
# No kernel comes near this; a larger file is not ours and is not read into memory.
MAX_ENTRY_BYTES = 64 * 1024 * 1024

SPIRV_MAGIC = 0x07230203
# SPIR-V's universal limit on result ids (spec, "Universal Limits"), so on the bound too.
_MAX_BOUND = 0x3FFFFF + 1
_OP_ENTRY_POINT = 15
_OP_MEMORY_MODEL = 14


@dataclass
class CacheStats:
    """Counters of a :class:`SpirvCache`.

    Attributes:
        hits_memory: lookups answered by the in-memory dict.
        hits_disk: lookups answered by a valid disk entry.
        misses: lookups that compiled.
        compile_seconds: wall time spent compiling on misses.
        corrupt_entries: disk entries rejected (bad magic, length, keyed checksum or SPIR-V
            structure, or not a regular file).
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


def encode_entry(payload: bytes, key: str, secret: bytes) -> bytes:
    """Return the on-disk form of a SPIR-V payload: header followed by the payload.

    Args:
        payload: the SPIR-V bytes.
        key: the entry's :func:`cache_key`; the checksum covers it, so the entry verifies
            only under its own name.
        secret: the cache directory's secret.

    Returns:
        The file's bytes.
    """
    digest = _entry_digest(payload, key, secret)
    return _HEADER.pack(MAGIC, SCHEMA_VERSION, 0, len(payload), digest) + payload


def _entry_digest(payload: bytes, key: str, secret: bytes) -> bytes:
    return keyed_digest(secret, _DOMAIN, key.encode("ascii"), payload)


def entry_problem(data: bytes, key: str, secret: bytes) -> str | None:
    """Return why an entry file must not be used, or ``None`` if it is sound.

    Args:
        data: the whole file.
        key: the key it is filed under.
        secret: the cache directory's secret.

    Returns:
        A short reason (for the log), or ``None``.
    """
    if len(data) < _HEADER.size:
        return f"{len(data)} bytes, shorter than the header"
    magic, schema, _reserved, length, digest = _HEADER.unpack_from(data)
    payload = data[_HEADER.size:]
    if magic != MAGIC:
        return "bad magic"
    if schema != SCHEMA_VERSION:
        return f"schema {schema}, not {SCHEMA_VERSION}"
    if length != len(payload):
        return f"truncated: header says {length} payload bytes, file has {len(payload)}"
    if not digests_match(_entry_digest(payload, key, secret), digest):
        return ("checksum does not match (damaged, filed under another key, or written "
                "without this directory's secret)")
    return check_spirv(payload)


def decode_entry(data: bytes, key: str, secret: bytes) -> bytes | None:
    """Return the payload of an entry file, or ``None`` if :func:`entry_problem` finds one."""
    return None if entry_problem(data, key, secret) is not None else data[_HEADER.size:]


def check_spirv(spirv: bytes) -> str | None:
    """Return why ``spirv`` is not a well-formed SPIR-V compute module, or ``None``.

    A cheap structural check before bytes from disk reach the driver (which may crash or
    hang on garbage): header fields, then every instruction's word count is nonzero and
    stays inside the buffer, and an OpEntryPoint and an OpMemoryModel are present. It is not
    ``spirv-val``; it only guarantees the driver's parser walks a sound instruction stream.

    Args:
        spirv: the module's bytes (little-endian, as glslang writes it).

    Returns:
        A short reason, or ``None``.
    """
    if len(spirv) % 4:
        return f"SPIR-V length {len(spirv)} is not a multiple of 4"
    if len(spirv) < 20:
        return "SPIR-V shorter than its 5-word header"
    words = array.array("I", spirv)
    if sys.byteorder != "little":
        words.byteswap()
    if words[0] != SPIRV_MAGIC:
        return f"bad SPIR-V magic 0x{words[0]:08x}"
    version = words[1]
    if version & 0xFF0000FF or (version >> 16) != 1 or ((version >> 8) & 0xFF) > 6:
        return f"unknown SPIR-V version 0x{version:08x}"
    if not 0 < words[3] <= _MAX_BOUND:
        return f"SPIR-V id bound {words[3]} out of range"
    if words[4] != 0:
        return "SPIR-V schema word is not 0"
    seen: set[int] = set()
    at, count = 5, len(words)
    while at < count:
        word_count, opcode = words[at] >> 16, words[at] & 0xFFFF
        if word_count == 0 or at + word_count > count:
            return f"SPIR-V instruction at word {at} has word count {word_count} of {count}"
        seen.add(opcode)
        at += word_count
    if _OP_ENTRY_POINT not in seen:
        return "SPIR-V has no OpEntryPoint"
    if _OP_MEMORY_MODEL not in seen:
        return "SPIR-V has no OpMemoryModel"
    return None


class SpirvCache:
    """Compiles GLSL compute shaders once per distinct input, in memory and on disk.

    Args:
        directory: where entries (and then their secret) live; ``None`` reads
            ``settings.cache_dir()/"spirv"`` at each call, so ``VKUMD_CACHE_DIR`` set later
            still applies, and keeps the secret in ``settings.cache_dir()``.
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
        self._secrets: dict[Path, bytes | None] = {}

    @property
    def directory(self) -> Path:
        """The directory entries are read from and written to."""
        if self._directory is not None:
            return self._directory
        return settings.cache_dir() / "spirv"

    @property
    def secret_directory(self) -> Path:
        """Where the secret that signs entries lives: the cache root (shared with the
        pipeline cache), or ``directory`` itself when one was given."""
        if self._directory is not None:
            return self._directory
        return settings.cache_dir()

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
        secret = self._secret() if use_disk else None
        if secret is not None:
            payload = self._read(key, secret)
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
        if secret is not None:
            self._write(key, spirv, secret)
        elif use_disk:
            with self._lock:  # without a secret nothing can be written (load_secret warned)
                self._stats.disk_write_errors += 1
        return spirv

    def _secret(self) -> bytes | None:
        # Read once per directory: a secret replaced later by another process costs misses,
        # not errors, and the syscalls stay off the hit path.
        directory = self.secret_directory
        with self._lock:
            if directory in self._secrets:
                return self._secrets[directory]
        secret = load_secret(directory)
        with self._lock:
            return self._secrets.setdefault(directory, secret)

    def _read(self, key: str, secret: bytes) -> bytes | None:
        path = self.entry_path(key)
        try:
            data = read_regular(path, MAX_ENTRY_BYTES)
        except NotRegularFile as exc:
            self._reject(f"SPIR-V cache: {exc}; recompiling and replacing it")
            return None
        except OSError as exc:
            log.debug("SPIR-V cache: cannot read %s: %s", path, exc)
            return None
        if data is None:
            return None
        problem = entry_problem(data, key, secret)
        if problem is not None:
            self._reject(f"SPIR-V cache: entry {path} is corrupt ({problem}; {len(data)} "
                         "bytes); recompiling and overwriting it")
            return None
        return data[_HEADER.size:]

    def _reject(self, message: str) -> None:
        log.warning("%s", message)
        with self._lock:
            self._stats.corrupt_entries += 1

    def _write(self, key: str, spirv: bytes, secret: bytes) -> None:
        try:
            write_atomic(self.entry_path(key), encode_entry(spirv, key, secret))
        except OSError as exc:
            with self._lock:
                self._stats.disk_write_errors += 1
            warn_once(("unwritable", self.directory), "SPIR-V cache directory %s is not "
                      "writable (%s); continuing without the disk cache. Set VKUMD_CACHE_DIR "
                      "to a writable directory or VKUMD_CACHE=0.", self.directory, exc)


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
