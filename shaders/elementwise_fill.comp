#version 450
// Fill every element of out with one stored bit pattern (the host converts the value, so
// the result matches numpy exactly). WIDTH is 32 (float32, int32) or 16 (float16, bfloat16).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#ifndef WIDTH
#define WIDTH 32
#endif

#if WIDTH == 32
#define ELEM uint
#elif WIDTH == 16
#define ELEM uint16_t
#else
#error "WIDTH must be 32 or 16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Fill {
    uint n;      // elements of the output
    uint bits;   // the value's storage bits (low 16 for WIDTH 16)
} pc;

void main() {
    uint step = VKUMD_THREAD_COUNT;
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
        result[index] = ELEM(pc.bits);
    }
}
