#version 450
// 2-D max, average or Lp pooling over NCHW planes: out[p, oy, ox] reduces the window of taps
// x[p, oy*sy - pt + ky*dy, ox*sx - pl + kx*dx] (p = n * C + c) that fall inside the input.
// Average divides by the taps inside the input (count_include_pad 0) or by the taps inside
// the padded input, pads included but not a ceil-mode window's overhang past them
// (count_include_pad 1), as ONNX and torch define it. Max propagates NaN. Lp is
// (sum |x|^p)^(1/p) over the taps inside the input (padding adds zeros, as ONNX's LpPool).
// With INDICES 1 the kernel writes, instead of the maximum, the flat int32 index into x of
// the first tap holding it (row-major planes, or column-major with `order` 1: ONNX MaxPool's
// Indices and storage_order). One invocation per output element, grid-stride, float32
// arithmetic.
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
#ifndef INDICES
#define INDICES 0
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
#if INDICES
layout(std430, binding = 1) writeonly buffer Out { int result[]; };
#else
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };
#endif

layout(push_constant) uniform Pool {
    uint total;     // planes * oh * ow
    uint h;
    uint w;
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
    int pb;
    int pr;
    uint kind;        // 0 average, 1 max, 2 Lp
    uint count_pads;  // average: count_include_pad
    float p;          // Lp's exponent
    uint order;       // INDICES: 0 row-major, 1 column-major planes
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint ox = index % pc.ow;
        uint rest = index / pc.ow;
        uint oy = rest % pc.oh;
        uint plane = rest / pc.oh;
        int y0 = int(oy * pc.sy) - pc.pt;
        int x0 = int(ox * pc.sx) - pc.pl;
        bool is_max = pc.kind == 1u;
        float acc = is_max ? uintBitsToFloat(0xff800000u) : 0.0;  // -inf or 0
        bool nan_seen = false;
        uint inside = 0u;
        uint padded = 0u;
        uint best = 0u;  // INDICES: the flat index of the first maximum
        for (uint ky = 0u; ky < pc.kh; ++ky) {
            int iy = y0 + int(ky * pc.dy);
            if (iy >= int(pc.h) + pc.pb) {
                break;
            }
            bool row_in = iy >= 0 && iy < int(pc.h);
            for (uint kx = 0u; kx < pc.kw; ++kx) {
                int ix = x0 + int(kx * pc.dx);
                if (ix >= int(pc.w) + pc.pr) {
                    break;
                }
                padded += 1u;
                if (!row_in || ix < 0 || ix >= int(pc.w)) {
                    continue;
                }
                float v = TO_F(x[(plane * pc.h + uint(iy)) * pc.w + uint(ix)]);
                inside += 1u;
                if (is_max) {
#if INDICES
                    if (inside == 1u || v > acc) {
                        acc = v;
                        best = plane * pc.h * pc.w + (pc.order != 0u
                            ? uint(ix) * pc.h + uint(iy) : uint(iy) * pc.w + uint(ix));
                    }
#endif
                    nan_seen = nan_seen || isnan(v);
                    acc = max(acc, v);
                } else if (pc.kind == 2u) {
                    acc += pow(abs(v), pc.p);
                } else {
                    acc += v;
                }
            }
        }
        float value;
        if (is_max) {
            value = nan_seen ? uintBitsToFloat(0x7fc00000u) : acc;
        } else if (pc.kind == 2u) {
            value = pow(acc, 1.0 / pc.p);
        } else {
            uint count = pc.count_pads != 0u ? padded : inside;
            value = acc / float(max(count, 1u));
        }
#if INDICES
        result[index] = int(best);
#else
        result[index] = FROM_F(value);
#endif
    }
}
