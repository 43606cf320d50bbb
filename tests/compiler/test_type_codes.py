"""Each dtype's type code, GLSL type and size are written once (kernels/type_codes.py), and
every kernel family's dtypes (kernels/limits.py) are dtypes that table knows."""

from __future__ import annotations

import re

import numpy as np

from vkumd.compiler.kernels import limits
from vkumd.compiler.kernels.elementwise import ELEMENTWISE_CODES
from vkumd.compiler.kernels.rows import ROW_CODES
from vkumd.compiler.kernels.type_codes import ELEMENT_TYPES, type_codes
from vkumd.compiler.shader_source import shaders_dir
from vkumd.framework import dtypes

TYPES_GLSL = shaders_dir() / "include" / "elementwise_types.glsl"


def test_every_dtype_reads_its_kernel_facts_from_the_table() -> None:
    assert {d.name for d in dtypes.ALL} == set(ELEMENT_TYPES)
    for d in dtypes.ALL:
        kernel_type = ELEMENT_TYPES[d.name]
        assert (d.code, d.glsl, d.itemsize) == (kernel_type.code, kernel_type.glsl,
                                                kernel_type.itemsize)
        assert d.itemsize == np.dtype(d.storage).itemsize


def test_every_family_declares_known_dtypes() -> None:
    families = {name: value for name, value in vars(limits).items() if name.endswith("_DTYPES")}
    assert len(families) >= 6
    for name, names in families.items():
        assert set(names) <= set(ELEMENT_TYPES), name


def test_family_codes_come_from_the_table() -> None:
    assert ELEMENTWISE_CODES == {"float32": "F32", "float16": "F16", "bfloat16": "BF16",
                                 "int32": "I32"}
    assert ROW_CODES == type_codes(limits.ROW_DTYPES)
    assert list(type_codes(("int8", "float32"))) == ["int8", "float32"]


def test_the_shaders_define_the_codes_the_elementwise_kernels_take() -> None:
    defined = set(re.findall(r"^#define (\w+) \d+$", TYPES_GLSL.read_text(), re.MULTILINE))
    assert set(ELEMENTWISE_CODES.values()) <= defined
