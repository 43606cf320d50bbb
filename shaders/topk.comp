#version 450
// The k largest (or smallest) entries of each row, in order, with their indices; or, built
// with HARDMAX 1, the row's one-hot argmax. One workgroup per row.
// Each entry gets a 32-bit key that orders as the values do: float bits with the sign flipped
// (negatives reversed), int32 with its sign bit flipped; NaN is made the one positive quiet
// NaN, so it sorts above +inf (numpy's argmax and sort treat NaN as the largest), and -0.0
// is made +0.0 (they are equal). For the smallest entries the keys are inverted. Round j picks
// the largest (key, lowest index) among the entries that come after round j-1's pick in that
// order (a lower key, or the same key at a higher index): ties go to the lower index, as
// ONNX's TopK asks, and no entry is picked twice without keeping per-entry state. That is k
// passes over the row, which suits small k (the planner's limit).
// Defines: DTYPE (F32, F16, BF16, I32), HARDMAX (0 top-k, 1 one-hot of the first maximum).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef HARDMAX
#define HARDMAX 0
#endif
#define TOPK_MAX_WORKGROUP 256

#if DTYPE == F32
#define ELEM float
#define BITS(v) floatBitsToUint(v)
#define ONE 1.0
#elif DTYPE == F16
#define ELEM float16_t
#define BITS(v) floatBitsToUint(float(v))
#define ONE float16_t(1.0)
#elif DTYPE == BF16
#define ELEM uint16_t
#define BITS(v) (uint(v) << 16)
#define ONE uint16_t(0x3F80u)
#elif DTYPE == I32
#define ELEM int
#define ONE 1
#else
#error "DTYPE must be F32, F16, BF16 or I32"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Values { ELEM values[]; };
layout(std430, binding = 2) writeonly buffer Indices { int indices[]; };

layout(push_constant) uniform Shape {
    uint rows;
    uint cols;
    uint k;
    uint largest;  // 1: the largest entries first; 0: the smallest
} pc;

shared uint best_key[TOPK_MAX_WORKGROUP];
shared uint best_index[TOPK_MAX_WORKGROUP];

uint key_of(ELEM v) {
#if DTYPE == I32
    uint key = uint(v) ^ 0x80000000u;
#else
    uint bits = BITS(v);
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) {
        bits = 0x7FC00000u;  // every NaN the same, above +inf
    } else if (bits == 0x80000000u) {
        bits = 0u;  // -0.0 == +0.0
    }
    uint key = (bits & 0x80000000u) != 0u ? ~bits : bits | 0x80000000u;
#endif
    return pc.largest != 0u ? key : ~key;
}

// (a_key, a_index) comes before (b_key, b_index): a larger key, or the same at a lower index.
bool before(uint a_key, uint a_index, uint b_key, uint b_index) {
    return a_key > b_key || (a_key == b_key && a_index < b_index);
}

void main() {
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return;  // uniform across the workgroup
    }
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    uint base = row * pc.cols;
    // The previous pick; before the first round, a bound above every entry.
    uint last_key = 0xFFFFFFFFu;
    uint last_index = 0xFFFFFFFFu;
    bool first = true;
    uint rounds = HARDMAX != 0 ? 1u : pc.k;
    for (uint round = 0u; round < rounds; ++round) {
        // No candidate: key 0 at index cols sorts after every real entry.
        uint key = 0u;
        uint index = pc.cols;
        for (uint c = lane; c < pc.cols; c += width) {
            uint ck = key_of(x[base + c]);
            bool after_last = first || before(last_key, last_index, ck, c);
            if (after_last && before(ck, c, key, index)) {
                key = ck;
                index = c;
            }
        }
        best_key[lane] = key;
        best_index[lane] = index;
        barrier();
        for (uint step = 1u; step < width; step <<= 1) {
            if ((lane & (2u * step - 1u)) == 0u && lane + step < width
                    && before(best_key[lane + step], best_index[lane + step], best_key[lane],
                              best_index[lane])) {
                best_key[lane] = best_key[lane + step];
                best_index[lane] = best_index[lane + step];
            }
            barrier();
        }
        last_key = best_key[0];
        last_index = best_index[0];
        first = false;
        barrier();  // every lane has read the pick before the next round writes
#if HARDMAX == 0
        if (lane == 0u) {
            values[row * pc.k + round] = x[base + last_index];
            indices[row * pc.k + round] = int(last_index);
        }
#endif
    }
#if HARDMAX != 0
    for (uint c = lane; c < pc.cols; c += width) {
        values[base + c] = c == last_index ? ONE : ELEM(0);
    }
#endif
}
