#version 450
// The columns of a one-group convolution: cols[n, (c * kh + ky) * kw + kx, oy * ow + ox] =
// x[n, c, oy*sy - pt + ky*dy, ox*sx - pl + kx*dx], zero outside the input, so that the
// convolution is the GEMM w[C_out, C*kh*kw] @ cols[n]. One invocation per column element,
// grid-stride; consecutive lanes write consecutive output pixels. The push block is
// conv2d.comp's (c_out, groups and has_bias unused).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#if DTYPE == F32
#define ELEM float
#elif DTYPE == F16
#define ELEM float16_t
#else
#error "DTYPE must be F32 or F16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Cols { ELEM cols[]; };

layout(push_constant) uniform Conv {
    uint total;     // n * c_in * kh * kw * oh * ow
    uint c_in;
    uint h;
    uint w;
    uint c_out;
    uint oh;
    uint ow;
    uint kh;
    uint kw;
    uint sy;
    uint sx;
    uint dy;
    uint dx;
    int pt;
    int pl;
    uint groups;
    uint has_bias;
} pc;

void main() {
    uint pixels = pc.oh * pc.ow;
    uint taps = pc.kh * pc.kw;
    uint rows = pc.c_in * taps;
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint p = index % pixels;
        uint rest = index / pixels;
        uint r = rest % rows;
        uint n = rest / rows;
        uint c = r / taps;
        uint t = r - c * taps;
        uint ky = t / pc.kw;
        uint kx = t - ky * pc.kw;
        uint oy = p / pc.ow;
        uint ox = p - oy * pc.ow;
        int iy = int(oy * pc.sy) - pc.pt + int(ky * pc.dy);
        int ix = int(ox * pc.sx) - pc.pl + int(kx * pc.dx);
        ELEM v = ELEM(0.0);
        if (iy >= 0 && iy < int(pc.h) && ix >= 0 && ix < int(pc.w)) {
            v = x[((n * pc.c_in + c) * pc.h + uint(iy)) * pc.w + uint(ix)];
        }
        cols[index] = v;
    }
}
