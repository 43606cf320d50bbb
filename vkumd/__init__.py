"""vkumd: a user-mode driver for AI compute over Vulkan.

Start with :class:`Context`; list devices with :func:`devices`.
"""

from vkumd import ops
from vkumd.errors import (
    CapabilityMissing,
    CaptureError,
    ContextClosed,
    DeviceUnavailable,
    ShaderCompileError,
    TimeoutError,
    ValidationError,
    VkumdError,
    VkumdIndexError,
    VkumdTypeError,
    VkumdValueError,
)
from vkumd.framework.compile import CompiledFunction, compile  # noqa: A004
from vkumd.framework.context import Context, from_dlpack
from vkumd.framework.dtypes import DType, bfloat16, bool_, float16, float32, int8, int32, uint8
from vkumd.framework.tensor import Tensor
from vkumd.runtime.capture import Graph
from vkumd.runtime.context import devices
from vkumd.runtime.profiler import Profiler, profile
from vkumd.runtime.stream import Event, Stream
from vkumd.vk.caps import CoopMatShape, DeviceCaps
from vkumd.vk.errors import (
    DeviceLost,
    ExtensionNotPresent,
    FeatureNotPresent,
    InitializationFailed,
    LayerNotPresent,
    OutOfDeviceMemory,
    OutOfHostMemory,
    VulkanError,
)
from vkumd.vk.handle import live_objects

__version__ = "0.1.0"


def _configure_logging() -> None:
    """Honour ``VKUMD_LOG``: give the ``vkumd`` logger that level and a stderr handler."""
    import logging

    from vkumd import settings

    level_name = settings.text("VKUMD_LOG")
    if level_name is None:
        return
    level = logging.getLevelName(level_name.upper())
    if not isinstance(level, int):
        raise VkumdValueError(f"VKUMD_LOG={level_name!r} is not a logging level; use debug, "
                              "info, warning or error")
    logger = logging.getLogger("vkumd")
    logger.setLevel(level)
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)


_configure_logging()


def _arm_faults() -> None:
    """Honour ``VKUMD_FAULTS`` (see :mod:`vkumd.testing.faults`); nothing loads when unset."""
    from vkumd import settings

    if settings.text("VKUMD_FAULTS") is not None:
        from vkumd.testing import faults

        faults.arm_from_environment()


_arm_faults()

__all__ = [
    "CapabilityMissing", "CaptureError", "Context", "ContextClosed", "CoopMatShape", "DType",
    "DeviceCaps", "DeviceLost", "DeviceUnavailable", "Event", "ExtensionNotPresent",
    "FeatureNotPresent", "Graph", "InitializationFailed", "LayerNotPresent",
    "OutOfDeviceMemory", "OutOfHostMemory", "Profiler", "ShaderCompileError", "Stream",
    "Tensor", "TimeoutError", "ValidationError", "VkumdError", "VkumdIndexError",
    "VkumdTypeError", "VkumdValueError", "VulkanError", "bfloat16", "devices", "float16",
    "float32", "from_dlpack", "int8", "int32", "live_objects", "ops", "profile", "uint8",
]
__all__ += ["CompiledFunction", "compile"]
__all__ += ["bool_"]
