// The packed element types (vkumd/framework/packed.py, whose numpy functions these match bit
// for bit): elements of PACKED_BITS bits packed low bits first into bytes, read from a
// uint8_t array by element index. The codes are apart from elementwise_types.glsl's.
// The including kernel enables GL_EXT_shader_explicit_arithmetic_types and
// GL_EXT_shader_8bit_storage.
#pragma once

#define I4 30
#define U4 31
#define I2 32
#define U2 33
#define F4E2M1 34
#define F8E8M0 35
#define IS_PACKED(c) ((c) >= I4 && (c) <= F8E8M0)
#define PACKED_INT(c) ((c) >= I4 && (c) <= U2)
#define PACKED_SIGNED(c) ((c) == I4 || (c) == I2)
#define PACKED_BITS(c) (((c) == I2 || (c) == U2) ? 2u : (c) == F8E8M0 ? 8u : 4u)
#define PACKED_MASK(c) ((1u << PACKED_BITS(c)) - 1u)
// Element i of a packed array: its byte is (i * bits) / 8, inside a buffer of
// ceil(n * bits / 8) bytes for every i < n.
#define PACKED_READ(arr, i, c) \
    ((uint(arr[((i) * PACKED_BITS(c)) >> 3u]) >> (((i) * PACKED_BITS(c)) & 7u)) & PACKED_MASK(c))

// An integer type's field as its value (sign-extended for int4 and int2).
int packed_int(uint field, int c) {
    uint shift = 32u - PACKED_BITS(c);
    return PACKED_SIGNED(c) ? (int(field << shift) >> shift) : int(field);
}

// A field as float32, exactly.
float packed_to_float(uint field, int c) {
    if (PACKED_INT(c)) {
        return float(packed_int(field, c));
    }
    if (c == F4E2M1) {
        uint e = (field >> 1u) & 3u;
        float m = float(field & 1u) * 0.5;
        float magnitude = e == 0u ? m : (1.0 + m) * float(1u << (e - 1u));
        return (field & 8u) != 0u ? -magnitude : magnitude;
    }
    // F8E8M0: 2^(e - 127); 0 is float32's subnormal 2^-127, 0xFF NaN.
    if (field == 0xFFu) {
        return uintBitsToFloat(0x7FC00000u);
    }
    return uintBitsToFloat(field == 0u ? 0x00400000u : field << 23u);
}

// An integer as an integer type's field: its low bits (ONNX's integer narrowing wraps).
uint int_to_packed(int value, int c) {
    return uint(value) & PACKED_MASK(c);
}

// float32 (its bits) as a field of c. Integer types: the value truncated toward zero when it
// fits, else 0 (NaN too). F4E2M1: nearest, ties to even, saturating at 6; NaN is the zero of
// the other sign. F8E8M0: mode bit 0 saturates, bits 1-2 are the rounding (0 up, 1 nearest,
// 2 down), on float32's bits with the sign ignored, as ONNX's to_float8e8m0.
uint float_to_packed(uint bits, int c, uint mode) {
    float value = uintBitsToFloat(bits);
    bool nan = (bits & 0x7FFFFFFFu) > 0x7F800000u;
    if (PACKED_INT(c)) {
        float whole = trunc(value);
        float low = PACKED_SIGNED(c) ? -float(1u << (PACKED_BITS(c) - 1u)) : 0.0;
        float high = PACKED_SIGNED(c) ? float((1u << (PACKED_BITS(c) - 1u)) - 1u)
                                      : float(PACKED_MASK(c));
        return (nan || whole < low || whole > high) ? 0u : int_to_packed(int(whole), c);
    }
    if (c == F4E2M1) {
        uint sign = (bits >> 28u) & 8u;
        if (nan) {
            return sign ^ 8u;
        }
        float a = abs(value);
        uint code = a <= 0.25 ? 0u : a < 0.75 ? 1u : a <= 1.25 ? 2u : a < 1.75 ? 3u
                  : a <= 2.5 ? 4u : a < 3.5 ? 5u : a <= 5.0 ? 6u : 7u;
        return code | sign;
    }
    uint exponent = (bits >> 23u) & 0xFFu;
    if (exponent == 0xFFu) {
        return 0xFFu;
    }
    uint round_mode = (mode >> 1u) & 3u;
    bool up = false;
    if (round_mode == 0u) {
        up = (bits & 0x7FFFFFu) != 0u;
    } else if (round_mode == 1u) {
        up = ((bits >> 22u) & 1u) != 0u
             && (((bits >> 21u) & 1u) != 0u || (bits & 0x1FFFFFu) != 0u || exponent > 0u);
    }
    if ((mode & 1u) != 0u && exponent == 0xFEu) {
        up = false;
    }
    return exponent + (up ? 1u : 0u);
}
