"""Tools for testing programs and vkumd itself: :mod:`vkumd.testing.numerics` judges results
against float64 references (relative errors, poisoned outputs, stored values);
:mod:`vkumd.testing.faults` injects Vulkan failures (``VKUMD_FAULTS``);
:mod:`vkumd.testing.netns` makes private network namespaces (loopback only, or two joined by
a veth pair) and :mod:`vkumd.testing.ray_cluster` runs a Ray cluster in them (head:
:mod:`vkumd.testing.ray_head`), for the Ray tests and ``bench/scale.py``."""
