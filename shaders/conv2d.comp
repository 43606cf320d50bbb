#version 450
// Direct 2-D convolution, NCHW, with the epilogue of conv_epilogue.glsl (activation,
// residual) applied to out[n, oc, oy, ox] = bias[oc] + sum over the group's input
// channels ic and the kernel taps (ky, kx) of x[n, ic, oy*sy - pt + ky*dy, ox*sx - pl + kx*dx]
// * w[oc, ic - group start, ky, kx]; taps outside the input read zero (padding, any of the
// four sides). Float32 accumulation. The correct-for-every-case kernel (groups, depthwise,
// dilation, asymmetric pads); dense convolutions take the implicit GEMM (gemm.comp, CONV).
//
// An invocation owns one output pixel (consecutive lanes, consecutive pixels) and walks a run
// of rows_per rows of (image, output-channel block), stepping them by increments: the
// divisions that split an index happen once per run. On a CPU driver an integer division by a
// run-time value is a scalar instruction per lane; five per output cost more than a 3x3
// depthwise output's nine multiply-adds.
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
layout(std430, binding = 4) readonly buffer R { ELEM residual[]; };  // x when residual_mode is 0

layout(push_constant) uniform Conv {
    uint rows_total;  // n * (c_out / OC_BLOCK)
    uint pixels;      // oh * ow
    uint c_in;
    uint h;
    uint w;
    uint c_out;
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
    uint act;         // the epilogue's activation (activation.glsl) and its parameters
    float act_p0;
    float act_p1;
    uint residual_mode;  // 0 none, 1 added after the activation, 2 before it
    uint rows_per;    // rows per invocation (the grid's y covers rows_total)
} pc;

#include "conv_epilogue.glsl"

#ifndef OC_BLOCK
#define OC_BLOCK 1
#endif

// OC_BLOCK output channels of one group per row (the planner picks 4 where the group's output
// channels allow): each input element loaded serves OC_BLOCK products.
void main() {
    uint first = gl_WorkGroupID.y * pc.rows_per;
    if (first >= pc.rows_total) {
        return;
    }
    uint last = min(first + pc.rows_per, pc.rows_total);
    uint cin_g = pc.c_in / pc.groups;
    uint cout_g = pc.c_out / pc.groups;
    uint taps = pc.kh * pc.kw;
    uint blocks = pc.c_out / OC_BLOCK;
    uint wstride = cin_g * taps;  // between consecutive output channels' filters
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint p = gl_GlobalInvocationID.x; p < pc.pixels; p += stride) {
        uint oy = p / pc.ow;
        int y0 = int(oy * pc.sy) - pc.pt;
        int x0 = int((p - oy * pc.ow) * pc.sx) - pc.pl;
        // The run's first row: image n, output channel oc, its place in its group and the
        // group's first input channel.
        uint n = first / blocks;
        uint oc = (first - n * blocks) * OC_BLOCK;
        uint group = oc / cout_g;
        uint in_group = oc - group * cout_g;
        uint ic0 = group * cin_g;
        for (uint r = first; r < last; ++r) {
            float acc[OC_BLOCK];
            for (uint b = 0u; b < OC_BLOCK; ++b) {
                acc[b] = pc.has_bias != 0u ? TO_F(bias[oc + b]) : 0.0;
            }
            uint wbase = oc * wstride;
            for (uint c = 0u; c < cin_g; ++c) {
                uint xplane = (n * pc.c_in + ic0 + c) * pc.h;
                uint wplane = wbase + c * taps;
                for (uint ky = 0u; ky < pc.kh; ++ky) {
                    int iy = y0 + int(ky * pc.dy);
                    if (iy < 0 || iy >= int(pc.h)) {
                        continue;
                    }
                    uint xrow = (xplane + uint(iy)) * pc.w;
                    uint wrow = wplane + ky * pc.kw;
                    for (uint kx = 0u; kx < pc.kw; ++kx) {
                        int ix = x0 + int(kx * pc.dx);
                        if (ix >= 0 && ix < int(pc.w)) {
                            float v = TO_F(x[xrow + uint(ix)]);
                            for (uint b = 0u; b < OC_BLOCK; ++b) {
                                acc[b] += v * TO_F(w[wrow + kx + b * wstride]);
                            }
                        }
                    }
                }
            }
            uint at = (n * pc.c_out + oc) * pc.pixels + p;
            for (uint b = 0u; b < OC_BLOCK; ++b) {
                result[at + b * pc.pixels] = FROM_F(conv_finish(acc[b], at + b * pc.pixels));
            }
            oc += OC_BLOCK;
            in_group += OC_BLOCK;
            if (in_group == cout_g) {
                in_group = 0u;
                ic0 += cin_g;
            }
            if (oc == pc.c_out) {
                oc = 0u;
                ic0 = 0u;
                ++n;
            }
        }
    }
}
