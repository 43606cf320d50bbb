#version 450
// Padding of a tensor of up to five (merged) dimensions: out[o] = x[src(o)] where, per
// dimension, s = o - lead is read from the kept input range [start, start + len) (negative
// pads crop first); outside it, constant mode writes the value, reflect mirrors about the
// range's ends without repeating them, edge repeats them. The planner keeps reflect's pads
// below len, so one mirror suffices. One invocation per output element.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#if DTYPE == F32
#define ELEM float
#define FROM_F(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define FROM_F(v) float16_t(v)
#elif DTYPE == BF16
// Elements move as their bits; the constant rounds to nearest even, as the host's rounding.
#define ELEM uint16_t
#define FROM_F(v) uint16_t(float_to_bf16(v))
#else
#error "DTYPE must be F32, F16 or BF16"
#endif
#define RANK 5

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Pad {
    uint total;
    uint mode;      // 0 constant, 1 reflect, 2 edge
    float value;
    uint dims[RANK];    // output sizes, outermost first
    uint sizes[RANK];   // input sizes
    uint lead[RANK];    // positive leading pads
    uint start[RANK];   // first kept input index (leading crop)
    uint len[RANK];     // kept input length
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.total; index += VKUMD_THREAD_COUNT) {
        uint rest = index;
        uint src = 0u;
        uint stride = 1u;
        bool outside = false;
        for (int d = RANK - 1; d >= 0; --d) {
            int o = int(rest % pc.dims[d]);
            rest /= pc.dims[d];
            int s = o - int(pc.lead[d]);
            int n = int(pc.len[d]);
            if (s < 0 || s >= n) {
                if (pc.mode == 0u) {
                    outside = true;
                } else if (pc.mode == 1u) {
                    s = s < 0 ? -s : 2 * (n - 1) - s;
                } else {
                    s = clamp(s, 0, n - 1);
                }
            }
            src += uint(s + int(pc.start[d])) * stride;
            stride *= pc.sizes[d];
        }
        result[index] = outside ? FROM_F(pc.value) : x[src];
    }
}
