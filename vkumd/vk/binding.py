"""Access to the ``vulkan`` cffi binding, and the few constants it lacks.

Hot paths call ``lib.vkCmd*`` directly with pre-built cdata: the binding's convenience
wrappers convert every argument on every call (see DESIGN.md for the measured cost).
"""

from __future__ import annotations

from typing import Any

try:
    import vulkan as vk
except OSError as exc:  # the binding dlopens libvulkan.so.1 at import time
    from vkumd.errors import DeviceUnavailable

    raise DeviceUnavailable(
        f"cannot load the Vulkan loader (libvulkan.so.1): {exc}. Install it "
        "(Debian: apt-get install libvulkan1 mesa-vulkan-drivers) or run `make demo`, "
        "which runs ci/setup.sh"
    ) from exc

ffi = vk.ffi
lib = vk.lib
NULL = ffi.NULL


def make_version(major: int, minor: int, patch: int = 0) -> int:
    """Pack a Vulkan API version (variant 0) as ``VK_MAKE_API_VERSION`` does."""
    return (major << 22) | (minor << 12) | patch


def version_tuple(version: int) -> tuple[int, int, int]:
    """Unpack a Vulkan API version into ``(major, minor, patch)``."""
    return ((version >> 22) & 0x7F, (version >> 12) & 0x3FF, version & 0xFFF)


API_VERSION_1_3 = make_version(1, 3)


def new(ctype: str, s_type: int | None = None, **fields: Any) -> Any:
    """Allocate a zeroed ``ctype`` struct, set ``sType`` and the given fields; return a pointer.

    Unlike the binding's constructors, this keeps fields that are 0 or None and never hides a
    pointer conversion: pointer fields must be given cdata that the caller keeps alive.
    """
    ptr = ffi.new(ctype + "*")
    if s_type is not None:
        ptr.sType = s_type
    for key, value in fields.items():
        setattr(ptr, key, value)
    return ptr


class Chain:
    """An output ``pNext`` chain whose structs stay alive as long as the chain object.

    ``Chain("VkPhysicalDeviceFeatures2", S_TYPE)`` makes the head; :meth:`add` appends a
    struct and returns its pointer, linked from the previous struct's ``pNext``.
    """

    def __init__(self, head_type: str, s_type: int) -> None:
        self.head = new(head_type, s_type)
        self._tail = self.head
        self._keep: list[Any] = [self.head]

    def add(self, ctype: str, s_type: int) -> Any:
        """Append a zeroed struct of ``ctype`` to the chain and return its pointer."""
        ptr = new(ctype, s_type)
        self._tail.pNext = ptr
        self._tail = ptr
        self._keep.append(ptr)
        return ptr


def c_strings(names: list[str]) -> tuple[Any, list[Any]]:
    """Return a ``const char*[]`` for ``names`` and the list that keeps its strings alive."""
    keep = [ffi.new("char[]", name.encode()) for name in names]
    array = ffi.new("const char*[]", keep) if keep else NULL
    return array, keep


def raw_proc(instance: Any, name: str, signature: str) -> Any:
    """Return an instance-level extension function as a raw cffi function pointer."""
    address = lib.vkGetInstanceProcAddr(instance, name.encode())
    if address == NULL:
        return None
    return ffi.cast(signature, address)


def raw_device_proc(device: Any, name: str, signature: str) -> Any:
    """Return a device-level extension function as a raw cffi function pointer."""
    address = lib.vkGetDeviceProcAddr(device, name.encode())
    if address == NULL:
        return None
    return ffi.cast(signature, address)

# Core 1.2 names the binding lacks (its KHR aliases are None): values from the registry.
BUFFER_USAGE_SHADER_DEVICE_ADDRESS_BIT = 0x00020000
MEMORY_ALLOCATE_DEVICE_ADDRESS_BIT = 0x00000002
