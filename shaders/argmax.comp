#version 450
// The index of the maximum (MIN 1: minimum) of each row of x (its last dimension) as int32:
// the lowest index among equal maxima, and the index of the first NaN where a row holds one
// (numpy's argmax); LAST 1 gives the highest such index instead (ONNX's select_last_index).
// One workgroup per row. Each lane keeps its own first maximum and first NaN (a strict
// comparison, walking its elements in order); the row's answer is the smallest index among
// the lanes whose maximum is the row's. Indices travel through the float reductions of
// rows.glsl as -index, exact below 2^24 (the planner's limit on the row length). LAST ranks
// indices from the end (rank cols - 1 - index, a later equal value replacing an earlier one)
// so the same smallest-rank rule picks the last index; MIN searches the maximum of -x.
// Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(constant_id = 1) const uint MIN = 0u;
layout(constant_id = 2) const uint LAST = 0u;

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) writeonly buffer Out { int result[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
} pc;

#define NONE 16777216.0  // 2^24: no index

void consider(float value, uint index, inout float best, inout float at, inout float nan_at) {
    float v = MIN == 1u ? -value : value;
    float rank = float(LAST == 1u ? pc.cols - 1u - index : index);
    if ((floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u) {
        nan_at = min(nan_at, rank);
    } else if (v > best || at == NONE || (LAST == 1u && v == best)) {
        best = v;
        at = rank;
    }
}

void main() {
    uint row = row_index();
    if (row >= pc.rows) {
        return;
    }
    uint units = pc.cols / VEC;
    uint base = row * units;
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    float best = NEG_INF;
    float at = NONE;
    float nan_at = NONE;
    for (uint u = lane; u < units; u += width) {
        VT v = UNIT_TO_F(x[base + u]);
#if VEC == 4
        consider(v.x, 4u * u, best, at, nan_at);
        consider(v.y, 4u * u + 1u, best, at, nan_at);
        consider(v.z, 4u * u + 2u, best, at, nan_at);
        consider(v.w, 4u * u + 3u, best, at, nan_at);
#else
        consider(v, u, best, at, nan_at);
#endif
    }
    float top = row_max(at == NONE ? NEG_INF : best);
    float first = -row_max(at != NONE && best == top ? -at : -NONE);
    float first_nan = -row_max(-nan_at);
    if (lane == 0u) {
        float rank = first_nan < NONE ? first_nan : first;
        result[row] = int(LAST == 1u ? float(pc.cols - 1u) - rank : rank);
    }
}
