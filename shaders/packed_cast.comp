#version 450
// out = cast(src) where SRC or DST is a packed type (shaders/include/packed_types.glsl): the
// integer ones to and from F32, F16, BF16, I32, I8, U8; F4E2M1 and F8E8M0 to and from F32,
// F16, BF16. Both operands are contiguous, n elements each.
//
// From an integer (I32, I8, U8, a packed integer type) to an integer type the value wraps;
// to a float it converts (through float32). From a float the value goes through float32
// (exact from F16, BF16 and the packed floats) and float_to_packed's rules, or to F32/F16/
// BF16 rounds to nearest even; a packed integer to I8/U8/I32 wraps as GLSL's constructors.
// pc.mode is float_to_packed's mode (F8E8M0: saturate and rounding).
//
// A packed output is written a byte per invocation (its elements are computed together, so
// no two invocations share a byte); the last byte's unused bits are written zero. Reads of
// a packed input use packed_types.glsl's PACKED_READ, inside the buffer for every i < n.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "packed_types.glsl"

#define TYPE_IS_INT(c) ((c) == I32 || (c) == I8 || (c) == U8 || PACKED_INT(c))

#if IS_PACKED(SRC)
#define SRC_ELEM uint8_t
#elif SRC == F32
#define SRC_ELEM uint  // float32 read as its bits (no flush of subnormals on the way)
#elif SRC == F16
#define SRC_ELEM float16_t
#elif SRC == BF16
#define SRC_ELEM uint16_t
#elif SRC == I32
#define SRC_ELEM int
#elif SRC == I8
#define SRC_ELEM int8_t
#elif SRC == U8
#define SRC_ELEM uint8_t
#else
#error "SRC must be F32, F16, BF16, I32, I8, U8 or a packed type"
#endif

#if IS_PACKED(DST)
#define DST_ELEM uint8_t
#elif DST == F32
#define DST_ELEM float
#elif DST == F16
#define DST_ELEM float16_t
#elif DST == BF16
#define DST_ELEM uint16_t
#elif DST == I32
#define DST_ELEM int
#elif DST == I8
#define DST_ELEM int8_t
#elif DST == U8
#define DST_ELEM uint8_t
#else
#error "DST must be F32, F16, BF16, I32, I8, U8 or a packed type"
#endif

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer Src { SRC_ELEM src[]; };
layout(std430, binding = 1) writeonly buffer Out { DST_ELEM result[]; };

layout(push_constant) uniform Push {
    uint n;     // elements
    uint mode;  // float_to_packed's mode
} pc;

#if TYPE_IS_INT(SRC)
int src_int(uint i) {
#if IS_PACKED(SRC)
    return packed_int(PACKED_READ(src, i, SRC), SRC);
#else
    return int(src[i]);
#endif
}
#else
// Element i as float32 bits.
uint src_bits(uint i) {
#if IS_PACKED(SRC)
    return floatBitsToUint(packed_to_float(PACKED_READ(src, i, SRC), SRC));
#elif SRC == F32
    return src[i];
#elif SRC == F16
    return floatBitsToUint(float(src[i]));
#else
    return uint(src[i]) << 16u;
#endif
}
#endif

#if IS_PACKED(DST)
// Element i's field of DST.
uint field(uint i) {
#if TYPE_IS_INT(SRC) && PACKED_INT(DST)
    return int_to_packed(src_int(i), DST);
#elif TYPE_IS_INT(SRC)
    return float_to_packed(floatBitsToUint(float(src_int(i))), DST, pc.mode);
#else
    return float_to_packed(src_bits(i), DST, pc.mode);
#endif
}
#else
DST_ELEM convert(uint i) {
#if TYPE_IS_INT(SRC) && TYPE_IS_INT(DST)
    return DST_ELEM(src_int(i));
#else
#if TYPE_IS_INT(SRC)
    float v = float(src_int(i));
#else
    float v = uintBitsToFloat(src_bits(i));
#endif
#if DST == BF16
    return uint16_t(float_to_bf16(v));
#else
    return DST_ELEM(v);
#endif
#endif
}
#endif

void main() {
#if IS_PACKED(DST) && DST != F8E8M0
    const uint per = 8u / PACKED_BITS(DST);
    uint bytes = (pc.n + per - 1u) / per;
    for (uint b = VKUMD_FIRST_INDEX; b < bytes; b += VKUMD_THREAD_COUNT) {
        uint packed = 0u;
        for (uint t = 0u; t < per; ++t) {
            uint i = b * per + t;
            if (i < pc.n) {
                packed |= field(i) << (t * PACKED_BITS(DST));
            }
        }
        result[b] = uint8_t(packed);
    }
#else
    for (uint i = VKUMD_FIRST_INDEX; i < pc.n; i += VKUMD_THREAD_COUNT) {
#if IS_PACKED(DST)
        result[i] = uint8_t(field(i));
#else
        result[i] = convert(i);
#endif
    }
#endif
}
