#version 450
// GatherElements (torch.gather): out[p] = data[p with its axis coordinate replaced by
// indices[p]], for every position p of indices (out has indices' shape). Grid-stride over
// the outputs; each finds its data offset from its coordinates (up to 6 dimensions, the host
// merges the others). Stored bits are copied unchanged (WIDTH 32 or 16).
//
// Indices are int32; a negative one counts from the end of the axis. One still outside
// [0, axis_size) after that writes zero bits and reads nothing: the host cannot check
// device-resident indices without a round trip, and zeros are a defined, visible result (the
// embedding kernel's rule).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#ifndef WIDTH
#define WIDTH 32
#endif
#if WIDTH == 32
#define UNIT uint
#elif WIDTH == 16
#define UNIT uint16_t
#else
#error "WIDTH must be 32 or 16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Data { UNIT data[]; };
layout(std430, binding = 1) readonly buffer Indices { int indices[]; };
layout(std430, binding = 2) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint n;            // outputs (= indices)
    uint ndim;         // dimensions of shape/stride, <= 6
    uint axis_size;    // data's length along the axis
    uint axis_stride;  // data's stride along the axis
    uint shape[6];     // out's shape, outermost first
    uint stride[6];    // data's strides for those dimensions (0 for the axis)
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += VKUMD_THREAD_COUNT) {
        uint rest = index;
        uint src = 0u;
        for (int d = int(pc.ndim) - 1; d >= 0; --d) {
            uint c = rest % pc.shape[d];
            rest /= pc.shape[d];
            src += c * pc.stride[d];
        }
        int id = indices[index];
        if (id < 0) {
            id += int(pc.axis_size);
        }
        bool inside = id >= 0 && uint(id) < pc.axis_size;
        result[index] = inside ? data[src + uint(id) * pc.axis_stride] : UNIT(0);
    }
}
