#version 450
// Flash-decoding, second step: merge the per-split partial results of attention_tiled.comp
// (SPLIT = 1) into the output. For one output row with splits s = 0..S-1 holding an
// unnormalised output o_s, a maximum m_s and a sum l_s (log2 units):
//   M = max_s m_s,  out = sum_s 2^(m_s - M) o_s / sum_s 2^(m_s - M) l_s.
// A row whose splits all saw only masked keys (every m_s = -inf) outputs zeros.
// One invocation per (row, vec4 chunk of head_dim).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#define ATTN_NO_PARAMS
#include "attention_common.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer BufPart { vec4 part[]; };
layout(std430, binding = 1) writeonly buffer BufO { ELEM4 o4[]; };

layout(push_constant) uniform CombineParams {
    uint count;   // output rows * chunks
    uint chunks;  // head_dim / 4
    uint splits;
    uint Hq;      // query heads
    uint Lq;      // query length
    uint o_sb;    // out's element strides over (batch, head, seq); head_dim is contiguous
    uint o_sh;
    uint o_ss;
} pc;

void main() {
    uint row_width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint index = gl_GlobalInvocationID.y * row_width + gl_GlobalInvocationID.x;
    if (index >= pc.count) {
        return;
    }
    uint row = index / pc.chunks;
    uint c = index % pc.chunks;
    uint stride = pc.chunks + 1u;
    uint base = row * pc.splits * stride;
    float neg_inf = attn_neg_inf();
    float top = neg_inf;
    for (uint s = 0u; s < pc.splits; ++s) {
        top = max(top, part[base + s * stride + pc.chunks].x);
    }
    vec4 total = vec4(0.0);
    float weight = 0.0;
    if (top != neg_inf) {
        for (uint s = 0u; s < pc.splits; ++s) {
            vec4 stats = part[base + s * stride + pc.chunks];
            if (stats.x == neg_inf) {
                continue;  // this split saw no unmasked key; its output is zero anyway
            }
            float w = exp2(stats.x - top);
            total += w * part[base + s * stride + c];
            weight += w * stats.y;
        }
    }
    // The scratch rows are [b, h, s] row-major; out may be [b, h, s, d] or [b, s, h, d].
    uint i = row % pc.Lq;
    uint bh = row / pc.Lq;
    uint dst = ((bh / pc.Hq) * pc.o_sb + (bh % pc.Hq) * pc.o_sh + i * pc.o_ss) / 4u + c;
    o4[dst] = ELEM4(weight > 0.0 ? total / weight : vec4(0.0));
}
