#version 450
// One reduction of x seen as [rows, cols, inner] over its middle axis: one invocation per
// output element (row, i), walking x[row, :, i] at a stride of inner elements, so that
// neighbouring invocations read neighbouring addresses and no axis is moved first. OP as
// reduce.comp, plus 4, the product. float32 accumulation. Defines: DTYPE (rows.glsl; VEC is 1
// and SUBGROUP_REDUCE 0 here: nothing is reduced across lanes).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#define VEC 1
#define SUBGROUP_REDUCE 0
#include "rows.glsl"

layout(constant_id = 1) const uint OP = 0u;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    uint inner;
    float denominator;
} pc;

void main() {
    // grid_for folds the invocations past maxComputeWorkGroupCount[0] groups into y.
    uint index = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
                 + gl_GlobalInvocationID.x;
    if (index >= pc.rows * pc.inner) {
        return;
    }
    uint row = index / pc.inner;
    uint base = row * pc.cols * pc.inner + (index - row * pc.inner);
    uint n = pc.cols;
    uint stride = pc.inner;
    float answer;
    if (OP == 2u || OP == 3u || OP == 8u) {
        float sign = OP == 3u ? -1.0 : 1.0;
        float m = NEG_INF;
        bool has_nan = false;
        for (uint r = 0u; r < n; ++r) {
            float v = sign * TO_F(x[base + r * stride]);
            m = max(m, v);
            has_nan = has_nan || (floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u;
        }
        if (OP == 8u && is_finite(m)) {
            float s = 0.0;
            for (uint r = 0u; r < n; ++r) {
                s += exp(TO_F(x[base + r * stride]) - m);
            }
            m += log(s);
        }
        answer = has_nan ? QNAN : sign * m;
    } else if (OP == 10u || OP == 11u) {
        float s = 0.0;
        for (uint r = 0u; r < n; ++r) {
            s += TO_F(x[base + r * stride]);
        }
        float mean = s / float(n);
        float d = 0.0;
        for (uint r = 0u; r < n; ++r) {
            float c = TO_F(x[base + r * stride]) - mean;
            d += c * c;
        }
        answer = pc.denominator > 0.0 ? d / pc.denominator : (d > 0.0 ? POS_INF : QNAN);
        if (OP == 11u) {
            answer = sqrt(answer);
        }
    } else if (OP == 4u) {
        float p = 1.0;
        for (uint r = 0u; r < n; ++r) {
            p *= TO_F(x[base + r * stride]);
        }
        answer = p;
    } else {
        float s = 0.0;
        for (uint r = 0u; r < n; ++r) {
            float v = TO_F(x[base + r * stride]);
            s += (OP == 5u || OP == 7u) ? v * v : (OP == 6u ? abs(v) : v);
        }
        answer = s;
        if (OP == 1u) {
            answer /= pc.denominator;
        } else if (OP == 7u) {
            answer = sqrt(answer);
        } else if (OP == 9u) {
            answer = log(answer);
        }
    }
    result[index] = FROM_F(answer);
}
