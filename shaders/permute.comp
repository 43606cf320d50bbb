#version 450
// Strided copy into contiguous storage (permute / transpose). The output is seen as rows of
// its innermost dimension; each workgroup takes a block of consecutive rows and its lanes
// walk each row with the source's innermost stride; rows longer than CHUNK elements are
// split into chunks. Stored bits are copied unchanged (WIDTH 32 or 16). With VEC 4 a unit is
// four elements (the host divides sizes and strides by four: rows of contiguous runs of four).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require

#ifndef WIDTH
#define WIDTH 32
#endif
#ifndef VEC
#define VEC 1
#endif
#if WIDTH == 32 && VEC == 4
#define UNIT uvec4
#elif WIDTH == 32 && VEC == 1
#define UNIT uint
#elif WIDTH == 16 && VEC == 4
#define UNIT u16vec4
#elif WIDTH == 16 && VEC == 1
#define UNIT uint16_t
#else
#error "WIDTH must be 32 or 16 and VEC 1 or 4"
#endif

layout(local_size_x_id = 0) in;

#define CHUNK 4096u  // units of a row one workgroup copies (vkumd.framework.opset.layout)

layout(std430, binding = 0) readonly buffer Src { UNIT src[]; };
layout(std430, binding = 1) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint rows;          // product of the outer output dimensions
    uint cols;          // innermost output dimension, in units
    uint inner_stride;  // source stride along it, in units
    uint chunks;        // workgroups per row: ceil(cols / CHUNK)
    uint nouter;        // outer dimensions (<= 5), outermost first
    uint outer[5];
    uint outer_stride[5];
} pc;

void main() {
    // Each workgroup copies one contiguous block of (row, chunk) pairs. The row's source
    // offset is found by divisions once per block and then carried like an odometer from row
    // to row: the divisions are not uniform to a SIMD driver, which runs them per lane, so
    // doing them per row cost more than copying the short rows of a head permute (d = 32).
    uint pairs = pc.rows * pc.chunks;
    uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y;
    uint per_group = (pairs + groups - 1u) / groups;
    uint first_pair = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * per_group;
    uint end_pair = min(first_pair + per_group, pairs);
    if (first_pair >= end_pair) {
        return;
    }
    uint row = first_pair / pc.chunks;
    uint chunk = first_pair % pc.chunks;
    // int, not uint: glslang would give a uint[5] the push block's explicit ArrayStride,
    // which a Function-storage variable may not carry.
    int index[5];
    uint rest = row;
    uint base = 0u;
    for (int d = int(pc.nouter) - 1; d >= 0; --d) {
        index[d] = int(rest % pc.outer[d]);
        base += uint(index[d]) * pc.outer_stride[d];
        rest /= pc.outer[d];
    }
    for (uint pair = first_pair; pair < end_pair; ++pair) {
        uint first = chunk * CHUNK;
        uint last = min(first + CHUNK, pc.cols);
        uint dst = row * pc.cols;
        for (uint c = first + gl_LocalInvocationID.x; c < last; c += gl_WorkGroupSize.x) {
            result[dst + c] = src[base + c * pc.inner_stride];
        }
        if (++chunk < pc.chunks) {
            continue;
        }
        chunk = 0u;
        ++row;
        // Advance the outer index by one row, innermost outer dimension first.
        for (int d = int(pc.nouter) - 1; d >= 0; --d) {
            base += pc.outer_stride[d];
            if (uint(++index[d]) < pc.outer[d]) {
                break;
            }
            base -= pc.outer[d] * pc.outer_stride[d];
            index[d] = 0;
        }
    }
}
