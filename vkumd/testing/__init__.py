"""Tools for testing programs and vkumd itself: :mod:`vkumd.testing.faults` injects Vulkan
failures (``VKUMD_FAULTS``)."""
