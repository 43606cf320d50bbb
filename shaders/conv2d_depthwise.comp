#version 450
// Depthwise 2-D convolution, NCHW, one input and one output channel per group, a square
// KERNEL x KERNEL filter known when compiling, dilation 1 and a horizontal stride SX of 1 or
// 2 known when compiling (any vertical stride): MobileNet's and PP-OCR's 3x3 and 5x5 layers.
// out[n, c, oy, ox] = bias[c] + sum over (ky, kx) of
// x[n, c, oy*sy - pt + ky, ox*SX - pl + kx] * w[c, 0, ky, kx],
// zero outside the input; float32 accumulation; then conv_epilogue.glsl's activation and
// residual.
//
// An invocation owns a strip of STRIP outputs along a row and loads each input row segment
// the strip needs once ((STRIP - 1) * SX + KERNEL values) instead of once per output and
// tap: for a 3x3 filter at stride 1, 6 loads serve 12 products (at stride 2, 9), for 5x5 8
// serve 20 (at stride 2, 11). It walks a run of rows_per
// (image, channel) planes by increments, as conv2d.comp does, so the divisions happen once
// per run. Segments inside the row skip the bounds tests.
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

#ifndef KERNEL
#define KERNEL 3
#endif
#ifndef SX
#define SX 1
#endif
#define STRIP 4
#define SEGMENT ((STRIP - 1) * SX + KERNEL)

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) readonly buffer W { ELEM w[]; };
layout(std430, binding = 2) readonly buffer B { ELEM bias[]; };  // w when has_bias is 0
layout(std430, binding = 3) writeonly buffer Out { ELEM result[]; };
layout(std430, binding = 4) readonly buffer R { ELEM residual[]; };  // x when residual_mode is 0

layout(push_constant) uniform Depthwise {
    uint rows_total;  // n * c planes
    uint strips;      // oh * strips_per_row
    uint strips_per_row;
    uint channels;
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint sy;
    int pt;
    int pl;
    uint has_bias;
    uint act;         // the epilogue's activation (activation.glsl) and its parameters
    float act_p0;
    float act_p1;
    uint residual_mode;  // 0 none, 1 added after the activation, 2 before it
    uint rows_per;    // planes per invocation (the grid's y covers rows_total)
} pc;

#include "conv_epilogue.glsl"

void main() {
    uint first = gl_WorkGroupID.y * pc.rows_per;
    if (first >= pc.rows_total) {
        return;
    }
    uint last = min(first + pc.rows_per, pc.rows_total);
    uint in_plane = pc.h * pc.w;
    uint out_plane = pc.oh * pc.ow;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint s = gl_GlobalInvocationID.x; s < pc.strips; s += stride) {
        uint oy = s / pc.strips_per_row;
        uint ox0 = (s - oy * pc.strips_per_row) * STRIP;
        int y0 = int(oy * pc.sy) - pc.pt;
        int x0 = int(ox0 * uint(SX)) - pc.pl;
        bool inside = x0 >= 0 && x0 + SEGMENT <= int(pc.w);
        uint c = first % pc.channels;
        uint base = first * in_plane;
        uint out_at = first * out_plane + oy * pc.ow + ox0;
        for (uint r = first; r < last; ++r) {
            float acc[STRIP];
            float b = pc.has_bias != 0u ? TO_F(bias[c]) : 0.0;
            for (uint j = 0u; j < STRIP; ++j) {
                acc[j] = b;
            }
            uint taps = c * uint(KERNEL * KERNEL);
            for (uint ky = 0u; ky < uint(KERNEL); ++ky) {
                int iy = y0 + int(ky);
                if (iy < 0 || iy >= int(pc.h)) {
                    continue;
                }
                uint row = base + uint(iy) * pc.w;
                float seg[SEGMENT];
                if (inside) {
                    for (uint i = 0u; i < uint(SEGMENT); ++i) {
                        seg[i] = TO_F(x[row + uint(x0) + i]);
                    }
                } else {
                    for (uint i = 0u; i < uint(SEGMENT); ++i) {
                        int ix = x0 + int(i);
                        float v = 0.0;
                        if (ix >= 0 && ix < int(pc.w)) {
                            v = TO_F(x[row + uint(ix)]);
                        }
                        seg[i] = v;
                    }
                }
                for (uint kx = 0u; kx < uint(KERNEL); ++kx) {
                    float wv = TO_F(w[taps + ky * uint(KERNEL) + kx]);
                    for (uint j = 0u; j < STRIP; ++j) {
                        acc[j] += seg[j * uint(SX) + kx] * wv;
                    }
                }
            }
            for (uint j = 0u; j < STRIP; ++j) {
                if (ox0 + j < pc.ow) {
                    result[out_at + j] = FROM_F(conv_finish(acc[j], out_at + j));
                }
            }
            base += in_plane;
            out_at += out_plane;
            if (++c == pc.channels) {
                c = 0u;
            }
        }
    }
}
