"""Access to the ``vulkan`` cffi binding, and the few constants it lacks.

Hot paths call ``lib.vkCmd*`` directly with pre-built cdata: the binding's convenience
wrappers convert every argument on every call (see DESIGN.md for the measured cost).
"""

from __future__ import annotations

import types
from collections.abc import Callable
from typing import Any

try:
    import vulkan as vk
    from vulkan import _vulkan as _wrappers
except OSError as exc:  # the binding dlopens libvulkan.so.1 at import time
    from vkumd.errors import DeviceUnavailable

    raise DeviceUnavailable(
        f"cannot load the Vulkan loader (libvulkan.so.1): {exc}. Install it "
        "(Debian: apt-get install libvulkan1 mesa-vulkan-drivers) or run `make demo`, "
        "which runs ci/setup.sh"
    ) from exc

ffi = vk.ffi
NULL = ffi.NULL


def _resolve(real: Any) -> types.ModuleType:
    """The binding's C functions and constants, resolved once, as attributes of a module.

    Every call vkumd makes into Vulkan reads ``lib.vkSomething`` at call time, so this object
    is the one place where a function can be put behind a gate (:func:`intercept`), which is
    how :mod:`vkumd.testing.faults` makes a chosen call fail without touching any call site.
    A module, because the interpreter specializes attribute reads on one into a dict-index
    hit: measured 30 ns here against 38-59 ns on the cffi ``Lib`` (and 60 ns on a module or
    class that resolves lazily through ``__getattr__``), so the hot ``vkCmd*`` paths get no
    slower. Resolving every symbol up front takes about 13 ms; the few the loader does not
    export (extension functions, reached through :func:`raw_device_proc`) stay missing.
    """
    module = types.ModuleType(f"{__name__}.lib", _resolve.__doc__)
    for name in dir(real):
        try:
            setattr(module, name, getattr(real, name))
        except (AttributeError, ffi.error):
            pass
    return module


lib = _resolve(vk.lib)

Gate = Callable[..., "int | None"]
"""Called with a Vulkan call's arguments: ``None`` lets the call through, a ``VkResult``
is returned instead of calling the driver."""

_gates: dict[str, tuple[Any, Gate]] = {}  # name -> (the binding's function, gate)
_binding_call_api = _wrappers._callApi


def _gated_call_api(fn: Any, *args: Any) -> Any:
    # The binding's convenience wrappers (vk.vkCreateBuffer(...)) all call through
    # _callApi(lib.vkX, ...); a gated function is found by identity among the few gated.
    for real, gate in _gates.values():
        if fn == real:
            result = gate(*args)
            if result is not None:
                return result
            break
    return _binding_call_api(fn, *args)


def real_function(name: str) -> Any:
    """The binding's own function ``name``, whatever gate :func:`intercept` put before it.

    Raises:
        AttributeError: the binding has no function ``name``.
    """
    return getattr(vk.lib, name)


def intercept(name: str, gate: Gate) -> None:
    """Put ``gate`` in front of the Vulkan function ``name`` until :func:`release_intercept`.

    It covers every call vkumd makes, both through ``lib.<name>`` and through the binding's
    convenience wrapper ``vk.<name>(...)``, without editing a call site; functions nobody
    intercepts cost nothing extra. This is the hook of :mod:`vkumd.testing.faults`.

    Args:
        name: a Vulkan entry point, e.g. ``"vkAllocateMemory"``.
        gate: see :data:`Gate`; it replaces any gate ``name`` had.

    Raises:
        AttributeError: the binding has no function ``name`` (a typo fails here rather than
            as a gate that never fires).
    """
    real = real_function(name)

    def gated(*args: Any) -> Any:
        result = gate(*args)
        return real(*args) if result is None else result

    _gates[name] = (real, gate)
    lib.__dict__[name] = gated
    _wrappers._callApi = _gated_call_api


def release_intercept(name: str) -> None:
    """Remove the gate of ``name`` (nothing happens if it has none)."""
    if _gates.pop(name, None) is None:
        return
    lib.__dict__[name] = real_function(name)
    if not _gates:
        _wrappers._callApi = _binding_call_api


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
