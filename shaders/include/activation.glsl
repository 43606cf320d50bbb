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

float vkumd_gelu(float x) {
    return 0.5 * x * (1.0 + vkumd_erf(x * 0.70710678118654752));
}

// tanh written through exp of a non-positive argument, so large |u| cannot overflow to NaN.
float vkumd_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * abs(u));
    float th = sign(u) * (1.0 - e) / (1.0 + e);
    return 0.5 * x * (1.0 + th);
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
