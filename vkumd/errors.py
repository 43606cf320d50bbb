"""The vkumd exception hierarchy: every error the package raises derives from
:class:`VkumdError`.

Errors a Vulkan call returns live in :mod:`vkumd.vk.errors` (``VulkanError`` and its
subclasses, and the one place a ``VkResult`` becomes an exception); the errors here are
vkumd's own refusals: bad arguments, missing capabilities, closed contexts, capture misuse.
Standard-library mixins (``ValueError``, ``TypeError``, ``TimeoutError``) let callers catch
them the way they catch numpy's or the builtins' errors.
"""

from __future__ import annotations


class VkumdError(Exception):
    """Root of every error raised by vkumd."""


class DeviceUnavailable(VkumdError):
    """No Vulkan device matches the request, or the loader/driver is missing."""


class CapabilityMissing(VkumdError):
    """The chosen device lacks a capability the operation needs (a feature or extension)."""


class ValidationError(VkumdError):
    """The Khronos validation layer reported an error-severity message."""


class ContextClosed(VkumdError):
    """An object was used after the context that owns it was closed."""


class ShaderCompileError(VkumdError):
    """GLSL could not be compiled to SPIR-V; the message lists each error's file:line."""


class CaptureError(VkumdError):
    """An operation that needs the host (a read-back, a wait) was attempted during capture."""


class TimeoutError(VkumdError, TimeoutError):  # noqa: A001 - deliberately subclasses builtin
    """A wait on the device ran past its timeout; the context stays usable."""


class VkumdValueError(VkumdError, ValueError):
    """An argument has the wrong value, shape or size."""


class VkumdTypeError(VkumdError, TypeError):
    """An argument has the wrong type or dtype."""


class VkumdIndexError(VkumdValueError, IndexError):
    """An index is out of range for a tensor's dimension (or there are too many of them)."""
