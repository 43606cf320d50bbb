#version 450
// ScatterElements (MODE 0) and ScatterND (MODE 1) into `result`, which already holds data
// (the host copies it first). REDUCE combines an update with the element it lands on: 0
// replaces it, 1 adds, 2 multiplies, 3 keeps the maximum, 4 the minimum (a NaN on either
// side gives NaN, as numpy's maximum and minimum).
//
// No atomics: the updates that can land on one element are all applied by one invocation,
// in the order they come, so duplicate indices give the sequential result (the last update
// wins under REDUCE 0; sums and products are accumulated in update order), the same on every
// device and every run.
// - MODE 0: one invocation per line of the updates along the axis (every coordinate but the
//   axis fixed); a line's updates land only on the same line of the output.
// - MODE 1: one invocation per element of a slice; it walks every index tuple in order (a
//   ScatterND addressing single elements is therefore one serial loop).
// Indices are int32; a negative one counts from the end of its dimension, and an update whose
// index is still out of range is dropped (nothing is read or written for it).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef MODE
#define MODE 0
#endif

#if DTYPE == F32
#define STORE_T float
#define VALUE_T float
#define TO_V(v) (v)
#define FROM_V(v) (v)
#elif DTYPE == F16
#define STORE_T float16_t
#define VALUE_T float
#define TO_V(v) float(v)
#define FROM_V(v) float16_t(v)
#elif DTYPE == BF16
#define STORE_T uint16_t
#define VALUE_T float
#define TO_V(v) bf16_to_float(uint(v))
#define FROM_V(v) uint16_t(float_to_bf16(v))
#elif DTYPE == I32
#define STORE_T int
#define VALUE_T int
#define TO_V(v) (v)
#define FROM_V(v) (v)
#else
#error "DTYPE must be F32, F16, BF16 or I32"
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint REDUCE = 0u;

layout(std430, binding = 0) readonly buffer Indices { int indices[]; };
layout(std430, binding = 1) readonly buffer Updates { STORE_T updates[]; };
layout(std430, binding = 2) buffer Out { STORE_T result[]; };

layout(push_constant) uniform Shape {
    uint lines;          // invocations: MODE 0 update lines, MODE 1 slice elements
    uint count;          // MODE 0: updates along the axis; MODE 1: index tuples
    uint depth;          // MODE 1: entries per tuple (<= 6)
    uint ndim;           // MODE 0: dimensions of shape (<= 6)
    uint axis_size;      // MODE 0: the output's length along the axis
    uint u_axis_stride;  // MODE 0: the updates' (and indices') stride along the axis
    uint o_axis_stride;  // MODE 0: the output's
    uint shape[6];       // MODE 0: the lines' dimensions; MODE 1: the indexed dimensions
    uint u_stride[6];    // MODE 0: their strides in the updates
    uint o_stride[6];    // their strides in the output
} pc;

#if DTYPE == I32
bool is_nan(int v) {
    return false;
}
#else
bool is_nan(float v) {
    return isnan(v);
}
#endif

// `old` combined with `update`, as REDUCE says (REDUCE 0 is handled by the caller).
VALUE_T combine(VALUE_T old, VALUE_T update) {
    if (REDUCE == 1u) {
        return old + update;
    }
    if (REDUCE == 2u) {
        return old * update;
    }
    if (is_nan(old) || is_nan(update)) {
        return is_nan(old) ? old : update;
    }
    return REDUCE == 3u ? max(old, update) : min(old, update);
}

void apply(uint target, uint source) {
    if (REDUCE == 0u) {
        result[target] = updates[source];  // the stored bits, unchanged
    } else {
        result[target] = FROM_V(combine(TO_V(result[target]), TO_V(updates[source])));
    }
}

void main() {
    for (uint line = VKUMD_FIRST_INDEX; line < pc.lines; line += VKUMD_THREAD_COUNT) {
#if MODE == 0
        uint rest = line;
        uint u_base = 0u;
        uint o_base = 0u;
        for (int d = int(pc.ndim) - 1; d >= 0; --d) {
            uint c = rest % pc.shape[d];
            rest /= pc.shape[d];
            u_base += c * pc.u_stride[d];
            o_base += c * pc.o_stride[d];
        }
        for (uint j = 0u; j < pc.count; ++j) {
            uint source = u_base + j * pc.u_axis_stride;
            int id = indices[source];
            if (id < 0) {
                id += int(pc.axis_size);
            }
            if (id >= 0 && uint(id) < pc.axis_size) {
                apply(o_base + uint(id) * pc.o_axis_stride, source);
            }
        }
#else
        for (uint t = 0u; t < pc.count; ++t) {
            uint target = line;
            bool inside = true;
            for (uint j = 0u; j < pc.depth; ++j) {
                int id = indices[t * pc.depth + j];
                if (id < 0) {
                    id += int(pc.shape[j]);
                }
                inside = inside && id >= 0 && uint(id) < pc.shape[j];
                target += inside ? uint(id) * pc.o_stride[j] : 0u;
            }
            if (inside) {
                apply(target, t * pc.lines + line);
            }
        }
#endif
    }
}
