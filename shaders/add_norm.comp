#version 450
// Layer norm of a residual sum over the last dimension, one workgroup per row:
//   y = (s - mean) / sqrt(var + eps) * weight + bias,   s = x + residual
// (ONNX Runtime's SkipLayerNormalization): the sum of a transformer block's residual branch
// is never written to memory, and it stays float32 -- not rounded to the storage type, as
// an add kernel before a norm kernel would round it. As norm.comp, mean and variance are
// taken of s minus the row's first sum, so a large common offset does not cancel the
// digits that matter. x and residual have one shape; weight and bias (flags bits 0 and 1)
// the row's length; absent ones are bound to a dummy. Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) readonly buffer Residual { UNIT residual[]; };
layout(std430, binding = 2) readonly buffer Weight { UNIT weight[]; };
layout(std430, binding = 3) readonly buffer Bias { UNIT bias[]; };
layout(std430, binding = 4) writeonly buffer Out { UNIT result[]; };
layout(std430, binding = 0) readonly buffer XElems { ELEM x_elem[]; };
layout(std430, binding = 1) readonly buffer ResidualElems { ELEM residual_elem[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    float eps;
    uint flags;  // bit 0: weight given, bit 1: bias given
} pc;

VT row_sum_at(uint unit) {
    return UNIT_TO_F(x[unit]) + UNIT_TO_F(residual[unit]);
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
    float n = float(pc.cols);

    // The same float32 addition as every element's below, so the first element's d is 0.
    float shift = TO_F(x_elem[row * pc.cols]) + TO_F(residual_elem[row * pc.cols]);
    VT sum = VT(0.0);
    VT squares = VT(0.0);
    for (uint u = lane; u < units; u += width) {
        VT d = row_sum_at(base + u) - shift;
        sum += d;
        squares = fma(d, d, squares);
    }
    float mean = row_sum(HSUM(sum)) / n;
    float var = max(row_sum(HSUM(squares)) / n - mean * mean, 0.0);
    // A constant row with eps = 0: every centred value is 0 and so is y (then the bias),
    // not 0 * (1 / sqrt(0)) = NaN.
    float inv = var + pc.eps == 0.0 ? 0.0 : 1.0 / sqrt(var + pc.eps);
    bool has_weight = (pc.flags & 1u) != 0u;
    bool has_bias = (pc.flags & 2u) != 0u;
    // Recomputing the sums costs a second read of x and residual, which is what keeping
    // the sum out of memory trades for.
    for (uint u = lane; u < units; u += width) {
        VT y = ((row_sum_at(base + u) - shift) - mean) * inv;
        if (has_weight) {
            y *= UNIT_TO_F(weight[u]);
        }
        if (has_bias) {
            y += UNIT_TO_F(bias[u]);
        }
        result[base + u] = F_TO_UNIT(y);
    }
}
