#version 450
// Grid sampling of NCHW or NCDHW x at the normalized coordinates of a grid (ONNX GridSample,
// torch's grid_sample). grid[n, o..., :] holds (x, y[, z]) in [-1, 1], the reverse of x's
// spatial order. Each coordinate is denormalized (align_corners: -1 and 1 are the centres
// of the edge pixels, else their outer edges); nearest rounds half to even (as onnxruntime
// and torch do); a coordinate outside the borders is clamped (border) or reflected
// (reflection) before taps are taken, then each tap outside the input reads 0 (zeros),
// the edge (border) or its reflection (reflection). Linear weighs 2 taps per axis, cubic 4
// (Keys, a = -0.75). A 2-D problem runs as depth 1, its z axis one tap of weight 1. Every
// read index is clamped into the input, so no read leaves the buffer. One invocation per
// output element, float32 arithmetic.
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
layout(std430, binding = 1) readonly buffer Grid { ELEM grid[]; };
layout(std430, binding = 2) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform GridSample {
    uint total;     // n * c * od * oh * ow
    uint c;
    uint d;         // input depth (1 for 2-D)
    uint h;
    uint w;
    uint points;    // od * oh * ow: output positions per plane
    uint rank;      // 2 or 3 spatial axes (the grid's last extent)
    uint mode;      // 0 nearest, 1 linear, 2 cubic
    uint padding;   // 0 zeros, 1 border, 2 reflection
    uint align;     // align_corners
} pc;

// Reflect v into [lo, hi] by its near border until it lands inside (ONNX's _gs_reflect).
float reflect_into(float v, float lo, float hi) {
    float span = hi - lo;
    if (span <= 0.0) {
        return lo;
    }
    if (v < lo) {
        float dv = lo - v;
        float k = floor(dv / span);
        float r = dv - k * span;
        return mod(k, 2.0) == 0.0 ? lo + r : hi - r;
    }
    if (v > hi) {
        float dv = v - hi;
        float k = floor(dv / span);
        float r = dv - k * span;
        return mod(k, 2.0) == 0.0 ? hi - r : lo + r;
    }
    return v;
}

float low_border(uint size) {
    return pc.align != 0u ? 0.0 : -0.5;
}

float high_border(uint size) {
    return pc.align != 0u ? float(size) - 1.0 : float(size) - 0.5;
}

// A tap index as padding reads it: -1 (reads 0) for zeros outside the input, else an index
// inside [0, size).
int tap(int i, uint size) {
    int last = int(size) - 1;
    if (i >= 0 && i <= last) {
        return i;
    }
    if (pc.padding == 0u) {
        return -1;
    }
    if (pc.padding == 2u) {
        i = int(reflect_into(float(i), low_border(size), high_border(size)));
    }
    return clamp(i, 0, last);
}

// Keys' cubic weights of the taps floor(c) - 1 .. + 2 at fraction t (a = -0.75).
vec4 cubic(float t) {
    const float a = -0.75;
    vec4 dd = vec4(t + 1.0, t, 1.0 - t, 2.0 - t);
    return vec4(((a * dd.x - 5.0 * a) * dd.x + 8.0 * a) * dd.x - 4.0 * a,
                ((a + 2.0) * dd.y - (a + 3.0)) * dd.y * dd.y + 1.0,
                ((a + 2.0) * dd.z - (a + 3.0)) * dd.z * dd.z + 1.0,
                ((a * dd.w - 5.0 * a) * dd.w + 8.0 * a) * dd.w - 4.0 * a);
}

// One axis: its taps' indices (-1: reads 0), weights and count from normalized coordinate g.
void axis_taps(float g, uint size, out ivec4 index, out vec4 weight, out int count) {
    float v = pc.align != 0u ? (g + 1.0) / 2.0 * (float(size) - 1.0)
                             : ((g + 1.0) * float(size) - 1.0) / 2.0;
    if (pc.mode == 0u) {
        v = roundEven(v);
    }
    float lo = low_border(size);
    float hi = high_border(size);
    if (v < lo || v > hi) {
        if (pc.padding == 1u) {
            v = clamp(v, 0.0, float(size) - 1.0);
        } else if (pc.padding == 2u) {
            v = reflect_into(v, lo, hi);
        }
    }
    index = ivec4(-1);
    weight = vec4(0.0);
    if (pc.mode == 0u) {
        index.x = tap(int(v), size);  // int() truncates toward zero, as the definition does
        weight.x = 1.0;
        count = 1;
        return;
    }
    float f = floor(v);
    int first = int(f);
    float t = v - f;
    if (pc.mode == 1u) {
        index.xy = ivec2(tap(first, size), tap(first + 1, size));
        weight.xy = vec2(1.0 - t, t);
        count = 2;
        return;
    }
    index = ivec4(tap(first - 1, size), tap(first, size), tap(first + 1, size),
                  tap(first + 2, size));
    weight = cubic(t);
    count = 4;
}

void main() {
    for (uint i = VKUMD_FIRST_INDEX; i < pc.total; i += VKUMD_THREAD_COUNT) {
        uint point = i % pc.points;
        uint plane = i / pc.points;  // n * c + channel
        uint n = plane / pc.c;
        uint g = (n * pc.points + point) * pc.rank;
        ivec4 ix, iy, iz;
        vec4 wx, wy, wz;
        int kx, ky, kz;
        axis_taps(TO_F(grid[g]), pc.w, ix, wx, kx);
        axis_taps(TO_F(grid[g + 1u]), pc.h, iy, wy, ky);
        if (pc.rank == 3u) {
            axis_taps(TO_F(grid[g + 2u]), pc.d, iz, wz, kz);
        } else {
            iz = ivec4(0, -1, -1, -1);
            wz = vec4(1.0, 0.0, 0.0, 0.0);
            kz = 1;
        }
        uint base = plane * pc.d * pc.h * pc.w;
        float value = 0.0;
        for (int a = 0; a < kz; ++a) {
            if (iz[a] < 0) {
                continue;
            }
            float slab = 0.0;
            for (int b = 0; b < ky; ++b) {
                if (iy[b] < 0) {
                    continue;
                }
                uint row_base = base + (uint(iz[a]) * pc.h + uint(iy[b])) * pc.w;
                float row = 0.0;
                for (int e = 0; e < kx; ++e) {
                    if (ix[e] >= 0) {
                        row += wx[e] * TO_F(x[row_base + uint(ix[e])]);
                    }
                }
                slab += wy[b] * row;
            }
            value += wz[a] * slab;
        }
        result[i] = FROM_F(value);
    }
}
