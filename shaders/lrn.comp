#version 450
// Local response normalisation across channels (ONNX's LRN, AlexNet's): over x[N, C, S]
// (S: the spatial sizes flattened),
//   out[n, c, s] = x[n, c, s] / (bias + alpha / size * sum x[n, i, s]^2) ^ beta
// with i over the channels c - lo .. c + hi that exist (lo = floor((size - 1) / 2),
// hi = ceil((size - 1) / 2)). One invocation per element, grid-stride, float32 arithmetic.
// Each element re-reads its window (size is 5 in every model that uses LRN), which costs
// less than a separate pass of squares through memory.
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
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Lrn {
    uint total;
    uint channels;
    uint inner;     // elements per (n, c) plane
    uint lo;        // channels below c in the window
    uint hi;        // channels above c in the window
    float alpha_over_size;
    float beta;
    float bias;
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint c = (index / pc.inner) % pc.channels;
        uint first = c >= pc.lo ? c - pc.lo : 0u;
        uint last = min(c + pc.hi, pc.channels - 1u);
        uint at = index - (c - first) * pc.inner;
        float squares = 0.0;
        for (uint i = first; i <= last; ++i, at += pc.inner) {
            float v = TO_F(x[at]);
            squares += v * v;
        }
        float d = pc.bias + pc.alpha_over_size * squares;
        result[index] = FROM_F(TO_F(x[index]) / pow(d, pc.beta));
    }
}
