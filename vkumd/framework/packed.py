"""The packed element types (ONNX's INT4, UINT4, INT2, UINT2, FLOAT4E2M1 and FLOAT8E8M0):
their bit layout and exact conversions to and from numpy on the host.

A tensor of ``n`` elements of ``bits`` bits takes ``ceil(n * bits / 8)`` bytes: element ``i``
is bits ``(i * bits) % 8`` upwards of byte ``i * bits // 8`` (ONNX packs the low bits first);
the unused high bits of the last byte are zero. :meth:`Tensor.numpy` unpacks to int8 (int4,
int2), uint8 (uint4, uint2) or float32 (float4_e2m1, float8_e8m0, which hold only float32
values). These functions are the numpy reference the device conversions
(``shaders/include/packed_types.glsl``) are checked against bit for bit.

Conversion rules (ONNX's Cast, whose reference is ``ml_dtypes``' ``astype``):

- to an integer type: from an integer, the low bits are kept (wrapping); from a float, the
  value truncated toward zero when that fits, else 0 (NaN and infinities too);
- to float4_e2m1 (sign, 2 exponent bits, 1 mantissa bit; values 0, 0.5, 1, 1.5, 2, 3, 4, 6):
  nearest, ties to even, saturating at +-6; NaN becomes -0 (+NaN) or +0 (-NaN) as
  ``ml_dtypes`` stores it;
- to float8_e8m0 (an exponent byte: ``2 ** (e - 127)``, 0xFF NaN, no sign or zero): ONNX's
  ``round_mode`` ``"up"`` (its default), ``"nearest"`` or ``"down"`` on float32's bits, the
  sign ignored; with ``saturate`` (the default) no rounding passes 2**127; NaN and infinity
  become NaN.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vkumd.compiler.kernels.type_codes import PACKED_TYPES


@dataclass(frozen=True)
class PackedFormat:
    """One packed type.

    Attributes:
        name: the vkumd dtype name.
        bits: bits per element.
        signed: an integer type holding negative values (int4, int2).
        is_int: an integer type.
        low, high: an integer type's range.
        numpy: the numpy dtype of unpacked values.
    """

    name: str
    bits: int
    signed: bool
    is_int: bool

    @property
    def low(self) -> int:
        """The smallest value of an integer type."""
        return -(1 << (self.bits - 1)) if self.signed else 0

    @property
    def high(self) -> int:
        """The largest value of an integer type."""
        return (1 << (self.bits - 1)) - 1 if self.signed else (1 << self.bits) - 1

    @property
    def numpy(self) -> np.dtype:
        """The numpy type of unpacked values."""
        if not self.is_int:
            return np.dtype(np.float32)
        return np.dtype(np.int8 if self.signed else np.uint8)


FORMATS: dict[str, PackedFormat] = {
    name: PackedFormat(name, t.bits, name in ("int4", "int2"), not name.startswith("float"))
    for name, t in PACKED_TYPES.items()
}
# ml_dtypes' names of the same types (arrays of them are unpacked on upload).
ML_DTYPES_NAMES = {"int4": "int4", "uint4": "uint4", "int2": "int2", "uint2": "uint2",
                   "float4_e2m1fn": "float4_e2m1", "float8_e8m0fnu": "float8_e8m0"}
E8M0_ROUND_MODES = ("up", "nearest", "down")
# float4_e2m1's values by code (the sign is bit 3).
_F4_VALUES = np.array([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0], np.float32)


def packed_nbytes(count: int, bits: int) -> int:
    """Bytes that ``count`` elements of ``bits`` bits take."""
    return -(-count * bits // 8)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack ``codes`` (each's low ``bits`` bits, flattened row-major) into bytes, low bits
    first; the last byte's unused bits are zero."""
    flat = np.asarray(codes).reshape(-1).astype(np.uint8) & np.uint8((1 << bits) - 1)
    if bits == 8:
        return flat.copy()
    per = 8 // bits
    padded = np.zeros(packed_nbytes(flat.size, bits) * per, np.uint8)
    padded[:flat.size] = flat
    lanes = padded.reshape(-1, per).astype(np.uint16) << (np.arange(per, dtype=np.uint16) * bits)
    return np.bitwise_or.reduce(lanes, axis=1).astype(np.uint8)


def unpack(data: np.ndarray, bits: int, count: int) -> np.ndarray:
    """The ``count`` codes (uint8, each ``bits`` bits) packed in ``data``'s bytes."""
    raw = np.asarray(data, np.uint8).reshape(-1)
    if bits == 8:
        return raw[:count].copy()
    per = 8 // bits
    lanes = (raw[:, None] >> (np.arange(per, dtype=np.uint8) * bits)) & ((1 << bits) - 1)
    return lanes.reshape(-1)[:count].astype(np.uint8)


def codes_to_values(codes: np.ndarray, fmt: PackedFormat) -> np.ndarray:
    """Unpacked codes (uint8) to the values users see (``fmt.numpy``)."""
    c = np.asarray(codes, np.uint8)
    if fmt.is_int:
        if fmt.signed:
            shift = 8 - fmt.bits
            return ((c << shift).view(np.int8) >> shift).astype(np.int8)
        return c.copy()
    if fmt.name == "float4_e2m1":
        magnitude = _F4_VALUES[c & 7]
        return np.where(c & 8, -magnitude, magnitude).astype(np.float32)
    # float8_e8m0: 2 ** (e - 127); e = 0 is float32's subnormal 2**-127, 0xFF NaN.
    bits = np.where(c == 0, 0x00400000, c.astype(np.uint32) << 23).astype(np.uint32)
    bits = np.where(c == 0xFF, 0x7FC00000, bits).astype(np.uint32)
    return bits.view(np.float32)


def ints_to_codes(values: np.ndarray, fmt: PackedFormat) -> np.ndarray:
    """Integers to an integer type's codes: the low bits (wrapping, as ONNX's Cast between
    integer types)."""
    return (np.asarray(values).astype(np.int64) & ((1 << fmt.bits) - 1)).astype(np.uint8)


def floats_to_codes(values: np.ndarray, fmt: PackedFormat, saturate: bool = True,
                    round_mode: str = "up") -> np.ndarray:
    """Float values (read as float32) to ``fmt``'s codes by the module's rules."""
    x = np.ascontiguousarray(values, dtype=np.float32)
    if fmt.is_int:
        with np.errstate(invalid="ignore"):
            whole = np.trunc(x.astype(np.float64))
            fits = (whole >= fmt.low) & (whole <= fmt.high)
            return ints_to_codes(np.where(fits, whole, 0).astype(np.int64), fmt)
    bits = x.view(np.uint32)
    if fmt.name == "float4_e2m1":
        return _float32_to_f4(x, bits)
    return _float32_to_e8m0(bits, saturate, round_mode)


def _float32_to_f4(x: np.ndarray, bits: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):  # signalling NaN payloads
        a = np.abs(x.astype(np.float64))
    # Nearest value; on a tie the even code (a multiple of 2): the thresholds below are the
    # midpoints, inclusive where the lower neighbour's code is even.
    code = np.select([a <= 0.25, a < 0.75, a <= 1.25, a < 1.75, a <= 2.5, a < 3.5, a <= 5.0],
                     [0, 1, 2, 3, 4, 5, 6], 7)
    sign = (bits >> 31).astype(np.uint8) << 3
    nan = np.isnan(x)
    return np.where(nan, sign ^ 8, code | sign).astype(np.uint8)


def _float32_to_e8m0(bits: np.ndarray, saturate: bool, round_mode: str) -> np.ndarray:
    if round_mode not in E8M0_ROUND_MODES:
        raise ValueError(f"round_mode {round_mode!r}")
    b = bits.astype(np.int64)
    exponent = (b >> 23) & 0xFF
    special = exponent == 0xFF
    if round_mode == "nearest":
        guard = (b >> 22) & 1
        up = (guard == 1) & ((((b >> 21) & 1) == 1) | ((b & 0x1FFFFF) != 0) | (exponent > 0))
    elif round_mode == "up":
        up = (b & 0x7FFFFF) != 0
    else:
        up = np.zeros_like(special)
    up = up & ~special
    if saturate:
        up = up & (exponent != 0xFE)
    return np.where(special, 0xFF, exponent + up).astype(np.uint8)


def to_codes(values: np.ndarray, fmt: PackedFormat) -> np.ndarray:
    """Host data (already checked by :func:`vkumd.framework.dtypes.host_array`) to codes:
    integers wrap into an integer type (they were checked to fit), floats convert
    (float8_e8m0 to nearest, not saturating, as ``ml_dtypes``' ``astype`` for positive values,
    so every value it holds uploads exactly)."""
    array = np.asarray(values)
    if fmt.is_int and array.dtype.kind in "iub":
        return ints_to_codes(array, fmt)
    return floats_to_codes(array, fmt, saturate=False, round_mode="nearest")
