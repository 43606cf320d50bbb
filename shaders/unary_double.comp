#version 450
// out[i] = f(x[i]) for float64 x, computed in double: the unary math set (OP, the codes of
// vkumd.compiler.kernels.limits.DOUBLE_UNARY_OPS), built only where the device has
// shaderFloat64. The functions are double_math.glsl's (GLSL has no double exp, log, sin ...);
// abs, floor, ceil and sqrt are GLSL's double built-ins. x and out are contiguous
// and of n elements (ops copy a strided view first).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#include "common.glsl"
#include "double_math.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0u;

layout(std430, binding = 0) readonly buffer X { double x[]; };
layout(std430, binding = 1) writeonly buffer Out { double result[]; };

layout(push_constant) uniform Shape {
    uint n;
} pc;

double apply(double v) {
    switch (OP) {
        case 0u: return abs(v);
        case 1u: return -v;
        case 2u: return ceil(v);
        case 3u: return floor(v);
        case 4u: return vkumd_round_even_d(v);
        case 5u: return vkumd_sign_d(v);
        case 6u: return 1.0LF / v;
        case 7u: return sqrt(v);
        case 8u: return vkumd_exp_d(v);
        case 9u: return vkumd_log_d(v);
        case 10u: return vkumd_tanh_d(v);
        case 11u: return vkumd_sigmoid_d(v);
        case 12u: return vkumd_sin_d(v);
        case 13u: return vkumd_cos_d(v);
        case 14u: return vkumd_tan_d(v);
        case 15u: return vkumd_asin_d(v);
        case 16u: return vkumd_acos_d(v);
        case 17u: return vkumd_atan_d(v);
        case 18u: return vkumd_sinh_d(v);
        case 19u: return vkumd_cosh_d(v);
        case 20u: return vkumd_asinh_d(v);
        case 21u: return vkumd_acosh_d(v);
        case 22u: return vkumd_atanh_d(v);
    }
    return v;
}

void main() {
    for (uint i = VKUMD_FIRST_INDEX; i < pc.n; i += VKUMD_THREAD_COUNT) {
        result[i] = apply(x[i]);
    }
}
