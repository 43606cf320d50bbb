// Activation functions shared by the GEMM epilogue and the standalone activation kernels.
// Included with #include "activation.glsl". Codes match vkumd.compiler.kernels.ACTIVATIONS.
#pragma once

#define VKUMD_ACT_NONE 0u
#define VKUMD_ACT_RELU 1u
#define VKUMD_ACT_GELU 2u
#define VKUMD_ACT_GELU_TANH 3u
#define VKUMD_ACT_SILU 4u

// GLSL has no erf. Abramowitz & Stegun 7.1.26 keeps the absolute error under 1.5e-7, below
// float32 rounding of the GELU result for the inputs a network produces.
float vkumd_erf(float x) {
    float s = sign(x);
    float ax = abs(x);
    float t = 1.0 / (1.0 + 0.3275911 * ax);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                 + t * (-1.453152027 + t * 1.061405429))));
    return s * (1.0 - poly * exp(-ax * ax));
}

// erfc(a) for a >= 0 from the same approximation, without forming 1 - erf(a): for x < 0,
// 1 + erf(x / sqrt 2) = erfc(|x| / sqrt 2), and the subtraction would cancel every digit.
float vkumd_erfc_nonneg(float a) {
    float t = 1.0 / (1.0 + 0.3275911 * a);
    float poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741
                 + t * (-1.453152027 + t * 1.061405429))));
    return poly * exp(-a * a);
}

float vkumd_gelu(float x) {
    float z = x * 0.70710678118654752;
    return x >= 0.0 ? 0.5 * x * (1.0 + vkumd_erf(z)) : 0.5 * x * vkumd_erfc_nonneg(-z);
}

// 0.5 (1 + tanh u) = sigmoid(2u), written with exp of a non-positive argument: large |u|
// cannot overflow, and the negative tail does not cancel in 1 + tanh.
float vkumd_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * abs(u));
    return u >= 0.0 ? x / (1.0 + e) : x * e / (1.0 + e);
}

float vkumd_silu(float x) {
    // x * sigmoid(x), with the exponent kept non-positive for the same reason.
    float e = exp(-abs(x));
    float sig = x >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
    return x * sig;
}

float vkumd_activate(uint code, float x) {
    if (code == VKUMD_ACT_RELU) return max(x, 0.0);
    if (code == VKUMD_ACT_GELU) return vkumd_gelu(x);
    if (code == VKUMD_ACT_GELU_TANH) return vkumd_gelu_tanh(x);
    if (code == VKUMD_ACT_SILU) return vkumd_silu(x);
    return x;
}
