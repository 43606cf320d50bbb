#version 450
// out = a OP b with numpy broadcasting: strides of 0 repeat a dimension.
// One pipeline serves every shape (shape and strides are push constants); OP is a
// specialization constant so each operator gets its own straight-line code.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#ifndef ELEM
#define ELEM float
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0u;  // 0 add, 1 sub, 2 mul, 3 div

layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Shape {
    uint n;          // elements of the output
    uint ndim;       // dimensions used (<= 6), innermost last
    uint shape[6];   // output shape
    uint a_stride[6];
    uint b_stride[6];
} pc;

void main() {
    uint row_width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint index = gl_GlobalInvocationID.y * row_width + gl_GlobalInvocationID.x;
    if (index >= pc.n) {
        return;
    }
    uint rest = index;
    uint ia = 0u;
    uint ib = 0u;
    for (int d = int(pc.ndim) - 1; d >= 0; --d) {
        uint coord = rest % pc.shape[d];
        rest /= pc.shape[d];
        ia += coord * pc.a_stride[d];
        ib += coord * pc.b_stride[d];
    }
    float x = float(a[ia]);
    float y = float(b[ib]);
    float r;
    if (OP == 0u) {
        r = x + y;
    } else if (OP == 1u) {
        r = x - y;
    } else if (OP == 2u) {
        r = x * y;
    } else {
        r = x / y;
    }
    result[index] = ELEM(r);
}
