#version 450
// ONNX's linear quantization, one element per invocation (grid-stride):
//   OP 0 dequantize: out[i] = (float(q[i]) - float(zp[j])) * scale[j]
//   OP 1 quantize:   out[i] = clamp(roundEven(x[i] / scale[j]) + zp[j]) to QTYPE's range;
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
#else
#error "QTYPE must be U8, I8 or a float8 format"
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

void main() {
    for (uint i = VKUMD_FIRST_INDEX; i < pc.n; i += VKUMD_THREAD_COUNT) {
        uint rest = i / pc.inner;
        uint a = rest % pc.axis_len;
        uint o = rest / pc.axis_len;
        uint j = o * pc.s_outer + (a / pc.block) * pc.s_axis + (i % pc.inner) * pc.s_inner;
        float s = scale[j];
#if OP == 1
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
#else
        float zp = pc.has_zero != 0u ? Q_FLOAT(zero[j]) : 0.0;
        result[i] = F_ELEM((Q_FLOAT(src[i]) - zp) * s);
#endif
    }
}
