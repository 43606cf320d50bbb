"""Probe the cooperative-matrix lane: is there a lavapipe that lists VK_KHR_cooperative_matrix?

Run it under the lane (``ci/coopmat-lane.sh run .venv/bin/python ci/coopmat_probe.py``); it
also runs on any other Vulkan set-up, where it says what it finds. It creates an instance,
finds the lavapipe device (or, with ``--any-device``, the first device listing the
extension), prints its driver name and version, checks ``VK_KHR_cooperative_matrix`` and
prints every shape ``vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR`` lists.

Exit status: 0 when the extension is there and lists at least one shape; 1 when not;
2 when no Vulkan instance or device could be had at all.
"""

from __future__ import annotations

import argparse
import sys

import vulkan as vk

EXTENSION = "VK_KHR_cooperative_matrix"

COMPONENT_TYPES = {
    getattr(vk, f"VK_COMPONENT_TYPE_{name}_KHR"): name.lower()
    for name in ("FLOAT16", "FLOAT32", "FLOAT64", "SINT8", "SINT16", "SINT32", "SINT64",
                 "UINT8", "UINT16", "UINT32", "UINT64")
}
SCOPES = {
    vk.VK_SCOPE_DEVICE_KHR: "device",
    vk.VK_SCOPE_WORKGROUP_KHR: "workgroup",
    vk.VK_SCOPE_SUBGROUP_KHR: "subgroup",
    vk.VK_SCOPE_QUEUE_FAMILY_KHR: "queue_family",
}


def _text(value) -> str:
    # The binding hands char arrays back as str already; cdata only on odd versions.
    if isinstance(value, str):
        return value
    return vk.ffi.string(value).decode()


def _version(v: int) -> str:
    return "%d.%d.%d" % (v >> 22 & 0x7F, v >> 12 & 0x3FF, v & 0xFFF)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--any-device", action="store_true",
                        help="accept any device, not only lavapipe")
    args = parser.parse_args(argv)

    app = vk.VkApplicationInfo(pApplicationName="vkumd-coopmat-probe",
                               applicationVersion=1, pEngineName="vkumd", engineVersion=1,
                               apiVersion=vk.VK_MAKE_VERSION(1, 3, 0))
    try:
        instance = vk.vkCreateInstance(vk.VkInstanceCreateInfo(pApplicationInfo=app), None)
    except Exception as exc:  # the binding raises a class per VkResult
        print(f"probe: FAIL: vkCreateInstance: {type(exc).__name__}: {exc}")
        return 2
    try:
        devices = vk.vkEnumeratePhysicalDevices(instance)
        if not devices:
            print("probe: FAIL: no Vulkan physical device (is VK_DRIVER_FILES right?)")
            return 2
        chosen = None
        for dev in devices:
            props = vk.vkGetPhysicalDeviceProperties(dev)
            driver = vk.VkPhysicalDeviceDriverProperties()
            props2 = vk.VkPhysicalDeviceProperties2(pNext=driver)
            vk.vkGetPhysicalDeviceProperties2(dev, props2)
            name = _text(props.deviceName)
            driver_name = _text(driver.driverName)
            driver_info = _text(driver.driverInfo)
            exts = {_text(e.extensionName)
                    for e in vk.vkEnumerateDeviceExtensionProperties(dev, None)}
            print("probe: device %r: driver %s (%s), Vulkan %s, %d device extensions"
                  % (name, driver_name, driver_info, _version(props.apiVersion), len(exts)))
            is_lavapipe = driver.driverID == vk.VK_DRIVER_ID_MESA_LLVMPIPE or "llvmpipe" in name
            if chosen is None and (is_lavapipe or args.any_device):
                chosen = (dev, name, exts)
        if chosen is None:
            print("probe: FAIL: no lavapipe (llvmpipe) device among %d device(s)" % len(devices))
            return 2
        dev, name, exts = chosen
        if EXTENSION not in exts:
            print(f"probe: FAIL: {name!r} does not list {EXTENSION}")
            return 1
        print(f"probe: {name!r} lists {EXTENSION}")

        get_props = vk.vkGetInstanceProcAddr(
            instance, "vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR")
        shapes = get_props(dev)
        if not shapes:
            print("probe: FAIL: vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR lists no shape")
            return 1
        print("probe: %d cooperative-matrix shape(s):" % len(shapes))
        print("probe:   %-8s %-8s %-8s %-8s %-8s %-5s %s"
              % ("MxNxK", "A", "B", "C", "Result", "sat", "scope"))
        for p in shapes:
            print("probe:   %-8s %-8s %-8s %-8s %-8s %-5s %s" % (
                "%dx%dx%d" % (p.MSize, p.NSize, p.KSize),
                COMPONENT_TYPES.get(p.AType, p.AType), COMPONENT_TYPES.get(p.BType, p.BType),
                COMPONENT_TYPES.get(p.CType, p.CType),
                COMPONENT_TYPES.get(p.ResultType, p.ResultType),
                "yes" if p.saturatingAccumulation else "no", SCOPES.get(p.scope, p.scope)))
        print("probe: OK")
        return 0
    finally:
        vk.vkDestroyInstance(instance, None)


if __name__ == "__main__":
    sys.exit(main())
