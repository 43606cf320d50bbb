#version 450
// Rotary position embedding over x[batch, seq, heads, head_dim] (bshd): token s of row b is
// at position p = positions[b] + s, and pair i of every head turns by the angle
// p * theta^(-2i/head_dim). Pairs are (2i, 2i+1) ("adjacent", GGUF) or (i, i + head_dim/2)
// ("halves", Hugging Face). One invocation per (row, pair), looping over the heads, which
// share the angle; grid-stride over rows * half.
//
// The angle is reduced exactly, in fixed point, before any float32 rounding
// (include/rope_angle.glsl).
//
// x and out may be one buffer (in place): each invocation reads its two elements before it
// writes them.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "rope_angle.glsl"

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

void main() {
    uint total = pc.rows * pc.half_dim;
    uint head_dim = 2u * pc.half_dim;
    for (uint index = VKUMD_FIRST_INDEX; index < total; index += VKUMD_THREAD_COUNT) {
        uint row = index / pc.half_dim;
        uint i = index - row * pc.half_dim;
        uint b = row / pc.seq;
        int p = positions[b] + int(row - b * pc.seq);
        float theta = rope_angle(p, i, uvec2(pc.r_hi, pc.r_lo), uvec2(pc.c_hi, pc.c_lo));
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
