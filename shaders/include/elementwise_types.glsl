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
