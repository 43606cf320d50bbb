#version 450
// Transposed 2-D convolution, NCHW, as a gather: out[n, o, oy, ox] = bias[o] + the sum, over
// the group's input channels c and the taps (ky, kx) with oy + pt - ky*dy = iy*sy (and
// likewise along x) landing on an input pixel, of x[n, c, iy, ix] * w[c, o - group start,
// ky, kx]. w is ONNX's and torch's [C_in, C_out / groups, kH, kW]. Each output sums its own
// taps, so no atomics and no column buffer; float32 accumulation.
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
layout(std430, binding = 1) readonly buffer W { ELEM w[]; };
layout(std430, binding = 2) readonly buffer B { ELEM bias[]; };  // w when has_bias is 0
layout(std430, binding = 3) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Conv {
    uint total;     // n * c_out * oh * ow
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
    uint out_per_group = pc.c_out / pc.groups;
    uint in_per_group = pc.c_in / pc.groups;
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint ox = index % pc.ow;
        uint rest = index / pc.ow;
        uint oy = rest % pc.oh;
        rest /= pc.oh;
        uint o = rest % pc.c_out;
        uint n = rest / pc.c_out;
        uint g = o / out_per_group;
        uint og = o % out_per_group;
        float acc = pc.has_bias != 0u ? TO_F(bias[o]) : 0.0;
        for (uint ky = 0u; ky < pc.kh; ++ky) {
            int ty = int(oy) + pc.pt - int(ky * pc.dy);
            if (ty < 0) {
                break;  // ty only falls as ky grows
            }
            if (uint(ty) % pc.sy != 0u || uint(ty) / pc.sy >= pc.h) {
                continue;
            }
            uint iy = uint(ty) / pc.sy;
            for (uint kx = 0u; kx < pc.kw; ++kx) {
                int tx = int(ox) + pc.pl - int(kx * pc.dx);
                if (tx < 0) {
                    break;
                }
                if (uint(tx) % pc.sx != 0u || uint(tx) / pc.sx >= pc.w) {
                    continue;
                }
                uint ix = uint(tx) / pc.sx;
                for (uint c = 0u; c < in_per_group; ++c) {
                    uint ci = g * in_per_group + c;
                    float xv = TO_F(x[((n * pc.c_in + ci) * pc.h + iy) * pc.w + ix]);
                    float wv = TO_F(w[((ci * out_per_group + og) * pc.kh + ky) * pc.kw + kx]);
                    acc += xv * wv;
                }
            }
        }
        result[index] = FROM_F(acc);
    }
}
