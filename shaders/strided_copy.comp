#version 450
// Strided copy: element i of a shape of up to 6 dimensions is read at
// src_offset + sum(index[d] * src_stride[d]) and written at dst_offset + sum(index[d] *
// dst_stride[d]) (units of one element). It makes a strided view contiguous, and writes into
// a view of a tensor (t[1:3] = x, view.copy_(x)). Strides are 32-bit two's complement in uint:
// a negative step wraps back exactly, since every true offset lies inside the buffer. Stored
// bits are copied unchanged (WIDTH 8, 16, 32, or 64 as two 32-bit words). An offset outside
// either buffer (which the host never plans) is skipped, so no access leaves its buffer.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#ifndef WIDTH
#define WIDTH 32
#endif
#if WIDTH == 8
#extension GL_EXT_shader_8bit_storage : require
#endif
#include "common.glsl"

#if WIDTH == 64
#define UNIT uvec2
#elif WIDTH == 32
#define UNIT uint
#elif WIDTH == 16
#define UNIT uint16_t
#elif WIDTH == 8
#define UNIT uint8_t
#else
#error "WIDTH must be 8, 16, 32 or 64"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Src { UNIT src[]; };
layout(std430, binding = 1) writeonly buffer Dst { UNIT dst[]; };

layout(push_constant) uniform Shape {
    uint n;           // elements copied
    uint ndim;        // dimensions used (<= 6), outermost first
    uint src_offset;  // first element read
    uint dst_offset;  // first element written
    uint shape[6];
    uint src_stride[6];
    uint dst_stride[6];
} pc;

void main() {
    uint src_end = uint(src.length());
    uint dst_end = uint(dst.length());
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += VKUMD_THREAD_COUNT) {
        uint rest = index;
        uint s = pc.src_offset;
        uint d = pc.dst_offset;
        for (int k = int(pc.ndim) - 1; k >= 0; --k) {
            uint i = rest % pc.shape[k];
            rest /= pc.shape[k];
            s += i * pc.src_stride[k];
            d += i * pc.dst_stride[k];
        }
        if (s < src_end && d < dst_end) {
            dst[d] = src[s];
        }
    }
}
