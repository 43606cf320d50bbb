#version 450
// ONNX's linear quantization, one element per invocation (grid-stride):
//   OP 0 dequantize: out[i] = (float(q[i]) - float(zp[j])) * scale[j]
//   OP 1 quantize:   out[i] = clamp(roundEven(x[i] / scale[j]) + zp[j]) to QTYPE's range
//                    (the packed integer types too, written a byte at a time);
//                    to a float8 format, float_to_f8(x[i] / scale[j]) (saturating or not;
//                    its zero point is zero by the spec and not read)
// j picks the scale (and zero point) of element i: with inner the elements after the axis,
// a = (i / inner) % axis_len and o = i / (inner * axis_len),
//   j = o * s_outer + (a / block) * s_axis + (i % inner) * s_inner,
// which is 0 per tensor, a per axis (s_axis 1) and the block's index when blocked
// (vkumd/framework/opset/qlinear.py fixes the words). The host checks every j is inside the
// scale (and zero point) it binds.
//
// OP (a define), QTYPE (U8, I8 or a float8 format: the quantized type) and FTYPE (F32,
// F16: the float one) pick the variant.
// The scale is float32.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "packed_types.glsl"

#if QTYPE == U8
#define Q_ELEM uint8_t
#define Q_FLOAT(x) float(uint(x))
#define Q_LOW 0.0
#define Q_HIGH 255.0
#elif QTYPE == I8
#define Q_ELEM int8_t
#define Q_FLOAT(x) float(int(x))
#define Q_LOW -128.0
#define Q_HIGH 127.0
#elif IS_FLOAT8(QTYPE)
#define Q_ELEM uint8_t
#define Q_FLOAT(x) f8_to_float(uint(x), QTYPE)
#elif IS_PACKED(QTYPE) && QTYPE != F8E8M0
// The packed types (packed_types.glsl): bytes, read by element index; a quantized output is
// written a byte per invocation, its elements computed together.
#define Q_ELEM uint8_t
#define Q_LOW float(PACKED_SIGNED(QTYPE) ? -int(1u << (PACKED_BITS(QTYPE) - 1u)) : 0)
#define Q_HIGH float(PACKED_SIGNED(QTYPE) ? int(PACKED_MASK(QTYPE) >> 1u) : int(PACKED_MASK(QTYPE)))
#else
#error "QTYPE must be U8, I8, a float8 format or a packed type but F8E8M0"
#endif
// Element k of a quantized array as float32.
#if IS_PACKED(QTYPE)
#define Q_AT(arr, k) packed_to_float(PACKED_READ(arr, k, QTYPE), QTYPE)
#else
#define Q_AT(arr, k) Q_FLOAT(arr[k])
#endif

#if FTYPE == F32
#define F_ELEM float
#elif FTYPE == F16
#define F_ELEM float16_t
#else
#error "FTYPE must be F32 or F16"
#endif

layout(local_size_x_id = 0) in;


#if OP == 1
layout(std430, binding = 0) readonly buffer Src { F_ELEM src[]; };
layout(std430, binding = 3) writeonly buffer Out { Q_ELEM result[]; };
#else
layout(std430, binding = 0) readonly buffer Src { Q_ELEM src[]; };
layout(std430, binding = 3) writeonly buffer Out { F_ELEM result[]; };
#endif
layout(std430, binding = 1) readonly buffer Scale { float scale[]; };
layout(std430, binding = 2) readonly buffer Zero { Q_ELEM zero[]; };

layout(push_constant) uniform Push {
    uint n;         // elements
    uint inner;     // elements after the axis (>= 1)
    uint axis_len;  // the axis' length (>= 1)
    uint block;     // elements of the axis per scale (>= 1)
    uint s_outer;   // scale index strides
    uint s_axis;
    uint s_inner;
    uint has_zero;  // 1: zero[] is bound and read
    uint saturate;  // float8 targets: 1 clamps to the largest finite value
} pc;

// The scale's (and zero point's) index for element i.
uint scale_index(uint i) {
    uint rest = i / pc.inner;
    uint a = rest % pc.axis_len;
    uint o = rest / pc.axis_len;
    return o * pc.s_outer + (a / pc.block) * pc.s_axis + (i % pc.inner) * pc.s_inner;
}

#if OP == 1 && IS_PACKED(QTYPE)
// Element i quantized to its field of QTYPE: integers rounded half to even, the zero point
// added, clamped; float4_e2m1 (x / scale + zero point) through float_to_packed, saturating.
uint quantize_field(uint i) {
    uint j = scale_index(i);
    float v = float(src[i]) / scale[j];
    float zp = pc.has_zero != 0u ? Q_AT(zero, j) : 0.0;
#if QTYPE == F4E2M1
    return float_to_packed(floatBitsToUint(v + zp), QTYPE, 1u);
#else
    return int_to_packed(int(clamp(roundEven(v) + zp, Q_LOW, Q_HIGH)), QTYPE);
#endif
}
#endif

void main() {
#if OP == 1 && IS_PACKED(QTYPE)
    const uint per = 8u / PACKED_BITS(QTYPE);
    uint bytes = (pc.n + per - 1u) / per;
    for (uint b = VKUMD_FIRST_INDEX; b < bytes; b += VKUMD_THREAD_COUNT) {
        uint packed = 0u;
        for (uint t = 0u; t < per; ++t) {
            if (b * per + t < pc.n) {
                packed |= quantize_field(b * per + t) << (t * PACKED_BITS(QTYPE));
            }
        }
        result[b] = uint8_t(packed);
    }
    return;
#endif
    for (uint i = VKUMD_FIRST_INDEX; i < pc.n; i += VKUMD_THREAD_COUNT) {
        uint j = scale_index(i);
        float s = scale[j];
#if OP == 1 && !IS_PACKED(QTYPE)
        float v = float(src[i]) / s;
#if IS_FLOAT8(QTYPE)
        result[i] = Q_ELEM(float_to_f8(v, QTYPE, pc.saturate != 0u));
#else
        float zp = pc.has_zero != 0u ? Q_FLOAT(zero[j]) : 0.0;
        float q = clamp(roundEven(v) + zp, Q_LOW, Q_HIGH);
#if QTYPE == U8
        result[i] = uint8_t(uint(q));
#else
        result[i] = int8_t(int(q));
#endif
#endif
#elif OP == 0
        float zp = pc.has_zero != 0u ? Q_AT(zero, j) : 0.0;
        result[i] = F_ELEM((Q_AT(src, i) - zp) * s);
#endif
    }
}
