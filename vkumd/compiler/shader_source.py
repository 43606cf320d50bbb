"""GLSL source handling before glslang sees it: locating shaders and expanding ``#include``.

We expand includes ourselves instead of using glslang's include callbacks because the
expanded text is what the SPIR-V cache hashes (a change in a header must change the key) and
what ``VKUMD_DUMP_SHADERS`` writes out; the ``glslangValidator`` fallback then compiles exactly
the same text. Each spliced file is framed by ``#line N "file"`` directives (enabled through
``GL_GOOGLE_cpp_style_line_directive``), so glslang reports errors as ``file:line`` of the
file the user actually edits.

Limitation: expansion is textual and ignores ``#if``/``#ifdef``; an include inside a
disabled block is still resolved. Use include guards or ``#pragma once`` for headers
included twice.
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from vkumd.errors import ShaderCompileError, VkumdValueError

DEFAULT_VERSION = 460
_MAX_INCLUDE_DEPTH = 32

_INCLUDE_RE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)\s*(?://.*)?$')
_VERSION_RE = re.compile(r"^\s*#\s*version\b")
_PRAGMA_ONCE_RE = re.compile(r"^\s*#\s*pragma\s+once\s*$")
_IDENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass
class ExpandedSource:
    """GLSL text after include expansion, with what is needed to explain errors in it.

    Attributes:
        text: the complete source handed to glslang.
        main_file: display name of the kernel's own file, e.g. ``"gemm.comp"``.
        files: display name -> lines of every file that went into ``text`` (for showing
            the offending line of an error).
        defines: the defines that were written into ``text``, sorted by name.
    """

    text: str
    main_file: str
    files: dict[str, list[str]] = field(default_factory=dict)
    defines: tuple[tuple[str, str], ...] = ()


def shaders_dir() -> Path:
    """Return the directory holding the packaged GLSL sources.

    An installed wheel maps the top-level ``shaders/`` folder to the package
    ``vkumd.shaders``; an editable install or a source checkout may not have that mapping, so
    the source tree's ``<repo>/shaders`` is the fallback.

    Returns:
        The ``shaders`` directory (it contains ``include/``).

    Raises:
        VkumdError: never; if nothing is found the source-tree path is returned as is.
    """
    try:
        spec = importlib.util.find_spec("vkumd.shaders")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            if Path(location).is_dir():
                return Path(location)
    package_dir = Path(__file__).resolve().parents[1]
    inside_package = package_dir / "shaders"
    if inside_package.is_dir():
        return inside_package
    return package_dir.parent / "shaders"


def default_include_dirs() -> list[Path]:
    """Return the include directories used when a caller passes none: ``shaders/include``."""
    return [shaders_dir() / "include"]


def main_file_name(name: str) -> str:
    """Return the display file name of a kernel: ``name`` with ``.comp`` appended if missing."""
    return name if name.endswith((".comp", ".glsl")) else f"{name}.comp"


def normalise_defines(
    defines: Mapping[str, str | int | bool] | None,
) -> tuple[tuple[str, str], ...]:
    """Validate defines and return them as sorted ``(name, value)`` string pairs.

    Args:
        defines: macro name -> value; ``bool`` becomes ``1``/``0``.

    Returns:
        Sorted pairs, so equal dicts give equal cache keys whatever their order.

    Raises:
        VkumdValueError: a name is not a C identifier or a value spans lines.
    """
    pairs = []
    for key, value in (defines or {}).items():
        if not _IDENT_RE.match(key):
            raise VkumdValueError(f"define name {key!r} is not a valid GLSL identifier")
        if isinstance(value, bool):
            text = "1" if value else "0"
        else:
            text = str(value)
        if "\n" in text or "\r" in text:
            raise VkumdValueError(f"define {key}={text!r} spans lines; give a one-line value")
        pairs.append((key, text))
    return tuple(sorted(pairs))


def _line_directive(line: int, file: str) -> str:
    # A double quote would end the file-name string early; glslang has no escape for it.
    return f'#line {line} "{file.replace(chr(34), chr(39))}"'


class _Expander:
    def __init__(self, main_file: str, include_dirs: Sequence[Path]) -> None:
        self.main_file = main_file
        self.include_dirs = [Path(d) for d in include_dirs]
        self.files: dict[str, list[str]] = {}
        self.once: set[Path] = set()

    def resolve(self, include: str, includer: str, includer_dir: Path | None,
                line: int) -> tuple[Path, str]:
        candidates: list[Path] = []
        if includer_dir is not None:
            candidates.append(includer_dir)
        candidates.extend(self.include_dirs)
        for directory in candidates:
            path = directory / include
            if path.is_file():
                return path.resolve(), include
        searched = ", ".join(str(d) for d in candidates) or "(no include directories)"
        raise ShaderCompileError(
            f"{includer}:{line}: cannot find include \"{include}\" "
            f"(kernel {self.main_file}); searched: {searched}"
        )

    def expand(self, lines: list[str], display: str, directory: Path | None,
               stack: list[Path], out: list[str], first_line: int = 1) -> None:
        for index, raw in enumerate(lines):
            number = first_line + index
            if _PRAGMA_ONCE_RE.match(raw):
                # Handled here; glslang only knows it together with its own include support.
                out.append("// #pragma once")
                continue
            match = _INCLUDE_RE.match(raw)
            if match is None:
                out.append(raw)
                continue
            include = match.group(1) or match.group(2)
            path, shown = self.resolve(include, display, directory, number)
            if path in stack:
                chain = " -> ".join(p.name for p in [*stack, path])
                raise ShaderCompileError(
                    f"{display}:{number}: include cycle in kernel {self.main_file}: {chain}"
                )
            if len(stack) >= _MAX_INCLUDE_DEPTH:
                raise ShaderCompileError(
                    f"{display}:{number}: includes nested deeper than {_MAX_INCLUDE_DEPTH} "
                    f"in kernel {self.main_file}"
                )
            if path in self.once:
                out.append(f"// {raw.strip()} (already included, #pragma once)")
                continue
            try:
                body = path.read_text(encoding="utf-8").splitlines()
            except (OSError, UnicodeDecodeError) as exc:
                raise ShaderCompileError(
                    f"{display}:{number}: cannot read include \"{include}\" ({path}) "
                    f"in kernel {self.main_file}: {exc}"
                ) from exc
            if any(_PRAGMA_ONCE_RE.match(line) for line in body):
                self.once.add(path)
            # Two headers of the same relative name from different directories would share
            # a display name; suffixing keeps error locations unambiguous.
            while shown in self.files and self.files[shown] != body:
                shown = f"{shown}~"
            self.files[shown] = body
            out.append(_line_directive(1, shown))
            self.expand(body, shown, path.parent, [*stack, path], out)
            out.append(_line_directive(number + 1, display))


def expand_source(
    source: str,
    *,
    name: str,
    defines: Mapping[str, str | int | bool] | None = None,
    include_dirs: Sequence[Path] | None = None,
) -> ExpandedSource:
    """Expand ``#include`` directives and write defines into a kernel's source.

    The ``#version`` line stays first (``#version 460`` is added if the source has none);
    after it come the ``GL_GOOGLE_cpp_style_line_directive`` extension, one ``#define`` per
    define, and ``#line`` directives that keep every later line mapped to its own file.

    Args:
        source: GLSL text of the kernel.
        name: kernel name; errors are reported against ``<name>.comp``.
        defines: macros to define before the kernel's first line.
        include_dirs: where ``#include "x.glsl"`` is looked up, after the including file's
            own directory; default ``shaders/include``.

    Returns:
        The expanded source.

    Raises:
        ShaderCompileError: an include is missing, unreadable, cyclic or nested too deep.
        VkumdValueError: a define name or value is malformed.
    """
    main_file = main_file_name(name)
    pairs = normalise_defines(defines)
    dirs = default_include_dirs() if include_dirs is None else list(include_dirs)
    expander = _Expander(main_file, dirs)
    lines = source.splitlines()
    expander.files[main_file] = lines

    version_index = next((i for i, line in enumerate(lines) if _VERSION_RE.match(line)), None)
    out: list[str] = []
    if version_index is None:
        out.append(f"#version {DEFAULT_VERSION}")
        body_start = 0
    else:
        # Lines before #version can only be comments or blank; keep them for line numbers.
        out.extend(lines[: version_index + 1])
        body_start = version_index + 1
    out.append("#extension GL_GOOGLE_cpp_style_line_directive : require")
    out.extend(f"#define {key} {value}" for key, value in pairs)
    out.append(_line_directive(body_start + 1, main_file))
    expander.expand(lines[body_start:], main_file, None, [], out, first_line=body_start + 1)
    return ExpandedSource(
        text="\n".join(out) + "\n", main_file=main_file, files=expander.files, defines=pairs
    )

