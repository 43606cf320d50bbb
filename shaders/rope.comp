#version 450
// Rotary position embedding over x[batch, seq, heads, head_dim] (bshd): token s of row b is
// at position p = positions[b] + s, and pair i of every head turns by the angle
// p * theta^(-2i/head_dim). Pairs are (2i, 2i+1) ("adjacent", GGUF) or (i, i + head_dim/2)
// ("halves", Hugging Face). One invocation per (row, pair), looping over the heads, which
// share the angle; grid-stride over rows * half.
//
// The angle is reduced exactly, in fixed point, before any float32 rounding: a float32
// p * inv_freq is off by up to p * 2^-24 radians (5e-4 at p = 8192), and sin/cos of a large
// argument lose more. The host passes r = theta^(-2/head_dim) and 1/(2 pi) as 64-bit binary
// fractions (0.64 fixed point); f_i = r^i / (2 pi) is formed here by squaring (a 64-bit
// product truncates at 2^-64), and frac(p * f_i), the angle in turns, is read from the low
// words of the 96-bit integer product. Only that fraction, in [-1/2, 1/2), goes through
// float32: the angle's error is then below 2e-7 radians at any position.
//
// x and out may be one buffer (in place): each invocation reads its two elements before it
// writes them.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#if DTYPE == F32
#define ELEM float
#define TO_F(x) (x)
#define FROM_F(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define TO_F(x) float(x)
#define FROM_F(v) float16_t(v)
#elif DTYPE == BF16
#define ELEM uint16_t
#define TO_F(x) bf16_to_float(uint(x))
#define FROM_F(v) uint16_t(float_to_bf16(v))
#else
#error "DTYPE must be F32, F16 or BF16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer Positions { int positions[]; };
layout(std430, binding = 2) buffer Out { ELEM result[]; };

layout(push_constant) uniform Rope {
    uint rows;     // batch * seq
    uint seq;
    uint heads;
    uint half_dim; // head_dim / 2: pairs per head
    uint halves;   // 1: pairs (i, i + half_dim); 0: (2i, 2i + 1)
    uint r_hi;     // r = theta^(-2/head_dim) as a 0.64 fraction: r_hi * 2^-32 + r_lo * 2^-64
    uint r_lo;
    uint c_hi;     // 1 / (2 pi), the same way
    uint c_lo;
} pc;

// The high 64 bits of the 128-bit product of two 0.64 fractions (truncated).
uvec2 mul_fraction(uvec2 a, uvec2 b) {  // .x high word, .y low word
    uint hh, hl, h1, l1, h2, l2, h0, l0;
    umulExtended(a.x, b.x, hh, hl);
    umulExtended(a.x, b.y, h1, l1);
    umulExtended(a.y, b.x, h2, l2);
    umulExtended(a.y, b.y, h0, l0);
    uint c1, c2;
    uint middle = uaddCarry(l1, l2, c1);
    middle = uaddCarry(middle, h0, c2);
    uint carry = c1 + c2;
    uint c3, c4, c5;
    uint low = uaddCarry(hl, h1, c3);
    low = uaddCarry(low, h2, c4);
    low = uaddCarry(low, carry, c5);
    return uvec2(hh + c3 + c4 + c5, low);
}

// The angle of pair i at position p, in radians, in [-pi, pi).
float angle(int p, uint i) {
    uvec2 f = uvec2(pc.c_hi, pc.c_lo);
    uvec2 base = uvec2(pc.r_hi, pc.r_lo);
    for (uint e = i; e != 0u; e >>= 1) {
        if ((e & 1u) != 0u) {
            f = mul_fraction(f, base);
        }
        base = mul_fraction(base, base);
    }
    // |p| * f = hi1 * 2^32 + (lo1 + hi0) + lo0 * 2^-32 in units of 2^-32 turns: the integer
    // turns (hi1 and the carry out of lo1 + hi0) drop out, the top fraction word remains.
    uint a = uint(abs(p));
    uint hi1, lo1, hi0, lo0;
    umulExtended(a, f.x, hi1, lo1);
    umulExtended(a, f.y, hi0, lo0);
    int turns = int(lo1 + hi0);  // the fraction as [-1/2, 1/2)
    float t = float(turns) * (1.0 / 4294967296.0);
    return (p < 0 ? -t : t) * 6.2831853071795865;
}

void main() {
    uint total = pc.rows * pc.half_dim;
    uint head_dim = 2u * pc.half_dim;
    for (uint index = VKUMD_FIRST_INDEX; index < total; index += VKUMD_THREAD_COUNT) {
        uint row = index / pc.half_dim;
        uint i = index - row * pc.half_dim;
        uint b = row / pc.seq;
        int p = positions[b] + int(row - b * pc.seq);
        float theta = angle(p, i);
        float c = cos(theta);
        float s = sin(theta);
        uint first = pc.halves != 0u ? i : 2u * i;
        uint second = pc.halves != 0u ? i + pc.half_dim : 2u * i + 1u;
        uint start = row * pc.heads * head_dim;
        for (uint h = 0u; h < pc.heads; ++h) {
            uint at = start + h * head_dim;
            float x0 = TO_F(x[at + first]);
            float x1 = TO_F(x[at + second]);
            result[at + first] = FROM_F(x0 * c - x1 * s);
            result[at + second] = FROM_F(x0 * s + x1 * c);
        }
    }
}
