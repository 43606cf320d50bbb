#version 450
// Quantized blocks to values: out[i, k] = dequant(w)[row(i), k] for k < K, one invocation
// per (row, block). Two uses (GATHER):
//   0: the whole matrix, row(i) = i, in DTYPE: the B operand of the prefill GEMM, written
//      once per call and read by every row tile (a pass over N * K values, small beside the
//      GEMM's M * N * K multiply-adds at prefill sizes).
//   1: an embedding lookup, row(i) = ids[i], in float32; an id outside [0, vocab) writes a
//      row of zeros and reads nothing, as the float embedding's gather does.
// Block formats as shaders/qmatmul_vec.comp. The weights are read as 16-bit halves, the
// alignment every format keeps. A partial last block writes only its values before K.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#include "elementwise_types.glsl"

#define Q8_0 1
#define Q4_0 2
#define Q4_1 3

#ifndef QTYPE
#define QTYPE Q4_1
#endif
#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef GATHER
#define GATHER 0
#endif

layout(local_size_x_id = 0) in;

#if DTYPE == F32
#define ELEM float
#define STORE(v) (v)
#else
#define ELEM float16_t
#define STORE(v) float16_t(v)
#endif

layout(std430, binding = 0) readonly buffer Ids { int ids[]; };
layout(std430, binding = 1) readonly buffer W { uint16_t ws[]; };
layout(std430, binding = 2) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Problem {
    uint rows;       // output rows
    uint blocks;     // blocks per row
    uint k;          // values per row
    uint row_units;  // 16-bit units per weight row
    uint vocab;      // rows of the table (GATHER)
} pc;

#if QTYPE == Q8_0
#define BLOCK_UNITS 17u
#define HEADER 1u
#elif QTYPE == Q4_0
#define BLOCK_UNITS 9u
#define HEADER 1u
#else
#define BLOCK_UNITS 10u
#define HEADER 2u
#endif

void main() {
    uint id = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
              + gl_GlobalInvocationID.x;
    if (id >= pc.rows * pc.blocks) {
        return;
    }
    uint i = id / pc.blocks;
    uint b = id % pc.blocks;
    uint k0 = b * 32u;
    uint count = min(32u, pc.k - k0);
    uint dst = i * pc.k + k0;
#if GATHER
    int row = ids[i];
    if (row < 0 || uint(row) >= pc.vocab) {
        for (uint j = 0; j < count; ++j) {
            result[dst + j] = STORE(0.0);
        }
        return;
    }
    uint at = uint(row) * pc.row_units + b * BLOCK_UNITS;
#else
    uint at = i * pc.row_units + b * BLOCK_UNITS;
#endif
    float d = unpackHalf2x16(uint(ws[at])).x;
#if QTYPE == Q4_1
    float mn = unpackHalf2x16(uint(ws[at + 1u])).x;
#elif QTYPE == Q4_0
    float mn = -8.0 * d;
#else
    float mn = 0.0;
#endif
    float v[32];
#if QTYPE == Q8_0
    [[unroll]] for (uint j = 0; j < 16; ++j) {
        int h = int(uint(ws[at + HEADER + j]));
        v[2 * j] = float(bitfieldExtract(h, 0, 8));
        v[2 * j + 1] = float(bitfieldExtract(h, 8, 8));
    }
#else
    [[unroll]] for (uint j = 0; j < 8; ++j) {
        uint h = uint(ws[at + HEADER + j]);
        v[2 * j] = float(h & 0xFu);
        v[2 * j + 1] = float((h >> 8) & 0xFu);
        v[2 * j + 16] = float((h >> 4) & 0xFu);
        v[2 * j + 17] = float((h >> 12) & 0xFu);
    }
#endif
    if (count == 32u) {
        [[unroll]] for (uint j = 0; j < 32; ++j) {
            result[dst + j] = STORE(d * v[j] + mn);
        }
    } else {
        for (uint j = 0; j < count; ++j) {
            result[dst + j] = STORE(d * v[j] + mn);
        }
    }
}
