"""Device discovery and selection, and the logical device with its queues."""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkumd import settings
from vkumd.errors import CapabilityMissing, DeviceUnavailable, VkumdTypeError, VkumdValueError
from vkumd.vk.binding import NULL, c_strings, ffi, lib, new, vk
from vkumd.vk.caps import DeviceCaps, query_caps
from vkumd.vk.errors import DeviceLost, check
from vkumd.vk.handle import Handle
from vkumd.vk.instance import Instance

log = logging.getLogger("vkumd.runtime")

MIN_API_VERSION = (1, 3, 0)
_TYPE_RANK = {"discrete": 0, "integrated": 1, "virtual": 2, "cpu": 3, "other": 4}
DeviceSpec = int | str


def enumerate_caps(instance: Instance) -> list[tuple[Any, DeviceCaps]]:
    """Return ``(VkPhysicalDevice, DeviceCaps)`` for every device the loader lists."""
    return [(physical, query_caps(instance.handle, physical, index))
            for index, physical in enumerate(instance.physical_devices())]


def device_list(value: str | Sequence[DeviceSpec] | None = None) -> list[DeviceSpec]:
    """The devices named by ``VKUMD_DEVICE`` or by a ``devices=`` argument, in order.

    Args:
        value: a comma-separated string (``"0,1"``, ``"0, llvmpipe"``), a sequence of indices
            or name substrings, or ``None`` to read ``VKUMD_DEVICE``.

    Returns:
        The entries, digits turned into ints; repeats are kept (``0,0`` means two contexts
        on device 0). ``[]`` when ``VKUMD_DEVICE`` is unset: the default device, once.

    Raises:
        VkumdValueError: an empty entry (``"0,,1"``) or an empty sequence.
        VkumdTypeError: an entry that is neither an int nor a str.
    """
    source = "VKUMD_DEVICE" if value is None else "devices"
    if value is None:
        value = settings.text("VKUMD_DEVICE")
        if value is None:
            return []
    if isinstance(value, str):
        entries: list[Any] = value.split(",")
    elif isinstance(value, Sequence):
        entries = list(value)
        if not entries:
            raise VkumdValueError(f"{source}: an empty list of devices; name at least one, "
                                  "e.g. [0] or [0, 1]")
    else:
        raise VkumdTypeError(f"{source} must be a list of device indices or names, or a "
                             f"comma-separated string, not {type(value).__name__}")
    result: list[DeviceSpec] = []
    for position, entry in enumerate(entries):
        if isinstance(entry, bool) or not isinstance(entry, (int, str)):
            raise VkumdTypeError(f"{source}[{position}] is {type(entry).__name__} "
                                 f"({entry!r}); give a device index or a name substring")
        if isinstance(entry, str):
            entry = entry.strip()
            if not entry:
                raise VkumdValueError(f"{source}={value!r}: entry {position} is empty; write "
                                      "indices or names separated by commas, e.g. 0,1")
            entry = int(entry) if re.fullmatch(r"\d+", entry) else entry
        result.append(entry)
    return result


def default_device_index(all_caps: list[DeviceCaps]) -> int:
    """Index of the device vkumd picks by default.

    Only devices with Vulkan 1.3 qualify; among them a discrete GPU wins, then integrated,
    virtual and CPU devices; ties go to the one with more device-local memory.
    ``VKUMD_DEVICE`` (an index or a substring of the name) overrides the choice; when it
    lists several (``0,1``, for :func:`vkumd.distributed.open_contexts`) the first is taken.

    Raises:
        DeviceUnavailable: no device qualifies, or ``VKUMD_DEVICE``'s first entry matches none.
        VkumdValueError: ``VKUMD_DEVICE`` has an empty entry (``0,,1``).
    """
    wanted = device_list()
    if wanted:
        return resolve_device(all_caps, wanted[0])
    usable = [c for c in all_caps if c.api_version >= MIN_API_VERSION]
    if not usable:
        listed = ", ".join(f"{c.name} (Vulkan {'.'.join(map(str, c.api_version))})"
                           for c in all_caps) or "none"
        raise DeviceUnavailable(
            f"no Vulkan 1.3 device found (devices: {listed}). Install a current driver "
            "(Debian 12: mesa-vulkan-drivers from bookworm-backports; `make demo` does it)")
    best = min(usable, key=lambda c: (_TYPE_RANK[c.device_type], -c.device_local_bytes, c.index))
    return best.index


def resolve_device(all_caps: list[DeviceCaps], wanted: int | str) -> int:
    """Turn an index or a name substring into a device index.

    Raises:
        DeviceUnavailable: nothing matches, an index is out of range (negative indices are
            refused, not counted from the end), or the match lacks Vulkan 1.3.
        VkumdTypeError: ``wanted`` is neither an int nor a string.
    """
    if isinstance(wanted, bool) or not isinstance(wanted, (int, str)):
        raise VkumdTypeError(f"device must be an index or a name substring, got "
                             f"{type(wanted).__name__}: {wanted!r}")
    names = "; ".join(f"{c.index}: {c.name}" for c in all_caps) or "none"
    text = str(wanted).strip()
    if re.fullmatch(r"[+-]?\d+", text):
        index = int(text)
        if not 0 <= index < len(all_caps):
            valid = f"0..{len(all_caps) - 1}" if all_caps else "none: no device was found"
            raise DeviceUnavailable(f"device index {index} is out of range (valid: {valid}); "
                                    f"devices are: {names}")
    else:
        matches = [c.index for c in all_caps if text.lower() in c.name.lower()]
        if not matches:
            raise DeviceUnavailable(f"no device name contains {text!r}; devices are: {names}")
        index = matches[0]
    caps = all_caps[index]
    if caps.api_version < MIN_API_VERSION:
        raise DeviceUnavailable(f"device {index} ({caps.name}) implements Vulkan "
                                f"{'.'.join(map(str, caps.api_version))}; vkumd needs 1.3")
    return index


class DeviceHealth:
    """Whether a device was lost; shared by the :class:`Device` and its queues, so that
    whatever notices the loss first (a submit, a wait) makes every later use say so, even one
    that calls no Vulkan function (the host reading mapped memory the lost work never wrote).
    """

    def __init__(self) -> None:
        self.lost: DeviceLost | None = None

    def mark_lost(self, error: DeviceLost) -> None:
        """Remember the first loss reported."""
        if self.lost is None:
            self.lost = error

    def check(self, what: str = "this operation") -> None:
        """Raise :class:`DeviceLost` if the device was lost.

        Raises:
            DeviceLost: naming the call that saw the loss and what it was doing.
        """
        lost = self.lost
        if lost is not None:
            raise DeviceLost(lost.call, lost.result,
                             f"{what} is refused: the device was lost earlier ({lost.detail}). "
                             "Close this context and create a new vkumd.Context")


@dataclass(frozen=True)
class Queue:
    """A ``VkQueue`` with its family index; submissions to it go through ``lock``; ``health``
    is the device's :class:`DeviceHealth`."""

    handle: Any
    family: int
    lock: threading.Lock
    health: DeviceHealth


class Device(Handle):
    """A logical device with a compute queue and, where one exists, a transfer-only queue.

    Only features and extensions that are both present and used by vkumd are enabled.

    Args:
        instance: the owning instance.
        physical: the ``VkPhysicalDevice``.
        caps: its capabilities.
    """

    def __init__(self, instance: Instance, physical: Any, caps: DeviceCaps) -> None:
        super().__init__()
        self.instance = instance
        self.physical = physical
        self.caps = caps
        self.health = DeviceHealth()
        compute_family = next((f for f in caps.queue_families if f.compute), None)
        if compute_family is None:
            raise CapabilityMissing(f"device {caps.name} has no compute queue")
        transfer_family = next((f for f in caps.queue_families
                                if f.transfer and not f.compute and not f.graphics), None)

        priority = ffi.new("float[]", [1.0])
        families = [compute_family] + ([transfer_family] if transfer_family else [])
        queue_infos = ffi.new("VkDeviceQueueCreateInfo[]", len(families))
        for slot, family in enumerate(families):
            queue_infos[slot].sType = vk.VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO
            queue_infos[slot].queueFamilyIndex = family.index
            queue_infos[slot].queueCount = 1
            queue_infos[slot].pQueuePriorities = priority

        f2 = new("VkPhysicalDeviceFeatures2", vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2)
        f11 = new("VkPhysicalDeviceVulkan11Features",
                  vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_1_FEATURES)
        f12 = new("VkPhysicalDeviceVulkan12Features",
                  vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES)
        f13 = new("VkPhysicalDeviceVulkan13Features",
                  vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_3_FEATURES)
        f2.pNext, f11.pNext, f12.pNext = f11, f12, f13
        supported = ffi.new("VkPhysicalDeviceFeatures*")
        lib.vkGetPhysicalDeviceFeatures(physical, supported)
        f2.features.shaderInt64 = supported.shaderInt64
        f2.features.shaderInt16 = supported.shaderInt16
        f2.features.shaderFloat64 = caps.shader_float64
        f11.storageBuffer16BitAccess = caps.storage_16bit
        f12.shaderFloat16 = caps.shader_float16
        f12.shaderInt8 = caps.shader_int8
        f12.storageBuffer8BitAccess = caps.storage_8bit
        f12.timelineSemaphore = caps.timeline_semaphores
        f12.bufferDeviceAddress = caps.buffer_device_address
        f12.vulkanMemoryModel = caps.vulkan_memory_model
        f13.subgroupSizeControl = caps.subgroup_size_control
        f13.computeFullSubgroups = caps.subgroup_size_control
        f13.synchronization2 = True
        f13.maintenance4 = True
        extensions = []
        keep: list[Any] = []
        if caps.push_descriptors:
            extensions.append("VK_KHR_push_descriptor")
        if caps.cooperative_matrix:
            extensions.append("VK_KHR_cooperative_matrix")
            fcm = new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR",
                      vk.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR,
                      cooperativeMatrix=True)
            f13.pNext = fcm
            keep.append(fcm)
        ext_names, keep_names = c_strings(extensions)
        info = new("VkDeviceCreateInfo", vk.VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO, pNext=f2,
                   queueCreateInfoCount=len(families), pQueueCreateInfos=queue_infos,
                   enabledExtensionCount=len(extensions), ppEnabledExtensionNames=ext_names)
        handle = ffi.new("VkDevice*")
        check("vkCreateDevice", lib.vkCreateDevice(physical, info, NULL, handle),
              f"device {caps.name}, extensions {extensions}")
        del keep, keep_names
        self.handle = handle[0]
        self.extensions = tuple(extensions)
        self.compute_queue = self._queue(compute_family.index)
        self.transfer_queue = self._queue(transfer_family.index) if transfer_family else None
        log.info("opened %s (%s, %s); extensions %s", caps.name, caps.device_type,
                 caps.driver_info, extensions)

    def _queue(self, family: int) -> Queue:
        out = ffi.new("VkQueue*")
        lib.vkGetDeviceQueue(self.handle, family, 0, out)
        return Queue(out[0], family, threading.Lock(), self.health)

    def wait_idle(self) -> None:
        """Block until the device has finished all submitted work.

        Raises:
            DeviceLost: the device was lost (now, or earlier).
            VulkanError: the wait failed twice for another reason.
        """
        result = lib.vkDeviceWaitIdle(self.handle)
        if result < 0 and result != vk.VK_ERROR_DEVICE_LOST:
            # Running out of memory while waiting says nothing about the work: ask once more.
            result = lib.vkDeviceWaitIdle(self.handle)
        try:
            check("vkDeviceWaitIdle", result)
        except DeviceLost as exc:
            self.health.mark_lost(exc)
            raise

    def _release(self) -> None:
        lib.vkDeviceWaitIdle(self.handle)
        lib.vkDestroyDevice(self.handle, NULL)
