#version 450
// One reduction of each row of x over its last dimension; one workgroup per row, float32
// accumulation, one element of x's storage type out per row. OP (REDUCE_OPS in reduce.py):
// 0 sum, 1 mean, 2 max, 3 min, 5 sum of squares, 6 L1 norm, 7 L2 norm, 8 logsumexp,
// 9 log of the sum, 10 variance, 11 standard deviation (4, the product, has no lane
// reduction here: reduce_axis.comp takes it). Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(constant_id = 1) const uint OP = 0u;

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

// inner is reduce_axis.comp's (the two kernels share one block); denominator divides the
// mean and the variance (the count less the correction).
layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    uint inner;
    float denominator;
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
    if (OP == 2u || OP == 3u || OP == 8u) {
        // GLSL's max() may return either operand when one is NaN, so NaNs are counted apart:
        // a row holding one gives NaN, as numpy does. The minimum is the negated maximum of -x.
        float sign = OP == 3u ? -1.0 : 1.0;
        float m = NEG_INF;
        float nans = 0.0;
        for (uint u = lane; u < units; u += width) {
            VT v = sign * UNIT_TO_F(x[base + u]);
            m = max(m, HMAX(v));
            nans = max(nans, HAS_NAN(v) ? 1.0 : 0.0);
        }
        m = row_max(m);
        bool has_nan = row_max(nans) > 0.0;
        // logsumexp = m + log(sum(exp(x - m))); an infinite m is the answer itself (and m is
        // the same on every lane, so the barriers inside row_sum are reached by all).
        if (OP == 8u && is_finite(m)) {
            VT s = VT(0.0);
            for (uint u = lane; u < units; u += width) {
                s += exp(UNIT_TO_F(x[base + u]) - VT(m));
            }
            m += log(row_sum(HSUM(s)));
        }
        answer = has_nan ? QNAN : sign * m;
    } else if (OP == 10u || OP == 11u) {
        // Two passes (the mean, then the squared deviations): no cancellation of E[x^2]-E[x]^2.
        VT s = VT(0.0);
        for (uint u = lane; u < units; u += width) {
            s += UNIT_TO_F(x[base + u]);
        }
        VT mean = VT(row_sum(HSUM(s)) / float(pc.cols));
        VT d = VT(0.0);
        for (uint u = lane; u < units; u += width) {
            VT c = UNIT_TO_F(x[base + u]) - mean;
            d += c * c;
        }
        float total = row_sum(HSUM(d));
        answer = pc.denominator > 0.0 ? total / pc.denominator : (total > 0.0 ? POS_INF : QNAN);
        if (OP == 11u) {
            answer = sqrt(answer);
        }
    } else {
        VT s = VT(0.0);
        for (uint u = lane; u < units; u += width) {
            VT v = UNIT_TO_F(x[base + u]);
            s += (OP == 5u || OP == 7u) ? v * v : (OP == 6u ? abs(v) : v);
        }
        answer = row_sum(HSUM(s));
        if (OP == 1u) {
            answer /= pc.denominator;
        } else if (OP == 7u) {
            answer = sqrt(answer);
        } else if (OP == 9u) {
            answer = log(answer);
        }
    }
    if (lane == 0u) {
        result[row] = FROM_F(answer);
    }
}
