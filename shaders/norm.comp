#version 450
// Layer norm (OP 0) and RMS norm (OP 1) over the last dimension; one workgroup per row.
//   layer: y = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance, as torch)
//   rms:   y = x / sqrt(mean(x^2) + eps) * weight
// Mean and variance are taken of x minus the row's first element (a shift close to the mean
// for real activations), so a large common offset does not cancel the digits that matter.
// weight and bias (flags bits 0 and 1) have the row's length and x's storage type; when
// absent their bindings are dummies. Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(constant_id = 1) const uint OP = 0u;  // 0 layer norm, 1 RMS norm

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) readonly buffer Weight { UNIT weight[]; };
layout(std430, binding = 2) readonly buffer Bias { UNIT bias[]; };
layout(std430, binding = 3) writeonly buffer Out { UNIT result[]; };
layout(std430, binding = 0) readonly buffer XElems { ELEM x_elem[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    float eps;
    uint flags;  // bit 0: weight given, bit 1: bias given
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
    float n = float(pc.cols);

    float shift = OP == 0u ? TO_F(x_elem[row * pc.cols]) : 0.0;
    VT sum = VT(0.0);
    VT squares = VT(0.0);
    for (uint u = lane; u < units; u += width) {
        VT d = UNIT_TO_F(x[base + u]) - shift;
        sum += d;
        squares = fma(d, d, squares);
    }
    // Centre as (x - shift) - mean_of_shifted: x - shift is exact for x near the shift,
    // while mean + shift rounded back to float32 would lose the digits that matter.
    float mean = 0.0;
    float var;
    if (OP == 0u) {
        mean = row_sum(HSUM(sum)) / n;
        var = max(row_sum(HSUM(squares)) / n - mean * mean, 0.0);
    } else {
        var = row_sum(HSUM(squares)) / n;
    }
    float inv = 1.0 / sqrt(var + pc.eps);
    bool has_weight = (pc.flags & 1u) != 0u;
    bool has_bias = (pc.flags & 2u) != 0u;
    for (uint u = lane; u < units; u += width) {
        VT y = ((UNIT_TO_F(x[base + u]) - shift) - mean) * inv;
        if (has_weight) {
            y *= UNIT_TO_F(weight[u]);
        }
        if (has_bias) {
            y += UNIT_TO_F(bias[u]);
        }
        result[base + u] = F_TO_UNIT(y);
    }
}
