"""Errors a Vulkan call returns, and the one place where a ``VkResult`` becomes an exception.

Each error carries the call's name and the raw ``VkResult`` so a bug report says exactly what
the driver refused. vkumd's own errors (bad arguments, closed contexts, missing capabilities)
are in :mod:`vkumd.errors`; :class:`VulkanError` derives from its root, ``VkumdError``.
"""

from __future__ import annotations

import vulkan as _vk

from vkumd.errors import VkumdError, VkumdValueError


class VulkanError(VkumdError):
    """A Vulkan call returned a failing ``VkResult``.

    Attributes:
        call: name of the Vulkan entry point, e.g. ``"vkAllocateMemory"``.
        result: the raw ``VkResult`` integer.
        detail: what was being done, as given by the caller (may be empty).
    """

    result_name = "VK_ERROR_UNKNOWN"

    def __init__(self, call: str, result: int, detail: str = "") -> None:
        self.call = call
        self.result = result
        self.detail = detail
        text = f"{call} failed with {result_name(result)} ({result})"
        if detail:
            text += f": {detail}"
        super().__init__(text)


class OutOfHostMemory(VulkanError, MemoryError):
    """The driver ran out of host memory (``VK_ERROR_OUT_OF_HOST_MEMORY``).

    When raised by the allocator, ``requested``, ``in_use`` and ``limit`` are set as on
    :class:`OutOfDeviceMemory`.
    """

    requested: int | None = None
    in_use: int | None = None
    limit: int | None = None


class OutOfDeviceMemory(VulkanError, MemoryError):
    """Device memory is exhausted (``VK_ERROR_OUT_OF_DEVICE_MEMORY``) or a pool limit was hit.

    When raised by the allocator, ``requested``, ``in_use`` and ``limit`` hold the sizes in
    bytes (``limit`` is ``None`` when no limit is set).
    """

    requested: int | None = None
    in_use: int | None = None
    limit: int | None = None


class InitializationFailed(VulkanError):
    """``VK_ERROR_INITIALIZATION_FAILED``: the driver or loader could not start."""


class DeviceLost(VulkanError):
    """``VK_ERROR_DEVICE_LOST``: the device stopped; the context must be closed."""


class MemoryMapFailed(VulkanError):
    """``VK_ERROR_MEMORY_MAP_FAILED``."""


class LayerNotPresent(VulkanError):
    """``VK_ERROR_LAYER_NOT_PRESENT``: a requested instance layer is not installed."""


class ExtensionNotPresent(VulkanError):
    """``VK_ERROR_EXTENSION_NOT_PRESENT``: a requested extension is not supported."""


class FeatureNotPresent(VulkanError):
    """``VK_ERROR_FEATURE_NOT_PRESENT``: a requested device feature is not supported."""


class IncompatibleDriver(VulkanError):
    """``VK_ERROR_INCOMPATIBLE_DRIVER``: no driver supports the requested API version."""


class TooManyObjects(VulkanError):
    """``VK_ERROR_TOO_MANY_OBJECTS``."""


class FragmentedPool(VulkanError):
    """``VK_ERROR_FRAGMENTED_POOL``: a descriptor pool is too fragmented for the request."""


class OutOfPoolMemory(VulkanError):
    """``VK_ERROR_OUT_OF_POOL_MEMORY``: a descriptor pool is exhausted."""


class InvalidPipelineCacheData(VulkanError):
    """``VK_ERROR_INVALID_PIPELINE_CACHE_DATA``."""


def _code(name: str) -> int:
    """A ``VK_ERROR_*`` value; the binding spells extension-range errors without their sign."""
    value = getattr(_vk, name)
    return -value if name.startswith("VK_ERROR_") and value > 0 else value


ERROR_OUT_OF_POOL_MEMORY = _code("VK_ERROR_OUT_OF_POOL_MEMORY")
ERROR_FRAGMENTED_POOL = _code("VK_ERROR_FRAGMENTED_POOL")

_BY_RESULT: dict[int, type[VulkanError]] = {
    _vk.VK_ERROR_OUT_OF_HOST_MEMORY: OutOfHostMemory,
    _vk.VK_ERROR_OUT_OF_DEVICE_MEMORY: OutOfDeviceMemory,
    _vk.VK_ERROR_INITIALIZATION_FAILED: InitializationFailed,
    _vk.VK_ERROR_DEVICE_LOST: DeviceLost,
    _vk.VK_ERROR_MEMORY_MAP_FAILED: MemoryMapFailed,
    _vk.VK_ERROR_LAYER_NOT_PRESENT: LayerNotPresent,
    _vk.VK_ERROR_EXTENSION_NOT_PRESENT: ExtensionNotPresent,
    _vk.VK_ERROR_FEATURE_NOT_PRESENT: FeatureNotPresent,
    _vk.VK_ERROR_INCOMPATIBLE_DRIVER: IncompatibleDriver,
    _vk.VK_ERROR_TOO_MANY_OBJECTS: TooManyObjects,
    _vk.VK_ERROR_FRAGMENTED_POOL: FragmentedPool,
    ERROR_OUT_OF_POOL_MEMORY: OutOfPoolMemory,
    _code("VK_ERROR_INVALID_PIPELINE_CACHE_DATA"): InvalidPipelineCacheData,
}

_NAMES: dict[int, str] = {}
for _name in dir(_vk):
    if _name.startswith("VK_ERROR_") or _name in ("VK_SUCCESS", "VK_TIMEOUT", "VK_NOT_READY",
                                                  "VK_INCOMPLETE", "VK_EVENT_SET",
                                                  "VK_EVENT_RESET"):
        _value = _code(_name) if isinstance(getattr(_vk, _name), int) else None
        if isinstance(_value, int) and not _name.endswith(("_KHR", "_EXT", "_NV")):
            _NAMES.setdefault(_value, _name)


def result_code(name: str) -> int:
    """The ``VkResult`` value of ``name``: ``"VK_ERROR_DEVICE_LOST"``, ``"device_lost"`` or an
    integer such as ``"-4"``.

    Raises:
        VkumdValueError: no ``VkResult`` has that name.
    """
    text = name.strip()
    try:
        return int(text)
    except ValueError:
        pass
    upper = text.upper()
    for candidate in (upper, "VK_" + upper, "VK_ERROR_" + upper):
        if isinstance(getattr(_vk, candidate, None), int) and candidate.startswith("VK_"):
            value = _code(candidate)
            if value in _NAMES:
                return value
    known = ", ".join(sorted(n for n in _NAMES.values() if n.startswith("VK_ERROR_")))
    raise VkumdValueError(f"{name!r} is not a VkResult name; use one of {known}")


def result_name(result: int) -> str:
    """Return the ``VK_*`` name of a ``VkResult`` value, or ``"VkResult(n)"`` if unknown."""
    return _NAMES.get(result, f"VkResult({result})")


# The binding's convenience wrappers (vk.vkX(...)) raise classes of their own, one per code.
_BINDING_CODES: dict[type, int] = {
    cls: (-code if cls.__name__.startswith("VkError") and code > 0 else code)
    for code, cls in _vk.exception_codes.items() if isinstance(code, int)
}


def from_binding(call: str, exc: Exception, detail: str = "") -> VulkanError:
    """The typed error for what the binding's wrapper ``vk.<call>(...)`` raised (a
    ``vulkan.VkError``), so that callers see vkumd's hierarchy only."""
    return error_for(call, _BINDING_CODES.get(type(exc), _vk.VK_ERROR_UNKNOWN), detail)


def error_for(call: str, result: int, detail: str = "") -> VulkanError:
    """Build the typed exception for a failing ``result`` of ``call``."""
    return _BY_RESULT.get(result, VulkanError)(call, result, detail)


def check(call: str, result: int, detail: str = "") -> int:
    """Raise the typed exception if ``result`` is negative; return it otherwise.

    Non-negative codes (``VK_SUCCESS``, ``VK_TIMEOUT``, ``VK_NOT_READY``, ``VK_INCOMPLETE``)
    are ordinary outcomes and are returned for the caller to act on.
    """
    if result < 0:
        raise error_for(call, result, detail)
    return result
