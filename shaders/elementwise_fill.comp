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
#define ELEM4 uvec4
#elif WIDTH == 16
#define ELEM uint16_t
#define ELEM4 u16vec4
#else
#error "WIDTH must be 32 or 16"
#endif

layout(local_size_x_id = 0) in;
// VEC 4: each invocation stores four consecutive elements with one vector store (lavapipe
// scatters every per-lane store; the planner picks it where the binding is vector-aligned).
layout(constant_id = 1) const uint VEC = 1u;

layout(std430, binding = 0) writeonly buffer Out { ELEM result[]; };
layout(std430, binding = 0) writeonly buffer Out4 { ELEM4 result4[]; };

layout(push_constant) uniform Fill {
    uint n;      // elements of the output
    uint bits;   // the value's storage bits (low 16 for WIDTH 16)
} pc;

void main() {
    uint step = VKUMD_THREAD_COUNT;
    if (VEC == 4u) {
        uint quads = pc.n / 4u;
        for (uint q = VKUMD_FIRST_INDEX; q < quads; q += step) {
            result4[q] = ELEM4(pc.bits);
        }
        // Elements past the last full four (fewer than the invocations): one each.
        uint t = quads * 4u + VKUMD_FIRST_INDEX;
        if (t < pc.n) {
            result[t] = ELEM(pc.bits);
        }
        return;
    }
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
        result[index] = ELEM(pc.bits);
    }
}
