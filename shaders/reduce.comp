#version 450
// Sum (OP 0), mean (OP 1) or maximum (OP 2) of each row of x over its last dimension; one
// workgroup per row, float32 accumulation, one element of x's storage type out per row.
// Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(constant_id = 1) const uint OP = 0u;  // 0 sum, 1 mean, 2 max

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
} pc;

void main() {
    uint row = row_index();
    if (row >= pc.rows) {
        return;
    }
    uint units = pc.cols / VEC;
    uint base = row * units;
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    float answer;
    if (OP == 2u) {
        // GLSL's max() may return either operand when one is NaN, so NaNs are counted apart:
        // a row holding one has NaN as its maximum, as numpy gives.
        float m = uintBitsToFloat(0xFF800000u);
        float nans = 0.0;
        for (uint u = lane; u < units; u += width) {
            VT v = UNIT_TO_F(x[base + u]);
            m = max(m, HMAX(v));
            nans = max(nans, HAS_NAN(v) ? 1.0 : 0.0);
        }
        answer = row_max(m);
        if (row_max(nans) > 0.0) {
            answer = uintBitsToFloat(0x7FC00000u);
        }
    } else {
        VT sum = VT(0.0);
        for (uint u = lane; u < units; u += width) {
            sum += UNIT_TO_F(x[base + u]);
        }
        answer = row_sum(HSUM(sum));
        if (OP == 1u) {
            answer /= float(pc.cols);
        }
    }
    if (lane == 0u) {
        result[row] = FROM_F(answer);
    }
}
