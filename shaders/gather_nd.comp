#version 450
// GatherND: data's first dimensions are batch dimensions (batch_stride elements each); per
// batch element, `tuples` index tuples of `depth` int32 entries each pick a slice of `slice`
// elements: out[b, t, s] = data[b, indices[b, t, 0..depth), s]. Grid-stride over the outputs;
// stored bits are copied unchanged (WIDTH 32 or 16).
//
// A negative entry counts from the end of its dimension. A tuple with an entry still out of
// range writes a slice of zero bits and reads nothing (as gather_elements.comp).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "common.glsl"

#ifndef WIDTH
#define WIDTH 32
#endif
#if WIDTH == 32
#define UNIT uint
#elif WIDTH == 16
#define UNIT uint16_t
#else
#error "WIDTH must be 32 or 16"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Data { UNIT data[]; };
layout(std430, binding = 1) readonly buffer Indices { int indices[]; };
layout(std430, binding = 2) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint n;             // outputs: batches * tuples * slice
    uint slice;         // elements a tuple picks
    uint tuples;        // index tuples per batch element
    uint depth;         // entries per tuple, <= 6
    uint batch_stride;  // data elements per batch element
    uint dims[6];       // the indexed dimensions' sizes
    uint strides[6];    // and their strides in data
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += VKUMD_THREAD_COUNT) {
        uint pick = index / pc.slice;  // batch * tuples + tuple
        uint s = index - pick * pc.slice;
        uint b = pick / pc.tuples;
        uint src = b * pc.batch_stride + s;
        bool inside = true;
        for (uint j = 0u; j < pc.depth; ++j) {
            int id = indices[pick * pc.depth + j];
            if (id < 0) {
                id += int(pc.dims[j]);
            }
            inside = inside && id >= 0 && uint(id) < pc.dims[j];
            src += inside ? uint(id) * pc.strides[j] : 0u;
        }
        result[index] = inside ? data[src] : UNIT(0);
    }
}
