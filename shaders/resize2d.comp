#version 450
// 2-D resize of NCHW planes, nearest, bilinear or bicubic. Along each axis the source coordinate of
// output index o is the exact rational (o * a + b) / d (the planner writes every ONNX
// coordinate transformation and scale that way), so the nearest rounding modes break ties
// exactly as the float64 definition does, where float32 arithmetic would flip some (a scale
// of 3 from sizes, say). Source indices are clamped to the input (edge extension), as ONNX,
// onnxruntime and torch do. Cubic reads 4 x 4 taps with ONNX's Keys weights (coefficient
// cubic_a; exclude_outside zeroes the taps outside the input and renormalises). A crop
// (tf_crop_and_resize) writes `extrapolation` where either source coordinate falls outside
// [0, size - 1]. Antialiasing (aa_y, aa_x > 0: downsampling) stretches the linear or cubic
// filter by 1 / aa along its axis: every tap t with |aa * (t - x)| inside the filter's
// support weighs filter(aa * (t - x)), the weights normalised (ONNX's antialias). One
// invocation per output element, float32 arithmetic.
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
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Resize {
    uint total;     // planes * oh * ow
    uint h;
    uint w;
    uint oh;
    uint ow;
    uint mode;      // 0 nearest, 1 bilinear, 2 bicubic
    uint rounding;  // nearest: 0 floor, 1 ceil, 2 round half down, 3 round half up
    int ay;
    int by;
    int dy;
    int ax;
    int bx;
    int dx;
    float cubic_a;
    uint exclude;      // cubic: drop the taps outside the input
    uint extrapolate;  // tf_crop_and_resize: outside coordinates read `extrapolation`
    float extrapolation;
    float aa_y;        // antialias: the filter's scale along each axis, min(scale, 1); 0 off
    float aa_x;
} pc;

// floor((o * a + b) / d) and the remainder in [0, d), d > 0 (the planner keeps |o*a + b|
// inside int32).
ivec2 split(uint o, int a, int b, int d) {
    int num = int(o) * a + b;
    int q = num >= 0 ? num / d : -((-num + d - 1) / d);
    return ivec2(q, num - q * d);
}

int nearest(ivec2 qr, int d) {
    int up;
    if (pc.rounding == 0u) {
        up = 0;
    } else if (pc.rounding == 1u) {
        up = qr.y > 0 ? 1 : 0;
    } else if (pc.rounding == 2u) {
        up = 2 * qr.y > d ? 1 : 0;
    } else {
        up = 2 * qr.y >= d ? 1 : 0;
    }
    return qr.x + up;
}

// Whether the coordinate (q + r / d) lies outside [0, size - 1].
bool outside(ivec2 qr, uint size) {
    return qr.x < 0 || qr.x > int(size) - 1 || (qr.x == int(size) - 1 && qr.y > 0);
}

// ONNX's cubic weights of the taps q - 1 .. q + 2 at fraction t, taps outside [0, size)
// zeroed and the rest renormalised when exclude_outside is set.
vec4 cubic(int q, float t, uint size) {
    float a = pc.cubic_a;
    vec4 d = vec4(t + 1.0, t, 1.0 - t, 2.0 - t);
    vec4 w = vec4(((a * d.x - 5.0 * a) * d.x + 8.0 * a) * d.x - 4.0 * a,
                  ((a + 2.0) * d.y - (a + 3.0)) * d.y * d.y + 1.0,
                  ((a + 2.0) * d.z - (a + 3.0)) * d.z * d.z + 1.0,
                  ((a * d.w - 5.0 * a) * d.w + 8.0 * a) * d.w - 4.0 * a);
    if (pc.exclude != 0u) {
        for (int k = 0; k < 4; ++k) {
            int i = q - 1 + k;
            if (i < 0 || i >= int(size)) {
                w[k] = 0.0;
            }
        }
        w /= (w.x + w.y + w.z + w.w);
    }
    return w;
}

// The linear (mode 1) or cubic filter at distance v, in filter units.
float filter_at(float v) {
    v = abs(v);
    if (pc.mode == 1u) {
        return max(1.0 - v, 0.0);
    }
    float a = pc.cubic_a;
    if (v <= 1.0) {
        return ((a + 2.0) * v - (a + 3.0)) * v * v + 1.0;
    }
    return v < 2.0 ? ((a * v - 5.0 * a) * v + 8.0 * a) * v - 4.0 * a : 0.0;
}

// An antialiased axis's taps around q + r / d: (first, count).
ivec2 taps(ivec2 qr, int d, float s) {
    float c = float(qr.x) + float(qr.y) / float(d);
    float reach = (pc.mode == 1u ? 1.0 : 2.0) / s;
    int lo = int(ceil(c - reach));
    return ivec2(lo, int(floor(c + reach)) - lo + 1);
}

float tap_weight(int t, ivec2 qr, int d, float s, uint size) {
    if (pc.exclude != 0u && (t < 0 || t >= int(size))) {
        return 0.0;
    }
    return filter_at(s * (float(t - qr.x) - float(qr.y) / float(d)));
}

float at(uint plane, int iy, int ix) {
    iy = clamp(iy, 0, int(pc.h) - 1);
    ix = clamp(ix, 0, int(pc.w) - 1);
    return TO_F(x[(plane * pc.h + uint(iy)) * pc.w + uint(ix)]);
}

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint ox = index % pc.ow;
        uint rest = index / pc.ow;
        uint oy = rest % pc.oh;
        uint plane = rest / pc.oh;
        ivec2 ry = split(oy, pc.ay, pc.by, pc.dy);
        ivec2 rx = split(ox, pc.ax, pc.bx, pc.dx);
        float value;
        if (pc.extrapolate != 0u && (outside(ry, pc.h) || outside(rx, pc.w))) {
            value = pc.extrapolation;
        } else if (pc.aa_y > 0.0) {
            ivec2 ty = taps(ry, pc.dy, pc.aa_y);
            ivec2 tx = taps(rx, pc.dx, pc.aa_x);
            float sum_y = 0.0;
            float sum_x = 0.0;
            for (int i = 0; i < ty.y; ++i) {
                sum_y += tap_weight(ty.x + i, ry, pc.dy, pc.aa_y, pc.h);
            }
            for (int j = 0; j < tx.y; ++j) {
                sum_x += tap_weight(tx.x + j, rx, pc.dx, pc.aa_x, pc.w);
            }
            value = 0.0;
            for (int i = 0; i < ty.y; ++i) {
                float wy = tap_weight(ty.x + i, ry, pc.dy, pc.aa_y, pc.h);
                float row = 0.0;
                for (int j = 0; j < tx.y; ++j) {
                    row += tap_weight(tx.x + j, rx, pc.dx, pc.aa_x, pc.w)
                           * at(plane, ty.x + i, tx.x + j);
                }
                value += wy * row;
            }
            value /= sum_y * sum_x;
        } else if (pc.mode == 0u) {
            value = at(plane, nearest(ry, pc.dy), nearest(rx, pc.dx));
        } else if (pc.mode == 2u) {
            vec4 wy = cubic(ry.x, float(ry.y) / float(pc.dy), pc.h);
            vec4 wx = cubic(rx.x, float(rx.y) / float(pc.dx), pc.w);
            value = 0.0;
            for (int i = 0; i < 4; ++i) {
                float row = 0.0;
                for (int j = 0; j < 4; ++j) {
                    row += wx[j] * at(plane, ry.x - 1 + i, rx.x - 1 + j);
                }
                value += wy[i] * row;
            }
        } else {
            float fy = float(ry.y) / float(pc.dy);
            float fx = float(rx.y) / float(pc.dx);
            float top = mix(at(plane, ry.x, rx.x), at(plane, ry.x, rx.x + 1), fx);
            float bottom = mix(at(plane, ry.x + 1, rx.x), at(plane, ry.x + 1, rx.x + 1), fx);
            value = mix(top, bottom, fy);
        }
        result[index] = FROM_F(value);
    }
}
