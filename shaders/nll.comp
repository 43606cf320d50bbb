#version 450
// Negative log-likelihood terms: for each target element e = (n, d) of x[N, C, D],
// loss[e] = -x[n, t, d] * w[t] and weight[e] = w[t] (t = target[e]; w = 1 without weights),
// both float32, which the op then reduces (sum, or sum / sum of weights for the mean).
// A target equal to ignore_index gives 0 and 0; any other target outside [0, C) gives NaN
// and NaN, so a result built from it shows it rather than reading another class's value.
// Defines: DTYPE (F32, F16, BF16): x's and the weights' type.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif

#if DTYPE == F32
#define ELEM float
#define TO_F(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define TO_F(v) float(v)
#elif DTYPE == BF16
#define ELEM uint16_t
#define TO_F(v) bf16_to_float(uint(v))
#else
#error "DTYPE must be F32, F16 or BF16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer Target { int target[]; };
layout(std430, binding = 2) readonly buffer Weight { ELEM w[]; };
layout(std430, binding = 3) writeonly buffer Loss { float loss[]; };
layout(std430, binding = 4) writeonly buffer Weights { float weights[]; };

layout(push_constant) uniform Shape {
    uint count;       // target elements, N * D
    uint classes;     // C
    uint inner;       // D, the product of the dimensions after C (1 for x[N, C])
    uint has_weight;
    uint has_ignore;
    int ignore_index;
} pc;

void main() {
    uint e = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
        + gl_GlobalInvocationID.x;
    if (e >= pc.count) {
        return;
    }
    int t = target[e];
    if (pc.has_ignore != 0u && t == pc.ignore_index) {
        loss[e] = 0.0;
        weights[e] = 0.0;
        return;
    }
    if (t < 0 || uint(t) >= pc.classes) {
        float nan = uintBitsToFloat(0x7FC00000u);
        loss[e] = nan;
        weights[e] = nan;
        return;
    }
    uint n = e / pc.inner;
    uint d = e - n * pc.inner;
    float weight = pc.has_weight != 0u ? TO_F(w[t]) : 1.0;
    loss[e] = -TO_F(x[(n * pc.classes + uint(t)) * pc.inner + d]) * weight;
    weights[e] = weight;
}
