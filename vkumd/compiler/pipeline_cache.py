"""One ``VkPipelineCache`` per device, persisted under the cache directory.

The file name carries vendor ID, device ID, driver version and ``pipelineCacheUUID``; the
file itself is ``MAGIC | sha256(payload) | payload``. Before the payload reaches the driver
its checksum and its Vulkan header (version one: size, version, vendor, device, UUID) are
checked, so a damaged or foreign file is ignored (logged) and replaced on save.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

from vkumd import settings
from vkumd.vk.binding import NULL, ffi, lib, new, vk
from vkumd.vk.caps import DeviceCaps
from vkumd.vk.errors import VulkanError, check
from vkumd.vk.handle import Handle

log = logging.getLogger("vkumd.compiler")

MAGIC = b"VKUMDPC1"
_HEADER = struct.Struct("<IIII16s")  # VkPipelineCacheHeaderVersionOne
_HEADER_VERSION_ONE = 1


def cache_file(caps: DeviceCaps, directory: Path | None = None) -> Path:
    """The pipeline-cache file for a device."""
    base = directory if directory is not None else settings.cache_dir() / "pipelines"
    name = (f"{caps.vendor_id:04x}-{caps.device_id:04x}-{caps.driver_version:08x}-"
            f"{caps.pipeline_cache_uuid.hex()}.bin")
    return base / name


def check_payload(data: bytes, caps: DeviceCaps) -> str | None:
    """Return why ``data`` (a file's contents) must not reach the driver, or ``None`` if fine."""
    if len(data) < len(MAGIC) + 32 + _HEADER.size or not data.startswith(MAGIC):
        return "not a vkumd pipeline-cache file"
    digest = data[len(MAGIC):len(MAGIC) + 32]
    payload = data[len(MAGIC) + 32:]
    if hashlib.sha256(payload).digest() != digest:
        return "checksum mismatch (damaged or truncated)"
    size, version, vendor, device, uuid = _HEADER.unpack_from(payload)
    if version != _HEADER_VERSION_ONE or size < _HEADER.size:
        return f"unknown header version {version}"
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
    """

    def __init__(self, device: Any, caps: DeviceCaps, path: Path | None = None) -> None:
        super().__init__()
        self.device = device
        self.caps = caps
        if path is None and settings.disk_cache_enabled():
            path = cache_file(caps)
        self.path = path
        self.loaded_bytes = 0
        initial = b""
        if path is not None and path.exists():
            try:
                data: bytes | None = path.read_bytes()
            except OSError as exc:
                log.warning("cannot read pipeline cache %s (%s); starting empty", path, exc)
                data = None
            if data is not None:
                problem = check_payload(data, caps) if data else "empty file"
                if problem is None:
                    initial = data[len(MAGIC) + 32:]
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
        try:
            payload = self.data()
        except VulkanError as exc:  # a cache is never worth failing a context's close
            log.warning("cannot read the pipeline cache back (%s); not saved", exc)
            return False
        blob = MAGIC + hashlib.sha256(payload).digest() + payload
        tmp: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".pc-")
            with os.fdopen(fd, "wb") as f:
                f.write(blob)
            os.replace(tmp, self.path)
            tmp = None
        except OSError as exc:
            log.warning("cannot save pipeline cache to %s (%s); continuing without", self.path,
                        exc)
            return False
        finally:
            if tmp is not None:  # the write or the rename failed: do not leave it behind
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
        return True

    def _release(self) -> None:
        lib.vkDestroyPipelineCache(self.device, self.handle, NULL)
