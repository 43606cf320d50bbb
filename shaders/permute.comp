#version 450
// Strided copy into contiguous storage (permute / transpose). The output is seen as rows of
// its innermost dimension; one workgroup per row works out the row's source offset once
// (the divisions happen per row, not per element), then its lanes walk the row with the
// source's innermost stride; rows longer than CHUNK elements are split over several
// workgroups. Stored bits are copied unchanged (WIDTH 32 or 16).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require

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

#define CHUNK 4096u  // elements of a row one workgroup copies (vkumd.framework.ops.layout)

layout(std430, binding = 0) readonly buffer Src { UNIT src[]; };
layout(std430, binding = 1) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint rows;          // product of the outer output dimensions
    uint cols;          // innermost output dimension
    uint inner_stride;  // source element stride along it
    uint chunks;        // workgroups per row: ceil(cols / CHUNK)
    uint nouter;        // outer dimensions (<= 5), outermost first
    uint outer[5];
    uint outer_stride[5];
} pc;

void main() {
    // Workgroups loop over (row, chunk) pairs: the host caps the grid on CPU drivers, whose
    // cost is per workgroup.
    uint pairs = pc.rows * pc.chunks;
    uint step = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    for (uint group = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; group < pairs;
         group += step) {
        uint row = group / pc.chunks;
        uint first = (group % pc.chunks) * CHUNK;
        uint last = min(first + CHUNK, pc.cols);
        uint rest = row;
        uint base = 0u;
        for (int d = int(pc.nouter) - 1; d >= 0; --d) {
            base += (rest % pc.outer[d]) * pc.outer_stride[d];
            rest /= pc.outer[d];
        }
        uint dst = row * pc.cols;
        for (uint c = first + gl_LocalInvocationID.x; c < last; c += gl_WorkGroupSize.x) {
            result[dst + c] = src[base + c * pc.inner_stride];
        }
    }
}
