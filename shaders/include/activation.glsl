// Activation functions shared by the GEMM epilogue and the standalone activation kernels.
// Included with #include "activation.glsl". Codes match vkumd.compiler.kernels.ACTIVATIONS.
#pragma once

#define VKUMD_ACT_NONE 0u
#define VKUMD_ACT_RELU 1u
#define VKUMD_ACT_GELU 2u
#define VKUMD_ACT_GELU_TANH 3u
#define VKUMD_ACT_SILU 4u

// exp(hi + lo) for a large |hi| that float32 holds exactly, |lo| small. The driver's exp(y)
// multiplies y by log2(e) first, an error of about |y| * 6e-8 relative to the result (4e-6 at
// y = -65, measured on lavapipe); reducing by k ln 2 here (Cody-Waite, ln 2 split so that
// k * LN2_HI is exact for |k| < 256) leaves the driver an argument under ln(2)/2. hi is
// clamped where the result is zero anyway, so that ldexp's exponent stays in its defined range.
float vkumd_exp_split(float hi, float lo) {
    const float LN2_HI = 0.693145751953125;
    const float LN2_LO = 1.42860682030941723212e-6;
    float k = floor(max(hi, -140.0) * 1.44269504088896341 + 0.5);
    float r = ((hi - k * LN2_HI) - k * LN2_LO) + lo;
    return ldexp(exp(r), int(k));
}

// GLSL has no erf. erfc(a) for a >= 0 is t * exp(-a^2 + P(t)), t = 1 / (1 + a/2), with the
// Chebyshev-fitted polynomial P of Numerical Recipes' erfcc: its *relative* error stays under
// 1.2e-7 for every a >= 0, so GELU keeps float32 accuracy deep into its negative tail too,
// where 1 + erf(x) would cancel every digit.
float vkumd_erfc_poly(float t) {
    return -1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
           + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
           + t * (-0.82215223 + t * 0.17087277))))))));
}

// v^2 as s^2 + (v - s)(v + s), s = v cut to 8 fraction bits: s^2 is exact below 16 and the
// rest is small, so the large part of an exponent -v^2 carries no rounding into exp (a
// rounded v^2 costs 2 v^2 * 6e-8 of relative error in erfc: 8e-6 at v = 8.4).
vec2 vkumd_square_split(float v) {
    float s = floor(min(v, 16.0) * 256.0) / 256.0;
    return vec2(s * s, (v - s) * (v + s));
}

// erfc(a), a >= 0.
float vkumd_erfc_nonneg(float a) {
    float t = 1.0 / (1.0 + 0.5 * a);
    vec2 sq = vkumd_square_split(a);
    return t * vkumd_exp_split(-sq.x, vkumd_erfc_poly(t) - sq.y);
}

// erfc(v / sqrt 2), v >= 0, as GELU needs it: the exponent -v^2 / 2 is taken from v itself,
// not from a rounded v / sqrt 2.
float vkumd_erfc_nonneg_scaled(float v) {
    float t = 1.0 / (1.0 + 0.35355339059327376 * v);
    vec2 sq = vkumd_square_split(v);
    return t * vkumd_exp_split(-0.5 * sq.x, vkumd_erfc_poly(t) - 0.5 * sq.y);
}

float vkumd_erf(float x) {
    float c = vkumd_erfc_nonneg(abs(x));
    return x >= 0.0 ? 1.0 - c : c - 1.0;
}

// erf itself: 1 - erfc(|x|) cancels as x nears 0, so there the odd Taylor series of
// 2/sqrt(pi) (x - x^3/3 + x^5/10 - ...) to x^11 (its next term is under 2e-8 relative for
// |x| < 0.5).
float vkumd_erf_accurate(float x) {
    float a = abs(x);
    if (a < 0.5) {
        float z = x * x;
        return 1.1283791670955126 * x * (1.0 + z * (-1.0 / 3.0 + z * (0.1 + z * (-1.0 / 42.0
               + z * (1.0 / 216.0 + z * (-1.0 / 1320.0))))));
    }
    return vkumd_erf(x);
}

// exp(y) - 1 for y <= 0 without the cancellation near 0 (Taylor to y^8 there).
float vkumd_expm1_nonpos(float y) {
    if (y > -0.5) {
        return y * (1.0 + y * (0.5 + y * (1.0 / 6.0 + y * (1.0 / 24.0 + y * (1.0 / 120.0
               + y * (1.0 / 720.0 + y * (1.0 / 5040.0 + y * (1.0 / 40320.0))))))));
    }
    return exp(y) - 1.0;
}

// tanh|x| = -expm1(-2|x|) / (2 + expm1(-2|x|)): no overflow for large |x| (it tends to 1), no
// cancellation for small |x| (where (e^2x - 1) / (e^2x + 1) loses its digits).
float vkumd_tanh(float x) {
    float m = vkumd_expm1_nonpos(-2.0 * abs(x));
    float t = -m / (2.0 + m);
    return x < 0.0 ? -t : t;
}

// The selects below pick a numerator, not a quotient: a SIMD driver runs both arms of a
// divergent select, so `c ? a / d : b / d` written out is two divisions where
// `(c ? a : b) / d` is one. The same single IEEE division either way, so the same bits
// (tests/framework/test_activation_bits.py checks them against the two-division forms).
// lavapipe 25's compiler already folded the two-division forms into one (the x86 code of a
// silu kernel was the same either way, GALLIVM_DEBUG=asm), so there it changes no time;
// written so, no compiler has to find the fold.
float vkumd_sigmoid(float x) {
    float e = exp(-abs(x));
    return (x >= 0.0 ? 1.0 : e) / (1.0 + e);
}

float vkumd_gelu(float x) {
    // 1 + erf(z) = 2 - erfc(z) for z >= 0, and erfc(-z) for z < 0: erfc(|z|) either way,
    // computed once: a SIMD driver runs both arms of a divergent select (on lavapipe with
    // LP_NUM_THREADS=0, one erfc instead of two took a 4M-float gelu from 19.0 to 13.1 ms
    // of CPU time). The same operations as the two-armed form, so the same bits.
    float c = vkumd_erfc_nonneg_scaled(abs(x));
    return 0.5 * x * (x >= 0.0 ? 2.0 - c : c);
}

// 0.5 (1 + tanh u) = sigmoid(2u), written with exp of a non-positive argument: large |u|
// cannot overflow, and the negative tail does not cancel in 1 + tanh.
float vkumd_gelu_tanh(float x) {
    float u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    float e = exp(-2.0 * abs(u));
    return (u >= 0.0 ? x : x * e) / (1.0 + e);
}

float vkumd_silu(float x) {
    // x * sigmoid(x), with the exponent kept non-positive for the same reason.
    float e = exp(-abs(x));
    return x * ((x >= 0.0 ? 1.0 : e) / (1.0 + e));
}

float vkumd_activate(uint code, float x) {
    if (code == VKUMD_ACT_RELU) return max(x, 0.0);
    if (code == VKUMD_ACT_GELU) return vkumd_gelu(x);
    if (code == VKUMD_ACT_GELU_TANH) return vkumd_gelu_tanh(x);
    if (code == VKUMD_ACT_SILU) return vkumd_silu(x);
    return x;
}
