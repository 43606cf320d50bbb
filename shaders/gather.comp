#version 450
// Embedding lookup: out[i, :] = table[ids[i], :], one workgroup per id, lanes striding over
// the row. The stored bits are copied unchanged (WIDTH 32 or 16 bits per element; with VEC
// 4, four elements per load). An id outside [0, vocab) writes a row of zeros: the host cannot
// check device-resident ids without a round trip, and zeros are a defined, visible result.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require

#ifndef WIDTH
#define WIDTH 32
#endif
#ifndef VEC
#define VEC 1
#endif
#if WIDTH == 32 && VEC == 4
#define UNIT uvec4
#elif WIDTH == 32 && VEC == 1
#define UNIT uint
#elif WIDTH == 16 && VEC == 4
#define UNIT u16vec4
#elif WIDTH == 16 && VEC == 1
#define UNIT uint16_t
#else
#error "WIDTH must be 32 or 16 and VEC 1 or 4"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
layout(std430, binding = 1) readonly buffer Table { UNIT table[]; };
layout(std430, binding = 2) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint units;  // row length / VEC
    uint count;  // ids
    uint vocab;  // rows of the table
} pc;

void main() {
    uint i = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (i >= pc.count) {
        return;
    }
    int id = ids[i];
    bool inside = id >= 0 && uint(id) < pc.vocab;
    uint src = inside ? uint(id) * pc.units : 0u;
    uint dst = i * pc.units;
    for (uint u = gl_LocalInvocationID.x; u < pc.units; u += gl_WorkGroupSize.x) {
        result[dst + u] = inside ? table[src + u] : UNIT(0);
    }
}
