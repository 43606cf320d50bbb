"""The Vulkan instance: loader selection, the validation layer and its message routing."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.errors import DeviceUnavailable
from vkumd.vk import driver_settings
from vkumd.vk.binding import API_VERSION_1_3, NULL, c_strings, ffi, lib, make_version, new, vk
from vkumd.vk.errors import IncompatibleDriver, LayerNotPresent, check, from_binding
from vkumd.vk.handle import Handle

VALIDATION_LAYER = "VK_LAYER_KHRONOS_validation"
_validation_log = logging.getLogger("vkumd.validation")


@dataclass(frozen=True)
class ValidationMessage:
    """One message from the validation layer (or another debug-utils source)."""

    severity: str  # "error", "warning", "info" or "verbose"
    message_id: str
    text: str


# Listeners see every message; the test suite registers one that fails the running test.
_listeners: list[Callable[[ValidationMessage], None]] = []
_listeners_lock = threading.Lock()


def add_validation_listener(listener: Callable[[ValidationMessage], None]) -> None:
    """Call ``listener`` with every validation message from any instance, until removed."""
    with _listeners_lock:
        _listeners.append(listener)


def remove_validation_listener(listener: Callable[[ValidationMessage], None]) -> None:
    """Stop calling a listener added by :func:`add_validation_listener`."""
    with _listeners_lock:
        if listener in _listeners:
            _listeners.remove(listener)


_SEVERITY = (
    (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT, "error", logging.ERROR),
    (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT, "warning", logging.WARNING),
    (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_INFO_BIT_EXT, "info", logging.DEBUG),
    (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_VERBOSE_BIT_EXT, "verbose", logging.DEBUG),
)


@ffi.callback("PFN_vkDebugUtilsMessengerCallbackEXT")
def _on_debug_message(severity_bits: int, _types: int, data: Any, _user: Any) -> int:
    name, level = "verbose", logging.DEBUG
    for bit, label, log_level in _SEVERITY:
        if severity_bits & bit:
            name, level = label, log_level
            break
    message_id = ffi.string(data.pMessageIdName).decode() if data.pMessageIdName else ""
    text = ffi.string(data.pMessage).decode(errors="replace") if data.pMessage else ""
    _validation_log.log(level, "%s: %s", message_id, text)
    message = ValidationMessage(name, message_id, text)
    with _listeners_lock:
        listeners = list(_listeners)
    for listener in listeners:
        listener(message)
    return vk.VK_FALSE  # never abort the call that triggered the message


def available_layers() -> list[str]:
    """Names of the instance layers the loader can find.

    Raises:
        VulkanError: the loader failed to list them.
    """
    try:
        return [layer.layerName for layer in vk.vkEnumerateInstanceLayerProperties()]
    except vk.VkError as exc:
        raise from_binding("vkEnumerateInstanceLayerProperties", exc) from None


def available_instance_extensions() -> list[str]:
    """Names of the instance extensions the loader and drivers offer.

    Raises:
        VulkanError: the loader failed to list them.
    """
    try:
        return [ext.extensionName for ext in vk.vkEnumerateInstanceExtensionProperties(None)]
    except vk.VkError as exc:
        raise from_binding("vkEnumerateInstanceExtensionProperties", exc) from None


def _apply_icd_override() -> None:
    icd = settings.text("VKUMD_ICD")
    if icd is None:
        return
    if not os.path.isfile(icd):
        raise DeviceUnavailable(
            f"VKUMD_ICD={icd!r} is not a file; point it at a driver's ICD json, e.g. "
            "/usr/share/vulkan/icd.d/lvp_icd.json"
        )
    # The loader reads these once per instance creation; both names cover old and new loaders.
    os.environ["VK_DRIVER_FILES"] = icd
    os.environ["VK_ICD_FILENAMES"] = icd


class Instance(Handle):
    """A ``VkInstance`` for Vulkan 1.3 with, when asked for, the Khronos validation layer.

    Args:
        validation: enable ``VK_LAYER_KHRONOS_validation``; ``None`` reads ``VKUMD_VALIDATION``.
        sync_validation: with validation, also turn on its synchronization checks (missing or
            wrong barriers between commands and submissions); ``None`` reads
            ``VKUMD_SYNC_VALIDATION``.

    Raises:
        LayerNotPresent: validation was asked for and the layer is not installed.
        DeviceUnavailable: the loader finds no Vulkan 1.3 driver.
        VkumdValueError: ``LP_NATIVE_VECTOR_WIDTH`` changed since this process's first
            instance (see :mod:`vkumd.vk.driver_settings`).
    """

    def __init__(self, validation: bool | None = None,
                 sync_validation: bool | None = None) -> None:
        super().__init__()
        if validation is None:
            validation = settings.flag("VKUMD_VALIDATION")
        if sync_validation is None:
            sync_validation = settings.flag("VKUMD_SYNC_VALIDATION")
        self.sync_validation = bool(validation and sync_validation)
        _apply_icd_override()
        driver_settings.apply()  # before any driver starts: lavapipe reads its width then
        self.validation = validation
        layers: list[str] = []
        extensions: list[str] = []
        if validation:
            if VALIDATION_LAYER not in available_layers():
                raise LayerNotPresent(
                    "vkCreateInstance", vk.VK_ERROR_LAYER_NOT_PRESENT,
                    f"validation was requested (VKUMD_VALIDATION=1) but {VALIDATION_LAYER} is "
                    "not installed; install it (Debian: apt-get install vulkan-validationlayers)"
                    " or unset VKUMD_VALIDATION",
                )
            layers.append(VALIDATION_LAYER)
        has_debug_utils = "VK_EXT_debug_utils" in available_instance_extensions()
        if validation and has_debug_utils:
            extensions.append("VK_EXT_debug_utils")

        app_name = ffi.new("char[]", b"vkumd")
        app_info = new("VkApplicationInfo", vk.VK_STRUCTURE_TYPE_APPLICATION_INFO,
                       pApplicationName=app_name, applicationVersion=make_version(0, 1),
                       pEngineName=app_name, engineVersion=make_version(0, 1),
                       apiVersion=API_VERSION_1_3)
        layer_names, keep_layers = c_strings(layers)
        ext_names, keep_exts = c_strings(extensions)
        info = new("VkInstanceCreateInfo", vk.VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
                   pApplicationInfo=app_info, enabledLayerCount=len(layers),
                   ppEnabledLayerNames=layer_names, enabledExtensionCount=len(extensions),
                   ppEnabledExtensionNames=ext_names)
        messenger_info = None
        if "VK_EXT_debug_utils" in extensions:
            # Chained into instance creation so messages from vkCreateInstance itself arrive.
            messenger_info = self._messenger_info()
            info.pNext = messenger_info
        if self.sync_validation:
            # The layer reads this struct from the chain; it provides VK_EXT_validation_features.
            enabled = ffi.new("VkValidationFeatureEnableEXT[]",
                              [vk.VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT])
            features = new("VkValidationFeaturesEXT", vk.VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
                           enabledValidationFeatureCount=1, pEnabledValidationFeatures=enabled,
                           pNext=info.pNext)
            info.pNext = features
            keep_features = (enabled, features)
        handle = ffi.new("VkInstance*")
        result = lib.vkCreateInstance(info, NULL, handle)
        del keep_layers, keep_exts
        if self.sync_validation:
            del keep_features
        if result == vk.VK_ERROR_INCOMPATIBLE_DRIVER:
            raise IncompatibleDriver("vkCreateInstance", result,
                                     "no installed Vulkan driver supports API 1.3")
        if result == vk.VK_ERROR_INITIALIZATION_FAILED:
            raise DeviceUnavailable(
                "vkCreateInstance failed with VK_ERROR_INITIALIZATION_FAILED: no Vulkan driver "
                "was found. Install one (Debian: apt-get install mesa-vulkan-drivers) or set "
                "VKUMD_ICD to a driver's ICD json")
        check("vkCreateInstance", result)
        self.handle = handle[0]
        self._messenger = NULL
        if messenger_info is not None:
            create = ffi.cast("PFN_vkCreateDebugUtilsMessengerEXT",
                              lib.vkGetInstanceProcAddr(self.handle,
                                                        b"vkCreateDebugUtilsMessengerEXT"))
            messenger = ffi.new("VkDebugUtilsMessengerEXT*")
            check("vkCreateDebugUtilsMessengerEXT",
                  create(self.handle, messenger_info, NULL, messenger))
            self._messenger = messenger[0]

    @staticmethod
    def _messenger_info() -> Any:
        severities = (vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT
                      | vk.VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT)
        types = (vk.VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT
                 | vk.VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT)
        return new("VkDebugUtilsMessengerCreateInfoEXT",
                   vk.VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                   messageSeverity=severities, messageType=types,
                   pfnUserCallback=_on_debug_message)

    def physical_devices(self) -> list[Any]:
        """Return the ``VkPhysicalDevice`` handles in the loader's order."""
        count = ffi.new("uint32_t*")
        check("vkEnumeratePhysicalDevices", lib.vkEnumeratePhysicalDevices(self.handle, count,
                                                                            NULL))
        devices = ffi.new("VkPhysicalDevice[]", count[0])
        check("vkEnumeratePhysicalDevices", lib.vkEnumeratePhysicalDevices(self.handle, count,
                                                                            devices))
        return [devices[i] for i in range(count[0])]

    def _release(self) -> None:
        if self._messenger != NULL:
            destroy = ffi.cast("PFN_vkDestroyDebugUtilsMessengerEXT",
                               lib.vkGetInstanceProcAddr(self.handle,
                                                         b"vkDestroyDebugUtilsMessengerEXT"))
            destroy(self.handle, self._messenger, NULL)
            self._messenger = NULL
        lib.vkDestroyInstance(self.handle, NULL)
