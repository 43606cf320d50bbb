// Helpers for row-wise kernels (softmax, norms, reductions): element types, vec4 access and
// reductions across one workgroup that owns one row. Included after the kernel enables
// GL_EXT_shader_explicit_arithmetic_types and GL_EXT_shader_16bit_storage, and, when
// SUBGROUP_REDUCE is 1, GL_KHR_shader_subgroup_basic and GL_KHR_shader_subgroup_arithmetic.
//
// Defines:
//   DTYPE            F32, F16 or BF16 (elementwise_types.glsl): storage type; math is float32.
//   VEC              1 or 4: elements per load. 4 needs rows whose length is a multiple of 4.
//   SUBGROUP_REDUCE  1: subgroupAdd/subgroupMax, then one shared slot per subgroup (needs
//                    gl_NumSubgroups <= gl_SubgroupSize, at most 64 subgroups); 0: a
//                    shared-memory tree (workgroup width at most ROW_MAX_WORKGROUP).
#pragma once
#include "elementwise_types.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef VEC
#define VEC 1
#endif
#ifndef SUBGROUP_REDUCE
#define SUBGROUP_REDUCE 1
#endif
#define ROW_MAX_WORKGROUP 256

#if DTYPE == F32
#define ELEM float
#define ELEM4 vec4
#define TO_F(x) (x)
#define TO_F4(x) (x)
#define FROM_F(v) (v)
#define FROM_F4(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define ELEM4 f16vec4
#define TO_F(x) float(x)
#define TO_F4(x) vec4(x)
#define FROM_F(v) float16_t(v)
#define FROM_F4(v) f16vec4(v)
#elif DTYPE == BF16
#define ELEM uint16_t
#define ELEM4 u16vec4
#define TO_F(x) bf16_to_float(uint(x))
#define TO_F4(x) uintBitsToFloat(uvec4(x) << 16)
#define FROM_F(v) uint16_t(float_to_bf16(v))
#define FROM_F4(v) u16vec4(float_to_bf16((v).x), float_to_bf16((v).y), \
                           float_to_bf16((v).z), float_to_bf16((v).w))
#else
#error "DTYPE must be F32, F16 or BF16"
#endif

#define NEG_INF uintBitsToFloat(0xFF800000u)
#define POS_INF uintBitsToFloat(0x7F800000u)
#define QNAN uintBitsToFloat(0x7FC00000u)

// Finite (neither inf nor NaN), read from the exponent bits. An integer test, because without
// the SignedZeroInfNanPreserve execution mode a driver may assume float values are never inf
// or NaN and fold isnan()/isinf() or comparisons away; GLSL's max() may also drop a NaN.
bool is_finite(float v) {
    return (floatBitsToUint(v) & 0x7F800000u) != 0x7F800000u;
}

// VT is what one load yields in float32; a row of `cols` elements is cols / VEC units.
// FINITE(v) is is_finite per component (bool or bvec4), for mix(); HAS_NAN(v) whether any
// component is NaN (one bool); UVT is VT's bits as
// unsigned integers (HMAX takes them too).
#if VEC == 4
#define UNIT ELEM4
#define VT vec4
#define UNIT_TO_F(x) TO_F4(x)
#define F_TO_UNIT(v) FROM_F4(v)
#define HSUM(v) (((v).x + (v).y) + ((v).z + (v).w))
#define HMAX(v) max(max((v).x, (v).y), max((v).z, (v).w))
#define FINITE(v) notEqual(floatBitsToUint(v) & uvec4(0x7F800000u), uvec4(0x7F800000u))
#define HAS_NAN(v) any(greaterThan(floatBitsToUint(v) & uvec4(0x7FFFFFFFu), uvec4(0x7F800000u)))
#define UVT uvec4
#elif VEC == 1
#define UNIT ELEM
#define VT float
#define UNIT_TO_F(x) TO_F(x)
#define F_TO_UNIT(v) FROM_F(v)
#define HSUM(v) (v)
#define HMAX(v) (v)
#define FINITE(v) is_finite(v)
#define HAS_NAN(v) ((floatBitsToUint(v) & 0x7FFFFFFFu) > 0x7F800000u)
#define UVT uint
#else
#error "VEC must be 1 or 4"
#endif

// Declared here, before any function reads gl_WorkGroupSize: glslang gives code above the
// declaration the default size of 1. The width is specialization constant 0 (WORKGROUP).
layout(local_size_x_id = 0) in;

// The row this workgroup owns; grid_for folds rows past maxComputeWorkGroupCount[0] into y.
uint row_index() {
    return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

#if SUBGROUP_REDUCE
shared float row_scratch[64];

float row_sum(float v) {
    v = subgroupAdd(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    barrier();  // the previous reduction may still be reading the scratch slots
    if (subgroupElect()) {
        row_scratch[gl_SubgroupID] = v;
    }
    barrier();
    v = gl_SubgroupInvocationID < gl_NumSubgroups ? row_scratch[gl_SubgroupInvocationID] : 0.0;
    return subgroupAdd(v);
}

float row_max(float v) {
    v = subgroupMax(v);
    if (gl_NumSubgroups == 1u) {
        return v;
    }
    barrier();
    if (subgroupElect()) {
        row_scratch[gl_SubgroupID] = v;
    }
    barrier();
    v = gl_SubgroupInvocationID < gl_NumSubgroups ? row_scratch[gl_SubgroupInvocationID]
                                                  : NEG_INF;
    return subgroupMax(v);
}
#else
shared float row_scratch[ROW_MAX_WORKGROUP];

// Pairs at distance 1, 2, 4, ... are combined, so any workgroup width works.
float row_sum(float v) {
    uint lane = gl_LocalInvocationID.x;
    barrier();  // the previous reduction may still be reading the scratch slots
    row_scratch[lane] = v;
    barrier();
    for (uint step = 1u; step < gl_WorkGroupSize.x; step <<= 1) {
        if ((lane & (2u * step - 1u)) == 0u && lane + step < gl_WorkGroupSize.x) {
            row_scratch[lane] += row_scratch[lane + step];
        }
        barrier();
    }
    return row_scratch[0];
}

float row_max(float v) {
    uint lane = gl_LocalInvocationID.x;
    barrier();
    row_scratch[lane] = v;
    barrier();
    for (uint step = 1u; step < gl_WorkGroupSize.x; step <<= 1) {
        if ((lane & (2u * step - 1u)) == 0u && lane + step < gl_WorkGroupSize.x) {
            row_scratch[lane] = max(row_scratch[lane], row_scratch[lane + step]);
        }
        barrier();
    }
    return row_scratch[0];
}
#endif
