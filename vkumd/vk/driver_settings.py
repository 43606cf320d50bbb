"""Settings vkumd hands a Vulkan driver through the environment, before the driver starts.

lavapipe (Mesa's CPU driver) takes its SIMD width from ``LP_NATIVE_VECTOR_WIDTH`` bits: 256 by
default even on CPUs with AVX-512, which gives 8-wide subgroups. On AVX-512 CPUs vkumd asks for
512 (16-wide subgroups): every per-lane load lavapipe makes is a gather, and a wider subgroup
spreads each gather's fixed cost and the loop's mask handling over twice the lanes. Measured on
an AMD EPYC (Zen 4) core, the float32 GEMM at 1024^3 went from 0.40-0.42 to 0.51-0.55 of the
driver's own multiply-add ceiling, whose value stayed within noise (docs/performance.md,
"Sixteen-wide subgroups").

lavapipe reads the variable again whenever an instance or device is created, into one value
for the whole process, and compiles every later pipeline at that width, whatever width the
devices created before reported (checked on Mesa 25.0.7). A change in the middle of a process
therefore makes earlier contexts plan kernels for one subgroup size and run them at another:
wrong results, silently. So vkumd sets its pick once, before its first instance, and leaves it
set (child processes inherit it); a value the user has set is never changed; nothing is set
where lavapipe is already loaded into the process (another library's devices would change
width under it); and an instance created after the variable has changed is refused
(:func:`apply`).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping

from vkumd.errors import VkumdValueError

LAVAPIPE_VECTOR_WIDTH = "LP_NATIVE_VECTOR_WIDTH"
WIDE_VECTOR_BITS = "512"
LAVAPIPE_LIBRARY = "libvulkan_lvp"

# The width in the environment when this process made its first instance: (value,) once set;
# and what vkumd itself put there then.
_first_width: tuple[str | None] | None = None
_picked: dict[str, str] = {}
_lock = threading.Lock()


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The first ``flags`` line of ``/proc/cpuinfo``; empty where there is none (not Linux/x86)."""
    try:
        with open(path) as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def lavapipe_loaded(maps: str = "/proc/self/maps") -> bool:
    """Whether lavapipe's library is already mapped into this process (by anyone)."""
    try:
        with open(maps) as mapped:
            return any(LAVAPIPE_LIBRARY in line for line in mapped)
    except OSError:
        return False


def chosen(environ: Mapping[str, str] | None = None,
           flags: frozenset[str] | None = None,
           loaded: bool | None = None) -> dict[str, str]:
    """The variables vkumd would set: its picks for this CPU that the user has not set.

    Args:
        environ: the environment to look at (default ``os.environ``).
        flags: the CPU's feature flags (default: read from ``/proc/cpuinfo``).
        loaded: whether lavapipe is already loaded here (default: :func:`lavapipe_loaded`).
            Then nothing is picked: another library's lavapipe devices run at the width
            they started with, and a new width would change theirs under them.
    """
    environ = os.environ if environ is None else environ
    picks: dict[str, str] = {}
    if LAVAPIPE_VECTOR_WIDTH not in environ and not (
            lavapipe_loaded() if loaded is None else loaded):
        # AVX2-only CPUs would have LLVM split each 512-bit vector in two: not measured, left.
        if "avx512f" in (cpu_flags() if flags is None else flags):
            picks[LAVAPIPE_VECTOR_WIDTH] = WIDE_VECTOR_BITS
    return picks


def apply() -> dict[str, str]:
    """Put :func:`chosen` into the process environment; call before creating an instance.

    Returns:
        The variables set by this call (empty after the first call of a process).

    Raises:
        VkumdValueError: ``LP_NATIVE_VECTOR_WIDTH`` differs from its value when this process
            made its first instance; lavapipe would compile the earlier contexts' kernels at
            the new width.
    """
    global _first_width
    with _lock:
        if _first_width is None:
            picks = chosen()
            os.environ.update(picks)
            _picked.update(picks)
            _first_width = (os.environ.get(LAVAPIPE_VECTOR_WIDTH),)
            return picks
        width = os.environ.get(LAVAPIPE_VECTOR_WIDTH)
        if width != _first_width[0]:
            raise VkumdValueError(
                f"{LAVAPIPE_VECTOR_WIDTH} is {width!r} now but was {_first_width[0]!r} when "
                "this process created its first Vulkan instance; lavapipe keeps one vector "
                "width per process and would run the kernels of existing contexts at the new "
                f"one. Set {LAVAPIPE_VECTOR_WIDTH} before the first vkumd call (or in a new "
                "process) and leave it")
        return {}


def picked() -> dict[str, str]:
    """The variables vkumd set in this process (by its first instance), to tell them apart from
    the user's."""
    with _lock:
        return dict(_picked)
