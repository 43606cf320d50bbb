"""The activation codes in Python (``ACTIVATIONS``) are the ones ``activation.glsl`` defines.

Checked the way push layouts are (test_push_layouts.py): a probe shader includes
``activation.glsl`` and makes each ``VKUMD_ACT_*`` code the default of a specialization
constant; glslang compiles it and the defaults are read back from the SPIR-V, so what is
compared is what the shaders' preprocessor sees.
"""

from __future__ import annotations

import re

import pytest
from spirv_reflect import spec_constant_defaults
from test_spirv_val import TARGET_ENV

from vkumd.compiler.kernels.limits import ACTIVATIONS, EPILOGUE_ACTIVATIONS
from vkumd.compiler.shader_source import shaders_dir
from vkumd.compiler.spirv_cache import SpirvCache

ACTIVATION_GLSL = shaders_dir() / "include" / "activation.glsl"


def define_name(activation: str | None) -> str:
    """activation.glsl's name for an activation's code."""
    return f"VKUMD_ACT_{(activation or 'none').upper()}"


def probe(after_include: str = "") -> str:
    """A shader whose specialization constant i defaults to the i-th activation's code."""
    lines = ["#version 450", '#include "activation.glsl"', after_include,
             "layout(local_size_x = 1) in;",
             "layout(std430, binding = 0) buffer Out { uint codes[]; };"]
    names = [define_name(a) for a in EPILOGUE_ACTIVATIONS]
    lines += [f"layout(constant_id = {i}) const uint C{i} = {name};"
              for i, name in enumerate(names)]
    lines += ["void main() {"] + [f"    codes[{i}] = C{i};" for i in range(len(names))] + ["}"]
    return "\n".join(lines) + "\n"


def shader_codes(spirv: bytes) -> dict[str | None, int]:
    defaults = spec_constant_defaults(spirv)
    return {a: defaults[i] for i, a in enumerate(EPILOGUE_ACTIVATIONS)}


@pytest.fixture(scope="module")
def spirv_cache(tmp_path_factory: pytest.TempPathFactory) -> SpirvCache:
    return SpirvCache(tmp_path_factory.mktemp("activation-codes-cache"))


def test_the_codes_match_the_shaders(spirv_cache: SpirvCache) -> None:
    spirv = spirv_cache.get_or_compile(probe(), name="activation_probe", target_env=TARGET_ENV)
    codes = shader_codes(spirv)
    assert {a: codes[a] for a in ACTIVATIONS} == ACTIVATIONS
    assert codes == {a: code for a, (code, _) in EPILOGUE_ACTIVATIONS.items()}


def test_every_shader_code_has_a_python_name() -> None:
    """An activation added to activation.glsl alone is caught too."""
    text = ACTIVATION_GLSL.read_text()
    defined = set(re.findall(r"^#define (VKUMD_ACT_\w+) ", text, re.MULTILINE))
    assert defined == {define_name(a) for a in EPILOGUE_ACTIVATIONS}


def test_a_code_that_disagrees_is_caught(spirv_cache: SpirvCache) -> None:
    """The comparison itself can fail: a shader whose gelu code is another's differs."""
    moved = "#undef VKUMD_ACT_GELU\n#define VKUMD_ACT_GELU 4u"
    spirv = spirv_cache.get_or_compile(probe(moved), name="activation_probe",
                                       target_env=TARGET_ENV)
    assert shader_codes(spirv)["gelu"] == 4
    assert shader_codes(spirv) != ACTIVATIONS
