"""The four 8-bit float formats (ONNX's FLOAT8E4M3FN, FLOAT8E4M3FNUZ, FLOAT8E5M2,
FLOAT8E5M2FNUZ) and their exact conversions to and from float32 on the host.

vkumd stores a float8 element as its byte (``uint8`` bits); :meth:`Tensor.numpy` widens it to
float32, which holds every float8 value exactly. These functions are the numpy reference the
device casts (``shaders/include/elementwise_types.glsl``, ``f8_to_float``/``float_to_f8``)
are checked against bit for bit, and the host's own conversion of uploaded data.

Rounding is to nearest, ties to even. Values past the format's largest finite number follow
ONNX's Cast: with ``saturate`` they (and infinities) become the largest finite value of their
sign; without it E5M2 gives infinity and the other three NaN. The FNUZ formats have one NaN
(``0x80``, the bits of -0) and no -0: a negative value that rounds to zero is +0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Float8Format:
    """One float8 layout: sign, ``exponent`` bits, ``mantissa`` bits.

    Attributes:
        name: the vkumd dtype name (``"float8_e4m3fn"``...).
        exponent: exponent bits.
        mantissa: mantissa bits.
        bias: the exponent bias.
        fnuz: whether ``0x80`` is the only NaN and there is no -0 or infinity.
        has_inf: whether the all-ones exponent with zero mantissa is infinity (E5M2 alone).
        max_bits: the bits of the largest finite value (positive).
        nan_bits: the bits stored for NaN (positive sign; FNUZ: 0x80).
    """

    name: str
    exponent: int
    mantissa: int
    bias: int
    fnuz: bool
    has_inf: bool
    max_bits: int
    nan_bits: int

    @property
    def max(self) -> float:
        """The largest finite value."""
        return float(float8_bits_to_float32(np.array([self.max_bits], np.uint8), self)[0])


FORMATS: dict[str, Float8Format] = {
    "float8_e4m3fn": Float8Format("float8_e4m3fn", 4, 3, 7, False, False, 0x7E, 0x7F),
    "float8_e4m3fnuz": Float8Format("float8_e4m3fnuz", 4, 3, 8, True, False, 0x7F, 0x80),
    "float8_e5m2": Float8Format("float8_e5m2", 5, 2, 15, False, True, 0x7B, 0x7E),
    "float8_e5m2fnuz": Float8Format("float8_e5m2fnuz", 5, 2, 16, True, False, 0x7F, 0x80),
}


def float8_bits_to_float32(bits: np.ndarray, fmt: Float8Format) -> np.ndarray:
    """Widen float8 bit patterns (uint8) of ``fmt`` to float32, exactly."""
    b = np.asarray(bits, dtype=np.uint8).astype(np.int64)
    m = fmt.mantissa
    exp = (b >> m) & ((1 << fmt.exponent) - 1)
    frac = b & ((1 << m) - 1)
    magnitude = np.where(exp == 0, frac * 2.0 ** (1 - fmt.bias - m),
                         (1.0 + frac / (1 << m)) * np.exp2(exp - fmt.bias))
    value = np.where(b & 0x80, -magnitude, magnitude)
    if fmt.fnuz:
        value = np.where(b == 0x80, np.nan, value)
    elif fmt.has_inf:
        top = exp == (1 << fmt.exponent) - 1
        value = np.where(top & (frac != 0), np.nan, np.where(top, np.copysign(np.inf, value),
                                                             value))
    else:
        value = np.where((b & 0x7F) == 0x7F, np.nan, value)
    return value.astype(np.float32)


def float32_to_float8_bits(values: np.ndarray, fmt: Float8Format, saturate: bool
                           ) -> np.ndarray:
    """Round float32 ``values`` to ``fmt`` (nearest, ties to even) and return the uint8 bits.

    Args:
        values: the values (converted to float32 first, as the device reads them).
        fmt: the target format.
        saturate: out-of-range values and infinities become the largest finite value of
            their sign (ONNX Cast's ``saturate=1``, its default); else E5M2 overflows to
            infinity and the others to NaN.
    """
    x = np.ascontiguousarray(values, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.int64)
    sign = (bits >> 31) << 7
    mag = bits & 0x7FFFFFFF
    m = fmt.mantissa
    drop = 23 - m
    # Normal range: drop mantissa bits with round-to-nearest-even on the float32 bits (a carry
    # moves into the exponent, as it should), then rebias the exponent.
    rounded = (mag + (1 << (drop - 1)) - 1 + ((mag >> drop) & 1)) >> drop
    normal = rounded - ((127 - fmt.bias) << m)
    # Below the smallest normal: a multiple of the smallest subnormal, rounded to even (exact
    # in float64; a result of 1 << m is the smallest normal's bits, as it should be).
    min_normal = 2.0 ** (1 - fmt.bias)
    with np.errstate(invalid="ignore"):  # NaN (signalling ones too) takes the other branch
        absolute = np.abs(x.astype(np.float64))
        sub = np.rint(np.minimum(absolute, min_normal) * 2.0 ** (fmt.bias - 1 + m))
        code = np.where(absolute < min_normal, sub.astype(np.int64), normal)
    nan = np.isnan(x)
    over = (code > fmt.max_bits) & ~nan  # infinities included
    if saturate:
        code = np.where(over, fmt.max_bits, code)
    elif fmt.has_inf:
        code = np.where(over, 0x7C, code)
    else:
        code = np.where(over, fmt.nan_bits & 0x7F, code)
    if fmt.fnuz:
        # No -0: a value rounding to zero is +0; the one NaN is 0x80 (overflow included).
        out = np.where(code == 0, 0, code | sign)
        out = np.where(nan | (over & ~saturate), 0x80, out)
    else:
        out = np.where(nan, fmt.nan_bits | sign, code | sign)
    return out.astype(np.uint8)
