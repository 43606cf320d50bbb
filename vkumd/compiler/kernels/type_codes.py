"""The element types kernels are compiled for: each vkumd dtype's type code and GLSL type.

A kernel is built for an element type with a define naming its code (``-DDTYPE=BF16``);
``shaders/include/elementwise_types.glsl`` turns the codes into numbers ``#if`` compares.
This table is the one place a dtype's code, GLSL storage type and size are written:
:class:`vkumd.framework.dtypes.DType` reads its ``code``, ``glsl`` and ``itemsize`` from it,
and each kernel family turns the dtype names it takes
(:mod:`~vkumd.compiler.kernels.limits`) into codes with :func:`type_codes`. Standard library
only.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ElementType:
    """How kernels store one dtype.

    Attributes:
        code: the type code kernels are compiled with (``"F32"``, ``"BF16"``, ...).
        glsl: the GLSL type of one element in storage (bfloat16 has none: its bits are a
            ``uint16_t``, computed in float32).
        itemsize: bytes per element (the packed types: per storage byte).
        bits: bits per element where several share a byte (the packed types), else 0.
    """

    code: str
    glsl: str
    itemsize: int
    bits: int = 0


ELEMENT_TYPES: dict[str, ElementType] = {
    "float32": ElementType("F32", "float", 4),
    "float16": ElementType("F16", "float16_t", 2),
    "bfloat16": ElementType("BF16", "uint16_t", 2),
    "int32": ElementType("I32", "int", 4),
    "int8": ElementType("I8", "int8_t", 1),
    "uint8": ElementType("U8", "uint8_t", 1),
    # The wider and unsigned integers and float64 (ONNX's INT16, UINT16, UINT32, UINT64 and
    # DOUBLE): 16-bit ones need 16-bit storage, uint64 shaderInt64, float64 shaderFloat64.
    "int16": ElementType("I16", "int16_t", 2),
    "uint16": ElementType("U16", "uint16_t", 2),
    "uint32": ElementType("U32", "uint", 4),
    "uint64": ElementType("U64", "uint64_t", 8),
    "float64": ElementType("F64", "double", 8),
}
# int64 (ONNX's INT64, torch's and numpy's default integer): an int64_t with shaderInt64, else
# two 32-bit words (low first, as int64_t is stored little-endian) that the emulated kernel
# variants compute on (DeviceCaps.int64_arithmetic).
ELEMENT_TYPES["int64"] = ElementType("I64", "int64_t", 8)
# The float8 formats (ONNX's FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2, FLOAT8E5M2FNUZ): a byte
# of bits each, which only the conversion kernel reads (vkumd/framework/float8.py).
FLOAT8_TYPES: dict[str, ElementType] = {
    "float8_e4m3fn": ElementType("F8E4M3FN", "uint8_t", 1),
    "float8_e4m3fnuz": ElementType("F8E4M3FNUZ", "uint8_t", 1),
    "float8_e5m2": ElementType("F8E5M2", "uint8_t", 1),
    "float8_e5m2fnuz": ElementType("F8E5M2FNUZ", "uint8_t", 1),
}
ELEMENT_TYPES.update(FLOAT8_TYPES)
# The packed types (ONNX's INT4, UINT4, INT2, UINT2, FLOAT4E2M1, FLOAT8E8M0): elements of
# ``bits`` bits packed low bits first into bytes, which only the packed conversion and the
# linear quantization kernels read (vkumd/framework/packed.py).
PACKED_TYPES: dict[str, ElementType] = {
    "int4": ElementType("I4", "uint8_t", 1, 4),
    "uint4": ElementType("U4", "uint8_t", 1, 4),
    "int2": ElementType("I2", "uint8_t", 1, 2),
    "uint2": ElementType("U2", "uint8_t", 1, 2),
    "float4_e2m1": ElementType("F4E2M1", "uint8_t", 1, 4),
    "float8_e8m0": ElementType("F8E8M0", "uint8_t", 1, 8),
}
ELEMENT_TYPES.update(PACKED_TYPES)
# bool (ONNX's BOOL, torch.bool): a byte holding 0 or 1. Kernels read it as uint8; a conversion
# to it stores whether the value is nonzero.
ELEMENT_TYPES["bool"] = ElementType("BOOL", "uint8_t", 1)
# Per type code: bytes of one element, and its GLSL storage type.
CODE_BYTES = {t.code: t.itemsize for t in ELEMENT_TYPES.values()}
CODE_GLSL = {t.code: t.glsl for t in ELEMENT_TYPES.values()}


def type_codes(dtypes: Iterable[str]) -> dict[str, str]:
    """``{dtype name: type code}`` for ``dtypes``, in their order."""
    return {name: ELEMENT_TYPES[name].code for name in dtypes}
