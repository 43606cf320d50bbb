#version 450
// Depthwise 2-D convolution, NCHW, one input and one output channel per group, a square
// KERNEL x KERNEL filter, dilation 1 and strides SY (vertical) and SX (horizontal) of 1 or 2,
// all known when compiling: MobileNet's, ShuffleNet's and PP-OCR's 3x3 and 5x5 layers.
// out[n, c, oy, ox] = bias[c] + sum over (ky, kx) of
// x[n, c, oy*SY - pt + ky, ox*SX - pl + kx] * w[c, 0, ky, kx],
// zero outside the input; float32 accumulation; then conv_epilogue.glsl's activation and
// residual.
//
// On lavapipe every load in a loop is a gather over the subgroup (docs/performance.md), so
// the kernel is laid out to load each input element as few times as it can. An invocation
// owns a strip of STRIP outputs along a row and a band of output rows below it, in one
// (image, channel) plane: it loads the plane's filter and bias once, then walks down the
// band keeping the KERNEL input row segments of the current output row in registers
// ((STRIP - 1) * SX + KERNEL values each); moving to the next output row shifts them by SY
// and loads only the SY new rows. A 3x3 at stride 1 with strips of 8 loads 10 values per 8
// outputs (72 products) where one load per tap would be 72. Neighbouring invocations own
// neighbouring strips. Loads outside the input read a clamped in-bounds address and select
// zero, so no branch splits a subgroup at the borders.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
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
#ifndef SY
#define SY 1
#endif
#ifndef STRIP
#define STRIP 8
#endif
#define SEGMENT ((STRIP - 1) * SX + KERNEL)
// Input rows an output row shares with the next one.
#define KEPT (KERNEL - SY)

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
#if QUADS
#if DTYPE == F32
#define QUAD vec4
#else
#define QUAD f16vec4
#endif
layout(std430, binding = 0) readonly buffer XQuads { QUAD x4[]; };
layout(std430, binding = 3) writeonly buffer OutQuads { QUAD result4[]; };
#endif
layout(std430, binding = 1) readonly buffer W { ELEM w[]; };
layout(std430, binding = 2) readonly buffer B { ELEM bias[]; };  // w when has_bias is 0
layout(std430, binding = 3) writeonly buffer Out { ELEM result[]; };
layout(std430, binding = 4) readonly buffer R { ELEM residual[]; };  // x when residual_mode is 0

layout(push_constant) uniform Depthwise {
    uint items;           // planes * bands * strips_per_row
    uint strips_per_row;
    uint bands;           // bands of output rows per plane
    uint band_rows;       // output rows per band
    uint channels;
    uint h;
    uint w;
    uint oh;
    uint ow;
    int pt;
    int pl;
    uint has_bias;
    uint act;             // the epilogue's activation (activation.glsl) and its parameters
    float act_p0;
    float act_p1;
    uint residual_mode;   // 0 none, 1 added after the activation, 2 before it
} pc;

#include "conv_epilogue.glsl"

#ifndef QUADS
#define QUADS 0
#endif
#if QUADS
// The quads (4 aligned elements) a segment spans: from the one holding column x0 - pl
// (pl <= PAD_MAX) to the one holding its last column.
#define PAD_MAX 4
#define QUAD_SPAN ((SEGMENT + 6) / 4)
// The SEGMENT input values of row iy from column x0 on, zero outside the input, loaded as
// QUAD_SPAN quads: w is a multiple of 4, so a row starts at a quad and each quad is inside
// or outside it whole.
void load_row(uint plane_base, int iy, int x0, out float seg[SEGMENT]) {
    bool row_in = iy >= 0 && iy < int(pc.h);
    uint row = (plane_base + uint(clamp(iy, 0, int(pc.h) - 1)) * pc.w) / 4u;
    int q0 = (x0 + PAD_MAX) / 4 - PAD_MAX / 4;  // floor(x0 / 4) for x0 >= -PAD_MAX
    int quads = int(pc.w) / 4;
    float v[QUAD_SPAN * 4];
    [[unroll]] for (int q = 0; q < QUAD_SPAN; ++q) {
        int qi = q0 + q;
        vec4 quad = vec4(x4[row + uint(clamp(qi, 0, quads - 1))]);
        bool in_row = row_in && qi >= 0 && qi < quads;
        [[unroll]] for (int e = 0; e < 4; ++e) {
            v[q * 4 + e] = in_row ? quad[e] : 0.0;
        }
    }
    int skip = x0 - q0 * 4;  // 0..3
    [[unroll]] for (int i = 0; i < SEGMENT; ++i) {
        float s = v[i];
        [[unroll]] for (int d = 1; d < 4; ++d) {
            s = skip == d ? v[i + d] : s;
        }
        seg[i] = s;
    }
}
#else
// The SEGMENT input values of row iy from column x0 on, zero outside the input.
void load_row(uint plane_base, int iy, int x0, out float seg[SEGMENT]) {
    bool row_in = iy >= 0 && iy < int(pc.h);
    uint row = plane_base + uint(clamp(iy, 0, int(pc.h) - 1)) * pc.w;
    [[unroll]] for (int i = 0; i < SEGMENT; ++i) {
        int ix = x0 + i;
        float v = TO_F(x[row + uint(clamp(ix, 0, int(pc.w) - 1))]);
        seg[i] = row_in && ix >= 0 && ix < int(pc.w) ? v : 0.0;
    }
}
#endif

void main() {
    uint in_plane = pc.h * pc.w;
    uint out_plane = pc.oh * pc.ow;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint item = gl_GlobalInvocationID.x; item < pc.items; item += stride) {
        uint rest = item / pc.strips_per_row;
        uint ox0 = (item - rest * pc.strips_per_row) * uint(STRIP);
        uint plane = rest / pc.bands;
        uint oy = (rest - plane * pc.bands) * pc.band_rows;
        uint oy_end = min(oy + pc.band_rows, pc.oh);
        uint c = plane % pc.channels;
        uint base = plane * in_plane;
        int x0 = int(ox0) * SX - pc.pl;

        float taps[KERNEL * KERNEL];
        [[unroll]] for (int t = 0; t < KERNEL * KERNEL; ++t) {
            taps[t] = TO_F(w[c * uint(KERNEL * KERNEL) + uint(t)]);
        }
        float b = pc.has_bias != 0u ? TO_F(bias[c]) : 0.0;

        // seg[ky]: input row oy*SY - pt + ky. The rows the first output row shares with
        // the one above it go where the shift below expects them.
        float seg[KERNEL][SEGMENT];
        int iy = int(oy) * SY - pc.pt;
        [[unroll]] for (int k = 0; k < KEPT; ++k) {
            load_row(base, iy + k, x0, seg[k + SY]);
        }
        uint out_at = plane * out_plane + oy * pc.ow + ox0;
        for (; oy < oy_end; ++oy) {
            [[unroll]] for (int k = 0; k < KEPT; ++k) {
                seg[k] = seg[k + SY];
            }
            [[unroll]] for (int k = KEPT; k < KERNEL; ++k) {
                load_row(base, iy + k, x0, seg[k]);
            }
            float acc[STRIP];
            [[unroll]] for (int j = 0; j < STRIP; ++j) {
                acc[j] = b;
            }
            [[unroll]] for (int ky = 0; ky < KERNEL; ++ky) {
                [[unroll]] for (int kx = 0; kx < KERNEL; ++kx) {
                    float wv = taps[ky * KERNEL + kx];
                    [[unroll]] for (int j = 0; j < STRIP; ++j) {
                        acc[j] += seg[ky][j * SX + kx] * wv;
                    }
                }
            }
#if QUADS
            // ow is a multiple of 4: each quad of the strip is inside the row or past it.
            [[unroll]] for (int j = 0; j < STRIP; j += 4) {
                if (ox0 + uint(j) < pc.ow) {
                    uint at = out_at + uint(j);
                    result4[at / 4u] = QUAD(conv_finish(acc[j], at),
                                            conv_finish(acc[j + 1], at + 1u),
                                            conv_finish(acc[j + 2], at + 2u),
                                            conv_finish(acc[j + 3], at + 3u));
                }
            }
#else
            [[unroll]] for (int j = 0; j < STRIP; ++j) {
                if (ox0 + uint(j) < pc.ow) {
                    result[out_at + uint(j)] = FROM_F(conv_finish(acc[j], out_at + uint(j)));
                }
            }
#endif
            iy += SY;
            out_at += pc.ow;
        }
    }
}
