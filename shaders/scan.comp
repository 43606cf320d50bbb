#version 450
// out[r, :] = the running sum (OP 0) or product (OP 1) of x[r, :]; one workgroup per row.
// The row is scanned in blocks of the workgroup's width: each lane loads one element, the
// block is scanned in shared memory (Hillis-Steele: log2(width) steps), and a running carry
// (the combination of every earlier block) is put in front of each result. Loads within a
// block are consecutive, so a GPU's lanes read one stretch of memory together.
// exclusive 1: each output leaves out its own element (the first is the identity); reverse
// 1: the row is scanned from its end (the block's lanes take columns cols-1, cols-2, ...).
// Floats are combined in float32 and stored in x's type; int32 wraps as numpy's int32 does.
// Defines: DTYPE (F32, F16, BF16, I32), OP (0 sum, 1 product).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef OP
#define OP 0
#endif
// The widest workgroup the planner gives (the shared block below holds one value a lane).
#define SCAN_MAX_WORKGROUP 256

#if DTYPE == F32
#define ELEM float
#define ACC float
#define LOAD(v) (v)
#define STORE(a) (a)
#elif DTYPE == F16
#define ELEM float16_t
#define ACC float
#define LOAD(v) float(v)
#define STORE(a) float16_t(a)
#elif DTYPE == BF16
#define ELEM uint16_t
#define ACC float
#define LOAD(v) bf16_to_float(uint(v))
#define STORE(a) uint16_t(float_to_bf16(a))
#elif DTYPE == I32
#define ELEM int
#define ACC int
#define LOAD(v) (v)
#define STORE(a) (a)
#else
#error "DTYPE must be F32, F16, BF16 or I32"
#endif

#if OP == 0
#define COMBINE(a, b) ((a) + (b))
#define IDENTITY ACC(0)
#elif OP == 1
#define COMBINE(a, b) ((a) * (b))
#define IDENTITY ACC(1)
#else
#error "OP must be 0 (sum) or 1 (product)"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Out { ELEM result[]; };

layout(push_constant) uniform Shape {
    uint rows;
    uint cols;
    uint exclusive;
    uint reverse;
} pc;

shared ACC block[SCAN_MAX_WORKGROUP];

void main() {
    // grid_for folds rows past maxComputeWorkGroupCount[0] into y.
    uint row = gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (row >= pc.rows) {
        return;  // uniform across the workgroup
    }
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    uint base = row * pc.cols;
    ACC carry = IDENTITY;
    for (uint start = 0u; start < pc.cols; start += width) {
        uint i = start + lane;
        uint col = pc.reverse != 0u ? pc.cols - 1u - i : i;
        block[lane] = i < pc.cols ? LOAD(x[base + col]) : IDENTITY;
        barrier();
        for (uint step = 1u; step < width; step <<= 1) {
            ACC earlier = lane >= step ? block[lane - step] : IDENTITY;
            barrier();  // every lane has read before any writes
            block[lane] = COMBINE(earlier, block[lane]);
            barrier();
        }
        ACC mine = pc.exclusive != 0u ? (lane == 0u ? IDENTITY : block[lane - 1u]) : block[lane];
        if (i < pc.cols) {
            result[base + col] = STORE(COMBINE(carry, mine));
        }
        carry = COMBINE(carry, block[width - 1u]);
        barrier();  // the block is read before the next one overwrites it
    }
}
