"""Elementwise kernels: binary ops, conversions and scaling, and fill."""

from __future__ import annotations

from vkumd.compiler.kernels.limits import (
    BINARY_DTYPES,
    CAST_BYTE_DTYPES,
    ELEMENTWISE_DTYPES,
    ELEMENTWISE_MAX_DIMS,
    FLOAT8_DTYPES,
    INT64_DTYPES,
    WIDE_DTYPES,
)
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

_DIMS = ELEMENTWISE_MAX_DIMS
# a_offset and b_offset: where a view read in place starts in its bound allocation (0 for
# tensors bound as they are); strides are two's complement, so a negative step wraps back.
BINARY_PUSH = PushLayout("n:u32", "ndim:u32", f"shape:u32[{_DIMS}]", f"a_stride:u32[{_DIMS}]",
                         f"b_stride:u32[{_DIMS}]", "a_offset:u32", "b_offset:u32")
UNARY_PUSH = PushLayout("n:u32", "ndim:u32", f"shape:u32[{_DIMS}]", f"stride:u32[{_DIMS}]",
                        "alpha:u32", "src_offset:u32", "dst_offset:u32",
                        f"dst_stride:u32[{_DIMS}]")
FILL_PUSH = PushLayout("n:u32", "bits:u32")

ELEMENTWISE_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3, "div_floor": 4, "div_trunc": 5,
                   "lt": 6, "le": 7, "gt": 8, "ge": 9, "eq": 10, "ne": 11, "remainder": 12,
                   "fmod": 13, "pow": 14, "max": 15, "min": 16, "and": 17, "or": 18,
                   "xor": 19, "shl": 20, "shr": 21}
# lt … ne are comparisons: 1 or 0 in the operands' type (shaders/elementwise_binary.comp).
# The dtypes the elementwise kernels take and their type codes.
ELEMENTWISE_CODES = type_codes(ELEMENTWISE_DTYPES)
ELEMENTWISE_TYPES = tuple(ELEMENTWISE_CODES.values())
# The binary kernel's: those and the 8-bit integers.
BINARY_CODES = type_codes(BINARY_DTYPES)
BINARY_TYPES = tuple(BINARY_CODES.values())
INTEGER_TYPES = ("I32", "I8", "U8", "I16", "U16", "U32", "U64")
INTEGER_TYPES = (*INTEGER_TYPES, "I64")
# int64 without shaderInt64 (DeviceCaps.int64_arithmetic "emulated"): the ops its two-word
# variants compute (EMU64 1, shaders/include/int64_emulated.glsl); the others are refused
# naming shaderInt64. Its variants are scalar (VEC 1), and cast converts it to and from
# EMULATED_CAST_TYPES.
INT64_EMULATED_OPS = ("add", "sub", "mul", "lt", "le", "gt", "ge", "eq", "ne", "max", "min",
                      "and", "or", "xor", "shl", "shr")
EMULATED_CAST_TYPES = ("F32", "F16", "BF16", "F64", "I32", "U32", "I16", "U16")
INT64_CODE = "I64"


def int64_emulated(caps: DeviceCaps, *codes: str | None) -> bool:
    """Whether a kernel on type codes ``codes`` computes int64 in two 32-bit words on
    ``caps`` (the planners add ``EMU64`` 1 and take the scalar variant)."""
    return caps.int64_arithmetic == "emulated" and INT64_CODE in codes
# Ops the binary kernel runs for integers only (floats take the generated kernels, whose max
# and min keep NaN; the bitwise ops have no float meaning).
INTEGER_OPS = ("max", "min", "and", "or", "xor", "shl", "shr")
# float64 runs in the binary kernel alone (the generated kernels compute in float32): max
# and min too, keeping NaN; pow is not offered (GLSL has no double pow()).
FLOAT64_OPS = tuple(name for name in ELEMENTWISE_OPS
                    if name not in ("pow", "and", "or", "xor", "shl", "shr"))
# A comparison may store its 1/0 as uint8 instead (OUT U8: a graph's bool mask).
COMPARISONS = ("lt", "le", "gt", "ge", "eq", "ne")
MASK_CODE = "U8"
# The ops the binary kernel runs on bool operands, read as uint8 0/1 (whose comparisons,
# and, or and xor are bool's): a bool tensor's bytes are a uint8 tensor's.
BOOL_BINARY_OPS = (*COMPARISONS, "and", "or", "xor")


def _elementwise_types(caps: DeviceCaps) -> list[str]:
    """The element types usable on ``caps``: float16 and bfloat16 need 16-bit storage."""
    return [t for t in ELEMENTWISE_TYPES if caps.storage_16bit or t not in ("F16", "BF16")]


def wide_types(caps: DeviceCaps) -> list[str]:
    """The wider and unsigned integer and float64 codes usable on ``caps``: int16 and uint16
    need 16-bit storage, uint64 ``shaderInt64``, float64 ``shaderFloat64``."""
    return ((["I16", "U16"] if caps.storage_16bit else []) + ["U32"]
            + (["U64"] if caps.shader_int64 else []) + (["F64"] if caps.shader_float64 else [])
            + [INT64_CODE])


def _binary_types(caps: DeviceCaps) -> list[str]:
    """The binary kernel's types on ``caps``: the 8-bit integers need 8-bit storage."""
    return (_elementwise_types(caps) + (["I8", "U8"] if caps.storage_8bit else [])
            + wide_types(caps))


def _takes(caps: DeviceCaps, dtype: str, name: str) -> bool:
    """Whether the binary kernel offers op ``name`` on type code ``dtype``."""
    if dtype == "F64":
        return name in FLOAT64_OPS
    if dtype == INT64_CODE and caps.int64_arithmetic == "emulated" and (
            name not in INT64_EMULATED_OPS):
        return False
    # Integers have no true division (ops refuse it); they divide rounding down or toward
    # zero.
    return (name != "div" or dtype not in INTEGER_TYPES) and (
        name not in INTEGER_OPS or dtype in INTEGER_TYPES)


def _elementwise_variants(caps: DeviceCaps) -> list[dict]:
    # Each scalar variant and its vectorised twin for same-shape operands (VEC 4).
    plain = [{"DTYPE": dtype, "OP": op, "VEC": vec, "BCAST": 0, WORKGROUP: 64}
             for dtype in _binary_types(caps) for name, op in ELEMENTWISE_OPS.items()
             if _takes(caps, dtype, name) for vec in (1, 4)]
    masks = [{"DTYPE": dtype, "OP": ELEMENTWISE_OPS[name], "OUT": MASK_CODE, "VEC": vec,
              "BCAST": 0, WORKGROUP: 64}
             for dtype in _binary_types(caps) for name in COMPARISONS for vec in (1, 4)]
    return _emulated(caps, plain + (masks if caps.storage_8bit else []))


def _emulated(caps: DeviceCaps, variants: list[dict]) -> list[dict]:
    """``variants`` with the int64 ones made the emulated kind where ``caps`` needs it
    (``EMU64`` 1, scalar only)."""
    kept = []
    for v in variants:
        if int64_emulated(caps, v.get("DTYPE"), v.get("SRC"), v.get("DST")):
            if v["VEC"] != 1:
                continue
            v = {**v, "EMU64": 1}
        kept.append(v)
    return kept


ELEMENTWISE_BINARY = register(Kernel(
    name="elementwise_binary",
    source="elementwise_binary.comp",
    buffers=3,
    push=BINARY_PUSH,
    defines={"DTYPE": BINARY_TYPES, "OUT": (MASK_CODE,), "EMU64": (0, 1)},
    spec_constants={WORKGROUP: 0, "OP": 1, "VEC": 2, "BCAST": 3},
    variants=_elementwise_variants,
))


ELEMENTWISE_UNARY_OPS = {"convert": 0, "scale": 1}
# The float8 formats' codes: the unary kernel converts them to and from the float types.
FLOAT8_CODES = type_codes(FLOAT8_DTYPES)
FLOAT8_TYPES = tuple(FLOAT8_CODES.values())


def _float8_pairs(caps: DeviceCaps) -> list[tuple[str, str]]:
    """(SRC, DST) of the float8 conversions on ``caps`` (8-bit storage needed): each format
    to and from each float type and each other format."""
    if not caps.storage_8bit:
        return []
    floats = [t for t in _elementwise_types(caps) if t != "I32"]
    pairs = [(f8, t) for f8 in FLOAT8_TYPES for t in floats + list(FLOAT8_TYPES)]
    return pairs + [(t, f8) for f8 in FLOAT8_TYPES for t in floats]
# The types cast and copy take: the elementwise ones, the wider ones, int64 and the 8-bit
# integers (converted, not scaled).
CAST_CODES = type_codes((*ELEMENTWISE_DTYPES, *WIDE_DTYPES, *INT64_DTYPES, *CAST_BYTE_DTYPES))
CAST_BYTE_TYPES = tuple(type_codes(CAST_BYTE_DTYPES).values())
# bool converts to and from each of those (nonzero is True; True is 1); it needs 8-bit
# storage.
BOOL_CODES = type_codes(("bool",))


def _bool_pairs(caps: DeviceCaps, every: list[str]) -> list[tuple[str, str]]:
    """(SRC, DST) of the bool conversions on ``caps``: bool to and from each type in
    ``every``, and bool to bool (a copy)."""
    if not caps.storage_8bit:
        return []
    return [("BOOL", "BOOL")] + [("BOOL", t) for t in every] + [(t, "BOOL") for t in every]


def _elementwise_unary_variants(caps: DeviceCaps) -> list[dict]:
    types = _elementwise_types(caps)
    every = types + wide_types(caps) + (list(CAST_BYTE_TYPES) if caps.storage_8bit else [])
    converts = [{"SRC": src, "DST": dst, "OP": 0, WORKGROUP: 64} for src in every for dst in every
                if not int64_emulated(caps, src, dst)
                or {src, dst} <= {INT64_CODE, *EMULATED_CAST_TYPES}]
    converts += [{"SRC": src, "DST": dst, "OP": 0, WORKGROUP: 64}
                 for src, dst in _float8_pairs(caps) + _bool_pairs(caps, every)
                 if not int64_emulated(caps, src, dst)]  # the emulated int64 has no bool
    scales = [{"SRC": t, "DST": t, "OP": 1, WORKGROUP: 64} for t in types]
    # Each scalar variant and its vectorised twin for contiguous operands (VEC 4, BCAST 0).
    return _emulated(caps, [{**v, "VEC": vec, "BCAST": 0} for v in converts + scales
                            for vec in (1, 4)])


ELEMENTWISE_UNARY = register(Kernel(
    name="elementwise_unary",
    source="elementwise_unary.comp",
    buffers=2,
    push=UNARY_PUSH,
    defines={"SRC": tuple(CAST_CODES.values()) + FLOAT8_TYPES + tuple(BOOL_CODES.values()),
             "DST": tuple(CAST_CODES.values()) + FLOAT8_TYPES + tuple(BOOL_CODES.values()),
             "EMU64": (0, 1)},
    spec_constants={WORKGROUP: 0, "OP": 1, "VEC": 2, "BCAST": 3},
    variants=_elementwise_unary_variants,
))


def storage_widths(caps: DeviceCaps) -> list[int]:
    """Element widths in bits that bit-copying kernels (fill, gather, permute) can store."""
    return [32] + ([16] if caps.storage_16bit else [])


def _elementwise_fill_variants(caps: DeviceCaps) -> list[dict]:
    return [{"WIDTH": width, "VEC": vec, WORKGROUP: 64} for width in storage_widths(caps)
            for vec in (1, 4)]


ELEMENTWISE_FILL = register(Kernel(
    name="elementwise_fill",
    source="elementwise_fill.comp",
    buffers=1,
    push=FILL_PUSH,
    defines={"WIDTH": (32, 16)},
    spec_constants={WORKGROUP: 0, "VEC": 1},
    variants=_elementwise_fill_variants,
))
