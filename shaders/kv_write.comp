#version 450
// The key/value cache update: cache[b, positions[b] + s, :, :] = new[b, s, :, :] for every
// slot b and new token s, converted to the cache's type (float32 arithmetic, one rounding).
// cache is [slots, max_len, row] and new [slots, seq, row] with row = kv_heads * head_dim;
// grid-stride over new's elements. A token whose position falls outside [0, max_len) is
// dropped: the host cannot see device-resident positions without a round trip, and nothing
// may land outside the cache.
//
// ROPE 1 rotates new as it is written (the keys' rotary embedding at their positions, as
// rope.comp computes it; pairs (2i, 2i+1) or (i, i + half_dim) of each head): each
// invocation then owns one (token, pair) and loops over the heads, which share its angle;
// the rotated keys never make a trip to memory.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "rope_angle.glsl"

#ifndef CACHE
#define CACHE F32
#endif
#ifndef NEW
#define NEW CACHE
#endif
#ifndef ROPE
#define ROPE 0
#endif

#if CACHE == F32
#define CACHE_ELEM float
#define TO_CACHE(v) (v)
#elif CACHE == F16
#define CACHE_ELEM float16_t
#define TO_CACHE(v) float16_t(v)
#else
#error "CACHE must be F32 or F16"
#endif

#if NEW == F32
#define NEW_ELEM float
#define NEW_FLOAT(x) (x)
#elif NEW == F16
#define NEW_ELEM float16_t
#define NEW_FLOAT(x) float(x)
#elif NEW == BF16
#define NEW_ELEM uint16_t
#define NEW_FLOAT(x) bf16_to_float(uint(x))
#else
#error "NEW must be F32, F16 or BF16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) buffer Cache { CACHE_ELEM cache[]; };
layout(std430, binding = 1) readonly buffer New { NEW_ELEM new_rows[]; };
layout(std430, binding = 2) readonly buffer Positions { int positions[]; };

layout(push_constant) uniform KvWrite {
    uint total;    // slots * seq * row: new's elements (ROPE 1: slots * seq * half_dim)
    uint seq;
    uint row;      // kv_heads * head_dim
    uint max_len;  // the cache's positions per slot
    uint half_dim; // ROPE 1: head_dim / 2, and the rotation as rope.comp's push constants
    uint halves;
    uint r_hi;
    uint r_lo;
    uint c_hi;
    uint c_lo;
} pc;

#if ROPE
void main() {
    uint per_slot = pc.seq * pc.half_dim;
    uint head_dim = 2u * pc.half_dim;
    uint heads = pc.row / head_dim;
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint b = index / per_slot;
        uint rest = index - b * per_slot;
        uint s = rest / pc.half_dim;
        uint i = rest - s * pc.half_dim;
        int p = positions[b] + int(s);
        if (p < 0 || uint(p) >= pc.max_len) {
            continue;
        }
        float theta = rope_angle(p, i, uvec2(pc.r_hi, pc.r_lo), uvec2(pc.c_hi, pc.c_lo));
        float c = cos(theta);
        float sn = sin(theta);
        uint first = pc.halves != 0u ? i : 2u * i;
        uint second = first + (pc.halves != 0u ? pc.half_dim : 1u);
        uint from = (b * pc.seq + s) * pc.row;
        uint to = (b * pc.max_len + uint(p)) * pc.row;
        for (uint h = 0u; h < heads; ++h) {
            uint at = h * head_dim;
            float x0 = NEW_FLOAT(new_rows[from + at + first]);
            float x1 = NEW_FLOAT(new_rows[from + at + second]);
            cache[to + at + first] = TO_CACHE(x0 * c - x1 * sn);
            cache[to + at + second] = TO_CACHE(x0 * sn + x1 * c);
        }
    }
}
#else
void main() {
    uint per_slot = pc.seq * pc.row;
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint b = index / per_slot;
        uint rest = index - b * per_slot;
        uint s = rest / pc.row;
        uint e = rest - s * pc.row;
        int p = positions[b] + int(s);
        if (p < 0 || uint(p) >= pc.max_len) {
            continue;
        }
        cache[(b * pc.max_len + uint(p)) * pc.row + e] = TO_CACHE(NEW_FLOAT(new_rows[index]));
    }
}
#endif
