#version 450
// out = convert(src) or out = src * alpha, with src broadcast into out's shape (stride 0
// repeats a dimension). One pipeline per SRC/DST/OP serves every shape: shape, strides and
// alpha are push constants.
//
// SRC and DST (F32, F16, BF16, I32, the float8 formats; see elementwise_types.glsl) are the
// element types (float8 converts to and from the float types alone, through float32, which
// holds each float8 value exactly; to float8, alpha's bit 0 says whether to saturate). OP 0
// converts: equal types copy the stored bits unchanged; float -> int32 truncates toward zero
// (out-of-range values and NaN are undefined, as in GLSL); everything else goes through
// float32, rounding to nearest even (int32 -> float16/bfloat16 rounds twice, once to float32:
// exact up to 2^24). OP 1 scales (SRC == DST): floats multiply in float32 by alpha (float32
// bits), int32 multiplies by alpha (an int) and wraps.
//
// Both sides may be strided views of larger tensors: src is read at src_offset plus its
// strides, out written at dst_offset plus dst_stride (the row-major strides of shape for a
// whole output). Slicing, concatenation and split are such copies.
//
// The wider types (I16, U16, U32, U64, F64, I64), the 8-bit integers (I8, U8) and BOOL
// convert (OP 0 only) through the source's own value type -- int, uint, uint64_t, double or
// float -- with GLSL's constructors, never through float32 where one side is F64: integers to
// integers wrap to the target's bits (numpy's astype); floats to integers truncate toward
// zero (out of range undefined); float64 to float32 rounds once to nearest even (to the
// 16-bit floats see FROM_VALUE); to BOOL stores whether the value is nonzero.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#if defined(EMU64) && EMU64 == 1 && (SRC == F64 || DST == F64)
#define I64_DOUBLE 1
#endif
#include "int64_emulated.glsl"
// I64_WORDS: int64 is one side and the device has no shaderInt64 (EMU64 1): it is a uvec2 of
// two 32-bit words (int64_emulated.glsl), converted by the functions there, VEC 1 only.
#if defined(EMU64) && EMU64 == 1 && (SRC == I64 || DST == I64)
#define I64_WORDS 1
#else
#define I64_WORDS 0
#endif

#ifndef SRC
#define SRC F32
#endif
#ifndef DST
#define DST SRC
#endif

#if SRC == F32
#define SRC_ELEM float
#define SRC_ELEM4 vec4
#define SRC_FLOAT(x) (x)
#elif SRC == F16
#define SRC_ELEM float16_t
#define SRC_ELEM4 f16vec4
#define SRC_FLOAT(x) float(x)
#elif SRC == BF16
#define SRC_ELEM uint16_t
#define SRC_ELEM4 u16vec4
#define SRC_FLOAT(x) bf16_to_float(uint(x))
#elif SRC == I32
#define SRC_ELEM int
#define SRC_ELEM4 ivec4
#define SRC_FLOAT(x) float(x)
#elif IS_FLOAT8(SRC)
#define SRC_ELEM uint8_t
#define SRC_ELEM4 u8vec4
#define SRC_FLOAT(x) f8_to_float(uint(x), SRC)
#elif SRC == I16
#define SRC_ELEM int16_t
#define SRC_ELEM4 i16vec4
#define SRC_VALUE(x) int(x)
#elif SRC == U16
#define SRC_ELEM uint16_t
#define SRC_ELEM4 u16vec4
#define SRC_VALUE(x) uint(x)
#elif SRC == U32
#define SRC_ELEM uint
#define SRC_ELEM4 uvec4
#define SRC_VALUE(x) (x)
#elif SRC == U64
#define SRC_ELEM uint64_t
#define SRC_ELEM4 u64vec4
#define SRC_VALUE(x) (x)
#elif SRC == F64
#define SRC_ELEM double
#define SRC_ELEM4 dvec4
#define SRC_VALUE(x) (x)
#elif SRC == I64 && I64_WORDS
#define SRC_ELEM uvec2
#define SRC_ELEM4 uvec4
#define SRC_VALUE(x) (x)
#elif SRC == I64
#define SRC_ELEM int64_t
#define SRC_ELEM4 i64vec4
#define SRC_VALUE(x) (x)
#elif SRC == BOOL || SRC == U8
#define SRC_ELEM uint8_t
#define SRC_ELEM4 u8vec4
#define SRC_VALUE(x) uint(x)
#elif SRC == I8
#define SRC_ELEM int8_t
#define SRC_ELEM4 i8vec4
#define SRC_VALUE(x) int(x)
#else
#error "SRC must be F32, F16, BF16, I32, I16, U16, U32, U64, F64, I64, BOOL, I8, U8 or a float8 format"
#endif
// A source of the original four read as its own value type, for conversions to a wider type.
#ifndef SRC_VALUE
#if SRC == I32
#define SRC_VALUE(x) (x)
#else
#define SRC_VALUE(x) SRC_FLOAT(x)
#endif
#endif

#if DST == F32
#define DST_ELEM float
#define DST_ELEM4 vec4
#define FROM_FLOAT(v) (v)
#elif DST == F16
#define DST_ELEM float16_t
#define DST_ELEM4 f16vec4
#define FROM_FLOAT(v) float16_t(v)
#elif DST == BF16
#define DST_ELEM uint16_t
#define DST_ELEM4 u16vec4
#define FROM_FLOAT(v) uint16_t(float_to_bf16(v))
#elif DST == I32
#define DST_ELEM int
#define DST_ELEM4 ivec4
#define FROM_FLOAT(v) int(v)
#elif IS_FLOAT8(DST)
// alpha's bit 0 is Cast's saturate (vkumd/framework/float8.py gives the rules).
#define DST_ELEM uint8_t
#define DST_ELEM4 u8vec4
#define FROM_FLOAT(v) uint8_t(float_to_f8(v, DST, (pc.alpha & 1u) != 0u))
#elif DST == I16
#define DST_ELEM int16_t
#define DST_ELEM4 i16vec4
#elif DST == U16
#define DST_ELEM uint16_t
#define DST_ELEM4 u16vec4
#elif DST == U32
#define DST_ELEM uint
#define DST_ELEM4 uvec4
#elif DST == U64
#define DST_ELEM uint64_t
#define DST_ELEM4 u64vec4
#elif DST == F64
#define DST_ELEM double
#define DST_ELEM4 dvec4
#elif DST == I64 && I64_WORDS
#define DST_ELEM uvec2
#define DST_ELEM4 uvec4
#elif DST == I64
#define DST_ELEM int64_t
#define DST_ELEM4 i64vec4
#elif DST == BOOL || DST == U8
#define DST_ELEM uint8_t
#define DST_ELEM4 u8vec4
#elif DST == I8
#define DST_ELEM int8_t
#define DST_ELEM4 i8vec4
#else
#error "DST must be F32, F16, BF16, I32, I16, U16, U32, U64, F64, I64, BOOL, I8, U8 or a float8 format"
#endif
// bool and the bytes go through their values too.
#define WIDE_TYPE(t) (t == I16 || t == U16 || t == U32 || t == U64 || t == F64 || t == I64 \
                      || t == BOOL || t == I8 || t == U8)
#if WIDE_TYPE(SRC) || WIDE_TYPE(DST)
#define WIDE 1
#else
#define WIDE 0
#endif
// A value of any source type as DST (WIDE conversions): bfloat16 through float32; bool is
// whether the value is nonzero (NaN is, as in numpy and PyTorch).
#if DST == BOOL && SRC != BOOL
#define FROM_VALUE(v) uint8_t((v) != 0 ? 1u : 0u)
#elif DST == BF16
#define FROM_VALUE(v) uint16_t(float_to_bf16(float(v)))
#elif (DST == U8 || DST == U16 || DST == U32 || DST == U64) && (SRC == F32 || SRC == F16 || SRC == BF16 || SRC == F64)
// Truncated first: a float in (-1, 0) becomes -0.0, which converts to 0 (numpy's), not to
// the undefined conversion of a negative float to an unsigned type.
#define FROM_VALUE(v) DST_ELEM(trunc(v))
#else
#define FROM_VALUE(v) DST_ELEM(v)
#endif
// float64 to float16 is the driver's conversion: lavapipe converts through float32, which
// can round twice for values within 2^-29 (relative) of a float16 tie; to bfloat16 always
// through float32.

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0u;  // 0 convert (or copy), 1 scale
// VEC 4: each invocation converts four consecutive elements, one vector load and one vector
// store (lavapipe turns every per-lane access into a gather or scatter). The planner picks
// it only where the output is contiguous from a dst_offset that is a multiple of 4 and the
// source is read as in elementwise_binary.comp's vector paths (src_offset a multiple of 4);
// BCAST 1: the source is one element per row (stride 0 along the last dimension). Each
// component goes through the same convert() as the scalar path, so both give the same bits.
layout(constant_id = 2) const uint VEC = 1u;
layout(constant_id = 3) const uint BCAST = 0u;

layout(std430, binding = 0) readonly buffer Src { SRC_ELEM src[]; };
layout(std430, binding = 1) writeonly buffer Out { DST_ELEM result[]; };
// The same bindings as arrays of 4-vectors (aliases), for VEC 4.
layout(std430, binding = 0) readonly buffer Src4 { SRC_ELEM4 src4[]; };
layout(std430, binding = 1) writeonly buffer Out4 { DST_ELEM4 result4[]; };

layout(push_constant) uniform Shape {
    uint n;           // elements of the output
    uint ndim;        // dimensions used (<= 6), innermost last; 0: source contiguous
    uint shape[6];    // output shape
    uint stride[6];   // src element strides in the output's coordinates
    uint alpha;       // OP 1: float32 bits, or an int for int32; OP 0 to float8: saturate
    uint src_offset;  // elements of src before the first one read
    uint dst_offset;  // elements of out before the first one written
    uint dst_stride[6];  // out element strides (row-major of shape unless out is a slice)
} pc;

#if I64_WORDS && SRC == I64 && DST != I64
// The emulated int64 as DST: floats rounded once from the 64-bit value, integers wrapped
// from the low word (numpy's astype).
#if DST == F32
#define FROM_I64(x) i64_to_float(x)
#elif DST == F16
#define FROM_I64(x) float16_t(i64_to_float(x))
#elif DST == BF16
#define FROM_I64(x) uint16_t(float_to_bf16(i64_to_float(x)))
#elif DST == F64
#define FROM_I64(x) i64_to_double(x)
#elif DST == I32
#define FROM_I64(x) int(x.x)
#elif DST == U32
#define FROM_I64(x) (x.x)
#elif DST == I16
#define FROM_I64(x) int16_t(int(x.x))
#elif DST == U16
#define FROM_I64(x) uint16_t(x.x)
#else
#error "the emulated int64 converts to F32, F16, BF16, F64, I32, U32, I16 and U16"
#endif
#elif I64_WORDS && DST == I64 && SRC != I64
// ... and as SRC: floats truncated toward zero, integers widened by their sign.
#if SRC == F32 || SRC == F16 || SRC == BF16
#define TO_I64(x) i64_from_float(SRC_FLOAT(x))
#elif SRC == F64
#define TO_I64(x) i64_from_double(x)
#elif SRC == I32 || SRC == I16
#define TO_I64(x) i64_from_int(int(x))
#elif SRC == U32 || SRC == U16
#define TO_I64(x) i64_from_uint(uint(x))
#else
#error "the emulated int64 converts from F32, F16, BF16, F64, I32, U32, I16 and U16"
#endif
#endif

DST_ELEM convert(SRC_ELEM x) {
#if I64_WORDS && SRC == DST
    return x;
#elif I64_WORDS && SRC == I64
    return FROM_I64(x);
#elif I64_WORDS
    return TO_I64(x);
#elif SRC == DST && WIDE
    return x;  // a copy (the wider types are not scaled)
#elif WIDE
    return FROM_VALUE(SRC_VALUE(x));
#elif SRC == DST && SRC == I32
    return OP == 1u ? x * int(pc.alpha) : x;
#elif SRC == DST
    if (OP == 1u) {
        return FROM_FLOAT(SRC_FLOAT(x) * uintBitsToFloat(pc.alpha));
    }
    return x;
#else
    return FROM_FLOAT(SRC_FLOAT(x));
#endif
}

void convert_one(uint index, uint is) {
    result[index] = convert(src[is]);
}

// Vector q of the output from source vector is, or from source element is where BCAST.
void convert4(uint q, uint is) {
#if !I64_WORDS  // not a variant there: the emulated int64 converts VEC 1 only
    if (BCAST != 0u) {
        result4[q] = DST_ELEM4(convert(src[is]));
        return;
    }
    SRC_ELEM4 v = src4[is];
    result4[q] = DST_ELEM4(convert(v.x), convert(v.y), convert(v.z), convert(v.w));
#endif
}

void main() {
    uint step = VKUMD_THREAD_COUNT;
    if (VEC == 4u) {
        bool one = BCAST != 0u;
        uint dq = pc.dst_offset / 4u;
        uint sq = pc.src_offset / 4u;
        if (pc.ndim <= 1u) {
            uint quads = pc.n / 4u;
            for (uint q = VKUMD_FIRST_INDEX; q < quads; q += step) {
                convert4(dq + q, one ? pc.src_offset : sq + q);
            }
            // Elements past the last full four (fewer than the invocations): one each.
            uint t = quads * 4u + VKUMD_FIRST_INDEX;
            if (t < pc.n) {
                convert_one(pc.dst_offset + t, pc.src_offset + (one ? 0u : t));
            }
            return;
        }
        // ndim 2, rows a multiple of 4: (row, vector column) carried as below.
        uint cols = pc.shape[1] / 4u;
        uint r = one ? pc.stride[0] : pc.stride[0] / 4u;
        uint c = one ? 0u : 1u;
        uint base = one ? pc.src_offset : sq;
        uint first = VKUMD_FIRST_INDEX;
        uint row = first / cols;
        uint col = first - row * cols;
        uint step_rows = step / cols;
        uint step_cols = step - step_rows * cols;
        for (uint q = first; q < pc.n / 4u; q += step) {
            convert4(dq + q, base + row * r + col * c);
            col += step_cols;
            row += step_rows;
            if (col >= cols) {
                col -= cols;
                row += 1u;
            }
        }
        return;
    }
    if (pc.ndim == 0u) {
        // The source has the output's shape: no index arithmetic at all.
        for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
            convert_one(index + pc.dst_offset, index + pc.src_offset);
        }
        return;
    }
    if (pc.ndim <= 2u) {
        // As in elementwise_binary.comp: (row, column) split once, then carried.
        uint cols = pc.shape[pc.ndim - 1u];
        uint s0 = pc.ndim == 2u ? pc.stride[0] : 0u;
        uint s1 = pc.stride[pc.ndim - 1u];
        uint d0 = pc.ndim == 2u ? pc.dst_stride[0] : 0u;
        uint d1 = pc.dst_stride[pc.ndim - 1u];
        uint first = VKUMD_FIRST_INDEX;
        uint row = first / cols;
        uint col = first - row * cols;
        uint step_rows = step / cols;
        uint step_cols = step - step_rows * cols;
        for (uint index = first; index < pc.n; index += step) {
            convert_one(pc.dst_offset + row * d0 + col * d1,
                        pc.src_offset + row * s0 + col * s1);
            col += step_cols;
            row += step_rows;
            if (col >= cols) {
                col -= cols;
                row += 1u;
            }
        }
        return;
    }
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
        uint rest = index;
        uint is = pc.src_offset;
        uint id = pc.dst_offset;
        for (int d = int(pc.ndim) - 1; d >= 0; --d) {
            uint coord = rest % pc.shape[d];
            rest /= pc.shape[d];
            is += coord * pc.stride[d];
            id += coord * pc.dst_stride[d];
        }
        convert_one(id, is);
    }
}
