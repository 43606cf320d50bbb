#version 450
// Trilu (torch.triu / torch.tril) over the last two dimensions of x: an element at (row,
// col) is kept where col - row >= k (upper) or col - row <= k (lower), else zero bits are
// written. Grid-stride over the elements; stored bits are copied unchanged (WIDTH 32 or 16).
// x and out may be one buffer (in place): each invocation reads its element first.
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

layout(std430, binding = 0) readonly buffer Src { UNIT x[]; };
layout(std430, binding = 1) writeonly buffer Out { UNIT result[]; };

layout(push_constant) uniform Shape {
    uint n;      // elements
    uint rows;   // x.shape[-2]
    uint cols;   // x.shape[-1]
    int k;       // the diagonal, clamped by the host to [-rows, cols]
    uint upper;  // 1: keep col - row >= k; 0: keep col - row <= k
} pc;

void main() {
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += VKUMD_THREAD_COUNT) {
        uint line = index / pc.cols;
        int col = int(index - line * pc.cols);
        int row = int(line % pc.rows);
        int diagonal = col - row;
        bool keep = pc.upper != 0u ? diagonal >= pc.k : diagonal <= pc.k;
        result[index] = keep ? x[index] : UNIT(0);
    }
}
