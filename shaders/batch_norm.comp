#version 450
// Inference batch normalisation over x[N, C, S] (S: the spatial sizes flattened):
// out = (x - mean[c]) / sqrt(var[c] + eps) * scale[c] + bias[c], float32 arithmetic.
// One invocation per element, grid-stride. (A graph pass folds it into a preceding
// convolution where there is one; this kernel is for the other places.)
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#if DTYPE == F32
#define ELEM float
#define TO_F(x) (x)
#define FROM_F(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define TO_F(x) float(x)
#define FROM_F(v) float16_t(v)
#else
#error "DTYPE must be F32 or F16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer Scale { ELEM scale[]; };
layout(std430, binding = 2) readonly buffer Bias { ELEM bias[]; };
layout(std430, binding = 3) readonly buffer Mean { ELEM mean[]; };
layout(std430, binding = 4) readonly buffer Var { ELEM var[]; };
layout(std430, binding = 5) buffer Out { ELEM result[]; };  // may be x

layout(push_constant) uniform BatchNorm {
    uint total;
    uint channels;
    uint inner;     // elements per (n, c) plane
    float eps;
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint c = (index / pc.inner) % pc.channels;
        float a = TO_F(scale[c]) / sqrt(TO_F(var[c]) + pc.eps);
        float v = (TO_F(x[index]) - TO_F(mean[c])) * a + TO_F(bias[c]);
        result[index] = FROM_F(v);
    }
}
