// Element types of the elementwise kernels, chosen with a define naming a vkumd dtype.
//
// A kernel includes this after `#define`-ing (or being given) the type codes it needs, e.g.
// `-DDTYPE=BF16`; the codes below turn those names into numbers that `#if` can compare.
// bfloat16 has no GLSL type: it is stored as uint16_t bits and computed in float32, rounding
// back to nearest-even exactly as vkumd.framework.dtypes.float32_to_bfloat16_bits does.
// The including kernel enables GL_EXT_shader_explicit_arithmetic_types and
// GL_EXT_shader_16bit_storage (extensions must precede any code).
#pragma once

#define F32 1
#define F16 2
#define BF16 3
#define I32 4
#define I8 5
#define U8 6
#define I16 7
#define U16 8
#define U32 9
#define U64 10
#define F64 11
// int64: int64_t with shaderInt64, else two 32-bit words (int64_emulated.glsl; EMU64 1).
#define I64 12
// bool: a byte of 0 or 1.
#define BOOL 13

// bfloat16 bits -> float32, exact.
float bf16_to_float(uint bits) {
    return uintBitsToFloat(bits << 16);
}

// float32 -> bfloat16 bits, round to nearest, ties to even; every NaN becomes 0x7FC0.
uint float_to_bf16(float value) {
    uint bits = floatBitsToUint(value);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        return 0x7FC0u;
    }
    return (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
}

// The same four at a time, for the kernels' vectorised (VEC 4) paths: componentwise, so the
// bits are the scalar conversions'.
vec4 bf16_to_float4(uvec4 bits) {
    return uintBitsToFloat(bits << 16);
}

uvec4 float_to_bf16_4(vec4 v) {
    return uvec4(float_to_bf16(v.x), float_to_bf16(v.y), float_to_bf16(v.z), float_to_bf16(v.w));
}

// The float8 formats (vkumd/framework/float8.py, whose numpy functions these match bit for
// bit): a byte of bits each, converted to and from float32 by the functions below. The codes
// are apart from the others' so that a kernel can test FLOAT8_CODE(x).
#define F8E4M3FN 20
#define F8E4M3FNUZ 21
#define F8E5M2 22
#define F8E5M2FNUZ 23
#define IS_FLOAT8(code) ((code) >= F8E4M3FN && (code) <= F8E5M2FNUZ)
// Per format (a compile-time constant after inlining): mantissa bits, exponent bias, the bits
// of the largest finite value, and whether it is an FNUZ format (0x80 its one NaN, no -0).
#define F8_MANT(f) (((f) == F8E4M3FN || (f) == F8E4M3FNUZ) ? 3u : 2u)
#define F8_BIAS(f) ((f) == F8E4M3FN ? 7 : (f) == F8E4M3FNUZ ? 8 : (f) == F8E5M2 ? 15 : 16)
#define F8_MAX_BITS(f) ((f) == F8E4M3FN ? 0x7Eu : (f) == F8E5M2 ? 0x7Bu : 0x7Fu)
#define F8_FNUZ(f) ((f) == F8E4M3FNUZ || (f) == F8E5M2FNUZ)

// 2^k for k in float32's normal range, exactly (exp2 need not be exact).
float f8_pow2(int k) {
    return uintBitsToFloat(uint(k + 127) << 23);
}

// float8 bits -> float32, exact (every float8 value is a float32 one).
float f8_to_float(uint bits, int f) {
    uint m = F8_MANT(f);
    uint e = (bits >> m) & ((1u << (7u - m)) - 1u);
    uint frac = bits & ((1u << m) - 1u);
    uint sign = (bits & 0x80u) << 24;
    if (F8_FNUZ(f)) {
        if (bits == 0x80u) {
            return uintBitsToFloat(0x7FC00000u);
        }
    } else if (f == F8E5M2) {
        if (e == 31u) {
            return uintBitsToFloat(sign | (frac == 0u ? 0x7F800000u : 0x7FC00000u));
        }
    } else if ((bits & 0x7Fu) == 0x7Fu) {
        return uintBitsToFloat(sign | 0x7FC00000u);
    }
    if (e == 0u) {
        // Subnormal: frac units of 2^(1 - bias - m), a power of two: exact in float32.
        float v = float(frac) * f8_pow2(1 - F8_BIAS(f) - int(m));
        return sign != 0u ? -v : v;
    }
    return uintBitsToFloat(sign | (uint(int(e) - F8_BIAS(f) + 127) << 23) | (frac << (23u - m)));
}

// float32 -> float8 bits, round to nearest, ties to even. saturate: out-of-range values and
// infinities become the largest finite value of their sign (ONNX Cast's default); else
// E5M2 gives infinity and the other formats NaN.
uint float_to_f8(float value, int f, bool saturate) {
    uint bits = floatBitsToUint(value);
    uint sign = (bits >> 24) & 0x80u;
    uint mag = bits & 0x7FFFFFFFu;
    uint m = F8_MANT(f);
    bool fnuz = F8_FNUZ(f);
    if (mag > 0x7F800000u) {  // NaN
        return fnuz ? 0x80u : sign | (f == F8E5M2 ? 0x7Eu : 0x7Fu);
    }
    uint code;
    float absolute = uintBitsToFloat(mag);
    if (absolute < f8_pow2(1 - F8_BIAS(f))) {
        // Below the smallest normal: whole units of the smallest subnormal, ties to even
        // (scaling by a power of two is exact; 1 << m is the smallest normal's bits).
        code = uint(roundEven(absolute * f8_pow2(F8_BIAS(f) - 1 + int(m))));
    } else {
        uint drop = 23u - m;
        uint rounded = (mag + (1u << (drop - 1u)) - 1u + ((mag >> drop) & 1u)) >> drop;
        code = rounded - (uint(127 - F8_BIAS(f)) << m);
    }
    if (code > F8_MAX_BITS(f)) {  // past the largest finite value (infinity included)
        if (saturate) {
            code = F8_MAX_BITS(f);
        } else {
            return fnuz ? 0x80u : sign | (f == F8E5M2 ? 0x7Cu : 0x7Fu);
        }
    }
    return (fnuz && code == 0u) ? 0u : (sign | code);
}
