"""One ``VkPipelineCache`` per device, persisted under the cache directory.

The file name carries vendor ID, device ID, driver version and ``pipelineCacheUUID``; the
file itself is ``MAGIC | HMAC-SHA256(secret; name, payload) | payload``, signed with the cache
directory's secret (:mod:`vkumd.compiler.cache_files`). Before the payload reaches the driver
its keyed checksum and its Vulkan header (version one: size, version, vendor, device, UUID)
are checked, so a damaged, foreign, renamed or forged file (or a FIFO, or anything but a
regular file) is ignored (logged) and replaced on save.
"""

from __future__ import annotations

import logging
import struct
from pathlib import Path
from typing import Any

from vkumd import settings
from vkumd.compiler.cache_files import (
    digests_match,
    keyed_digest,
    load_secret,
    read_regular,
    write_atomic,
)
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.caps import DeviceCaps
from vkumd.vk.errors import VulkanError, check
from vkumd.vk.handle import Handle

log = logging.getLogger("vkumd.compiler")

# PC2: the checksum became keyed (PC1 files are "not a vkumd pipeline-cache file").
MAGIC = b"VKUMDPC2"
_DIGEST_BYTES = 32
_DOMAIN = b"vkumd pipeline cache"
# Drivers' caches for all our kernels are a few MiB; a larger file is not ours.
MAX_FILE_BYTES = 512 * 1024 * 1024
_HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne
_HEADER_VERSION_ONE = 1


def cache_file(caps: DeviceCaps, directory: Path | None = None) -> Path:
    """The pipeline-cache file for a device."""
    base = directory if directory is not None else settings.cache_dir() / "pipelines"
    name = (f"{caps.vendor_id:04x}-{caps.device_id:04x}-{caps.driver_version:08x}-"
            f"{caps.pipeline_cache_uuid.hex()}.bin")
    return base / name


def _identity(caps: DeviceCaps) -> bytes:
    # What the file name encodes: a file renamed from another device's name fails the MAC.
    return cache_file(caps, Path(".")).name.encode("ascii")


def encode_file(payload: bytes, caps: DeviceCaps, secret: bytes) -> bytes:
    """Return the file form of a driver's serialised cache.

    Args:
        payload: what ``vkGetPipelineCacheData`` returned.
        caps: the device it came from.
        secret: the cache directory's secret.

    Returns:
        ``MAGIC | keyed checksum | payload``.
    """
    return MAGIC + keyed_digest(secret, _DOMAIN, _identity(caps), payload) + payload


def check_payload(data: bytes, caps: DeviceCaps, secret: bytes) -> str | None:
    """Return why ``data`` (a file's contents) must not reach the driver, or ``None`` if fine.

    Args:
        data: the whole file.
        caps: the device that would load it.
        secret: the cache directory's secret.

    Returns:
        A short reason (for the log), or ``None``.
    """
    if len(data) < len(MAGIC) + _DIGEST_BYTES + _HEADER.size or not data.startswith(MAGIC):
        return "not a vkumd pipeline-cache file"
    digest = data[len(MAGIC):len(MAGIC) + _DIGEST_BYTES]
    payload = data[len(MAGIC) + _DIGEST_BYTES:]
    if not digests_match(keyed_digest(secret, _DOMAIN, _identity(caps), payload), digest):
        return ("checksum mismatch (damaged, truncated, renamed from another device's file, "
                "or written without this directory's secret)")
    size, version, vendor, device, uuid = _HEADER.unpack_from(payload)
    if version != _HEADER_VERSION_ONE:
        return f"unknown header version {version}"
    if not _HEADER.size <= size <= len(payload):
        return f"header size {size} out of range"
    if (vendor, device, uuid) != (caps.vendor_id, caps.device_id, caps.pipeline_cache_uuid):
        return "made by another device or driver"
    return None


class PipelineCache(Handle):
    """A ``VkPipelineCache`` seeded from disk; :meth:`save` writes it back atomically.

    Args:
        device: the ``VkDevice``.
        caps: its capabilities (for the file name and header check).
        path: the file; ``None`` means :func:`cache_file`, or no file when
            ``VKUMD_CACHE=0``.
        secret_dir: where the secret that signs the file lives; ``None`` means
            ``settings.cache_dir()`` for the default file, else the explicit file's directory.
    """

    def __init__(self, device: Any, caps: DeviceCaps, path: Path | None = None, *,
                 secret_dir: Path | None = None) -> None:
        super().__init__()
        self.device = device
        self.caps = caps
        if path is None and settings.disk_cache_enabled():
            path = cache_file(caps)
            secret_dir = secret_dir or settings.cache_dir()
        self.path = path
        self.secret_dir = secret_dir or (path.parent if path is not None else None)
        self._secret: bytes | None = None
        self.loaded_bytes = 0
        initial = b""
        if path is not None:
            try:
                data = read_regular(path, MAX_FILE_BYTES)
            except OSError as exc:
                log.warning("cannot read pipeline cache %s (%s); starting empty", path, exc)
                data = None
            secret = self._load_secret() if data else None
            if data is not None:
                if not data:
                    problem: str | None = "empty file"
                elif secret is None:
                    problem = "no usable cache secret to check it with"
                else:
                    problem = check_payload(data, caps, secret)
                if problem is None:
                    initial = data[len(MAGIC) + _DIGEST_BYTES:]
                    self.loaded_bytes = len(initial)
                else:
                    log.warning("ignoring pipeline cache %s: %s; it will be replaced", path,
                                problem)
        self._initial = ffi.from_buffer(initial) if initial else NULL
        info = new("VkPipelineCacheCreateInfo", vk.VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO,
                   initialDataSize=len(initial), pInitialData=self._initial)
        out = ffi.new("VkPipelineCache*")
        check("vkCreatePipelineCache", lib.vkCreatePipelineCache(device, info, NULL, out))
        self.handle = out[0]

    def data(self) -> bytes:
        """The driver's current serialised cache."""
        size = ffi.new("size_t*")
        check("vkGetPipelineCacheData", lib.vkGetPipelineCacheData(self.device, self.handle,
                                                                   size, NULL))
        buffer = ffi.new("char[]", size[0])
        check("vkGetPipelineCacheData", lib.vkGetPipelineCacheData(self.device, self.handle,
                                                                   size, buffer))
        return bytes(ffi.buffer(buffer, size[0]))

    def save(self) -> bool:
        """Write the cache to its file; return whether it was written (warns on failure)."""
        if self.path is None or self.handle is None:
            return False
        secret = self._load_secret()
        if secret is None:
            log.warning("cannot save pipeline cache to %s (no usable cache secret in %s); "
                        "continuing without", self.path, self.secret_dir)
            return False
        try:
            payload = self.data()
        except VulkanError as exc:  # a cache is never worth failing a context's close
            log.warning("cannot read the pipeline cache back (%s); not saved", exc)
            return False
        try:
            write_atomic(self.path, encode_file(payload, self.caps, secret))
        except OSError as exc:
            log.warning("cannot save pipeline cache to %s (%s); continuing without", self.path,
                        exc)
            return False
        return True

    def _load_secret(self) -> bytes | None:
        if self._secret is None and self.secret_dir is not None:
            self._secret = load_secret(self.secret_dir)
        return self._secret

    def _release(self) -> None:
        lib.vkDestroyPipelineCache(self.device, self.handle, NULL)
