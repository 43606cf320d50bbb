#version 450
// The columns of a one-group convolution: cols[n, (c * kh + ky) * kw + kx, oy * ow + ox] =
// x[n, c, oy*sy - pt + ky*dy, ox*sx - pl + kx*dx], zero outside the input, so that the
// convolution is the GEMM w[C_out, C*kh*kw] @ cols[n]. A block of rows (row0 on) can be
// written alone, for columns too large for one buffer.
//
// An invocation owns one output pixel (consecutive lanes, consecutive pixels: the stores
// coalesce) and walks a run of rows_per column rows, stepping (kx, ky, c, n) by increments.
// The divisions that split an index into those coordinates happen once per run, not once per
// element: on a CPU driver an integer division by a run-time value is a scalar instruction
// per lane, and six of them per element made the columns cost more than the GEMM they feed.
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

layout(push_constant) uniform Im2col {
    uint rows_total;  // rows written: n * c_in * kh * kw, or a block of them
    uint pixels;      // oh * ow
    uint h;
    uint w;
    uint ow;
    uint kh;
    uint kw;
    uint sy;
    uint sx;
    uint dy;
    uint dx;
    int pt;
    int pl;
    uint rows_per;    // column rows per invocation (the grid's y covers rows_total)
    uint row0;        // the first row written: cols holds rows row0 .. row0 + rows_total - 1
} pc;

void main() {
    uint first = gl_WorkGroupID.y * pc.rows_per;
    if (first >= pc.rows_total) {
        return;
    }
    uint last = min(first + pc.rows_per, pc.rows_total);
    uint taps = pc.kh * pc.kw;
    uint plane_size = pc.h * pc.w;
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint p = gl_GlobalInvocationID.x; p < pc.pixels; p += stride) {
        uint oy = p / pc.ow;
        int y0 = int(oy * pc.sy) - pc.pt;
        int x0 = int((p - oy * pc.ow) * pc.sx) - pc.pl;
        // The run's first row: its input plane (n * c_in + c) and tap (ky, kx).
        uint plane = (pc.row0 + first) / taps;
        uint t = pc.row0 + first - plane * taps;
        uint ky = t / pc.kw;
        uint kx = t - ky * pc.kw;
        uint base = plane * plane_size;
        for (uint r = first; r < last; ++r) {
            int iy = y0 + int(ky * pc.dy);
            int ix = x0 + int(kx * pc.dx);
            ELEM v = ELEM(0.0);
            if (iy >= 0 && iy < int(pc.h) && ix >= 0 && ix < int(pc.w)) {
                v = x[base + uint(iy) * pc.w + uint(ix)];
            }
            cols[r * pc.pixels + p] = v;
            if (++kx == pc.kw) {
                kx = 0u;
                if (++ky == pc.kh) {
                    ky = 0u;
                    base += plane_size;
                }
            }
        }
    }
}
