// Activation functions shared by the GEMM epilogue and the standalone activation kernels.
// Included with #include "activation.glsl". Codes match vkumd.compiler.kernels.ACTIVATIONS.
#pragma once

#define VKUMD_ACT_NONE 0u
#define VKUMD_ACT_RELU 1u
#define VKUMD_ACT_GELU 2u
#define VKUMD_ACT_GELU_TANH 3u
#define VKUMD_ACT_SILU 4u
// The convolution epilogue's further activations (vkumd.compiler.kernels.epilogue), with up
// to two float parameters: clip (min, max), leaky_relu (alpha), hard_sigmoid (alpha, beta).
#define VKUMD_ACT_SIGMOID 5u
#define VKUMD_ACT_HARDSWISH 6u
#define VKUMD_ACT_CLIP 7u
#define VKUMD_ACT_LEAKY_RELU 8u
#define VKUMD_ACT_HARD_SIGMOID 9u

// exp(hi + lo) for a large |hi| that float32 holds exactly, |lo| small. The driver's exp(y)
// multiplies y by log2(e) first, an error of about |y| * 6e-8 relative to the result (4e-6 at
// y = -65, measured on lavapipe); reducing by k ln 2 here (Cody-Waite, ln 2 split so that
// k * LN2_HI is exact for |k| < 256) leaves the driver an argument under ln(2)/2. hi is
// clamped where the result is zero anyway, so that ldexp's exponent stays in its defined range.
// `precise`: otherwise Mesa's optimiser folds the two products into k * (LN2_HI + LN2_LO),
// whose rounding costs |k| * 6e-8 (1.5e-6 relative in sinh(40), measured on lavapipe).
float vkumd_exp_split(float hi, float lo) {
    const float LN2_HI = 0.693145751953125;
    const float LN2_LO = 1.42860682030941723212e-6;
    float k = floor(max(hi, -140.0) * 1.44269504088896341 + 0.5);
    precise float r = ((hi - k * LN2_HI) - k * LN2_LO) + lo;
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

// exp(y) - 1 without the cancellation near 0 (Taylor to y^8 for |y| < 1/2).
float vkumd_expm1(float y) {
    if (abs(y) < 0.5) {
        return y * (1.0 + y * (0.5 + y * (1.0 / 6.0 + y * (1.0 / 24.0 + y * (1.0 / 120.0
               + y * (1.0 / 720.0 + y * (1.0 / 5040.0 + y * (1.0 / 40320.0))))))));
    }
    return exp(y) - 1.0;
}

// The same for y <= 0, as tanh and ELU take it.
float vkumd_expm1_nonpos(float y) {
    return vkumd_expm1(y);
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

// A quiet NaN, for arguments outside a function's domain (GLSL leaves sqrt and log of a
// negative number undefined).
float vkumd_nan() {
    return uintBitsToFloat(0x7FC00000u);
}

// min(max(x, lo), hi) as selects: NaN passes through (GLSL's clamp, min and max leave NaN
// operands undefined), and lo > hi gives hi everywhere, as numpy's clip and ONNX's Clip do.
float vkumd_clip(float x, float lo, float hi) {
    float m = x < lo ? lo : x;
    return m > hi ? hi : m;
}

// 2 atanh(s) = log((1 + s) / (1 - s)) by its odd series, for |s| <= 1/3: the terms to s^15
// leave a relative error under 2e-9. log1p and log near 1 go through it, because the
// driver's log is only bounded in absolute error (2^-21) on [0.5, 2], where log is small.
float vkumd_log_series(float s) {
    float z = s * s;
    return 2.0 * s * (1.0 + z * (1.0 / 3.0 + z * (0.2 + z * (1.0 / 7.0 + z * (1.0 / 9.0
           + z * (1.0 / 11.0 + z * (1.0 / 13.0 + z * (1.0 / 15.0))))))));
}

// log x: the series of s = (x - 1) / (x + 1) on [0.5, 2], where x - 1 is exact (Sterbenz).
float vkumd_log(float x) {
    if (x >= 0.5 && x <= 2.0) return vkumd_log_series((x - 1.0) / (x + 1.0));
    return x < 0.0 ? vkumd_nan() : log(x);
}

// log(1 + y) from y itself: the series of s = y / (2 + y) for 1 + y in [0.5, 2]; outside,
// 1 + y rounds by at most 6e-8 relative, an absolute 6e-8 against a log of at least 0.69.
float vkumd_log1p(float y) {
    if (y >= -0.5 && y <= 1.0) return vkumd_log_series(y / (2.0 + y));
    return vkumd_log(1.0 + y);
}

// e^|x| / 2 through the split exp (no rounded |x| - ln 2, no overflow before sinh's does:
// sinh and cosh overflow float32 past 89.416); inf past 89.5, where ldexp's exponent would
// leave its defined range.
float vkumd_half_exp_abs(float x) {
    float a = abs(x);
    if (a > 89.5) return uintBitsToFloat(0x7F800000u);
    return vkumd_exp_split(a, -0.69314718055994531);
}

// sinh: its odd series to x^13 below |x| = 1 (no cancellation in e^x - e^-x); above, e/2 -
// 1/(2e) with e/2 formed directly, so sinh(89) is finite although e^89 is not.
float vkumd_sinh(float x) {
    float a = abs(x);
    float r;
    if (a < 1.0) {
        float z = a * a;
        r = a * (1.0 + z * (1.0 / 6.0 + z * (1.0 / 120.0 + z * (1.0 / 5040.0 + z * (1.0
            / 362880.0 + z * (1.0 / 39916800.0 + z * (1.0 / 6227020800.0)))))));
    } else {
        float h = vkumd_half_exp_abs(a);
        r = h - 0.25 / h;
    }
    return x < 0.0 ? -r : r;
}

float vkumd_cosh(float x) {
    float h = vkumd_half_exp_abs(x);
    return h + 0.25 / h;
}

// asinh|x| = log1p(|x| + x^2 / (1 + sqrt(1 + x^2))): no cancellation for negative or small x;
// past 2^12 sqrt(1 + x^2) is |x| in float32 and x^2 would overflow past 1.8e19, so log(2|x|).
float vkumd_asinh(float x) {
    float a = abs(x);
    float r = a >= 4096.0 ? log(a) + 0.69314718055994531
              : vkumd_log1p(a + a * a / (1.0 + sqrt(1.0 + a * a)));
    return x < 0.0 ? -r : r;
}

// acosh x = log1p(t + sqrt(t (t + 2))), t = x - 1 (exact near 1, where acosh is small).
float vkumd_acosh(float x) {
    if (x < 1.0) return vkumd_nan();
    if (x >= 4096.0) return log(x) + 0.69314718055994531;
    float t = x - 1.0;
    return vkumd_log1p(t + sqrt(t * (t + 2.0)));
}

// atanh|x| = log1p(2|x| / (1 - |x|)) / 2: inf at 1, NaN past it.
float vkumd_atanh(float x) {
    float a = abs(x);
    if (a > 1.0) return vkumd_nan();
    float r = 0.5 * vkumd_log1p(2.0 * a / (1.0 - a));
    return x < 0.0 ? -r : r;
}

// log(1 + e^x) = max(x, 0) + log1p(e^-|x|): no overflow, and e^x's digits in the left tail
// (the split exp: the driver's costs |x| * 6e-8 relative, 4e-6 at x = -72).
float vkumd_softplus(float x) {
    return (x > 0.0 ? x : 0.0) + vkumd_log1p(vkumd_exp_split(-abs(x), 0.0));
}

// x / (1 + |x|), 1 at infinity (where the quotient would be inf / inf).
float vkumd_softsign(float x) {
    return isinf(x) ? sign(x) : x / (1.0 + abs(x));
}

// x tanh(softplus x), with tanh(log(1 + e^x)) = ((1 + e^x)^2 - 1) / ((1 + e^x)^2 + 1) written
// over e = e^-|x| so it cannot overflow: (1 + 2e) / (1 + 2e + 2e^2) for x >= 0 and
// e (e + 2) / (e (e + 2) + 2) below (no cancellation either way). Below -20 that is e to
// 1e-9, and x e^x is -exp(x + log|x|), which stays a normal number where e^x alone would
// not (e^-88.5 is subnormal; mish(-88.5) = -3e-37 is not). mish(-inf) is its limit -0.
float vkumd_mish(float x) {
    if (x < -20.0) return isinf(x) ? -0.0 : -vkumd_exp_split(x, log(-x));
    float e = vkumd_exp_split(-abs(x), 0.0);
    float n = x >= 0.0 ? 1.0 + 2.0 * e : e * (e + 2.0);
    float t = n / (n + (x >= 0.0 ? 2.0 * e * e : 2.0));
    return x * t;
}

// alpha (e^x - 1) for x <= 0, x above (ELU; SELU and CELU scale it).
float vkumd_elu(float x, float alpha) {
    return x > 0.0 ? x : alpha * vkumd_expm1(x);
}

// atan x: |x| > 1 through pi/2 - atan(1/|x|), then past tan(pi/8) through
// pi/4 + atan((t - 1) / (t + 1)), leaving |u| <= 0.4143 for the odd series to u^19 (next
// term under 5e-10 relative). The drivers' atan, asin and acos are polynomial fits good to
// about 1e-5 relative (2e-5 and 4e-4 measured on lavapipe), short of float32.
float vkumd_atan(float x) {
    float a = abs(x);
    bool big = a > 1.0;
    float t = big ? 1.0 / a : a;
    bool mid = t > 0.41421356;
    float u = mid ? (t - 1.0) / (t + 1.0) : t;
    float z = u * u;
    float p = u * (1.0 + z * (-1.0 / 3.0 + z * (0.2 + z * (-1.0 / 7.0 + z * (1.0 / 9.0
              + z * (-1.0 / 11.0 + z * (1.0 / 13.0 + z * (-1.0 / 15.0 + z * (1.0 / 17.0
              + z * (-1.0 / 19.0))))))))));
    float r = mid ? 0.78539816339744831 + p : p;
    r = big ? 1.57079632679489662 - r : r;
    return x < 0.0 ? -r : r;
}

// asin x = atan(x / sqrt((1 - |x|)(1 + |x|))): 1 - |x| is exact near 1, where the quotient
// grows and atan's pi/2 - atan(1/t) keeps the digits; NaN past 1.
float vkumd_asin(float x) {
    float a = abs(x);
    if (a > 1.0) return vkumd_nan();
    return vkumd_atan(x / sqrt((1.0 - a) * (1.0 + a)));
}

// acos x = 2 atan(sqrt((1 - x) / (1 + x))): 1 - x is exact near 1 (acos small) and 1 + x
// near -1.
float vkumd_acos(float x) {
    if (abs(x) > 1.0) return vkumd_nan();
    return 2.0 * vkumd_atan(sqrt((1.0 - x) / (1.0 + x)));
}

// The sign bit of x on a zero (copysign(0, x)), without multiplying (0 * inf is NaN).
float vkumd_signed_zero(float x) {
    return uintBitsToFloat(floatBitsToUint(x) & 0x80000000u);
}

// C's fmod: x - trunc(x / y) y, with x's sign; NaN for an infinite x, a zero y or a NaN, x
// itself for an infinite y. Exact, by long division: each step subtracts |y| 2^k, the largest
// such multiple not above r, which Sterbenz's lemma makes exact (t <= r < 2t); a step clears
// r's leading quotient bit, so the loop runs at most the exponent difference plus one times.
// (x - trunc(x / y) y with an fma is not exact: llvmpipe's fma may round twice.) Classes are
// read from the bits: without SignedZeroInfNanPreserve a driver may assume no NaN or inf.
float vkumd_fmod(float x, float y) {
    uint ax = floatBitsToUint(x) & 0x7FFFFFFFu;
    uint ay = floatBitsToUint(y) & 0x7FFFFFFFu;
    if (ax >= 0x7F800000u || ay > 0x7F800000u || ay == 0u) {
        return vkumd_nan();
    }
    if (ay == 0x7F800000u) {
        return x;
    }
    float m = abs(y);
    float r = abs(x);
    int em;
    frexp(m, em);
    for (int i = 0; i < 300 && r >= m; ++i) {
        int er;
        frexp(r, er);
        float t = ldexp(m, er - em);  // r's exponent: r / 2 < t < 2 r
        if (t > r) {
            t = ldexp(m, er - em - 1);
        }
        r -= t;
    }
    return r == 0.0 ? vkumd_signed_zero(x) : (x < 0.0 ? -r : r);
}

// The floored remainder, with y's sign (Python's %, numpy's mod, ONNX's Mod with fmod 0):
// fmod moved by y where the signs differ; a finite x against an infinite y of the other sign
// gives that infinity, as numpy does.
float vkumd_mod(float x, float y) {
    float r = vkumd_fmod(x, y);
    if ((floatBitsToUint(r) & 0x7FFFFFFFu) > 0x7F800000u) {
        return r;
    }
    if (r == 0.0) {
        return vkumd_signed_zero(y);
    }
    return (r < 0.0) != (y < 0.0) ? r + y : r;
}

// x^y as numpy's power: 1 for y == 0 (x NaN too) and for x == 1 (y NaN too); NaN for a
// negative x and a non-integer y; a negative x (or -0) and an odd integer y give the sign.
// Integer |y| <= 64 multiplies by squaring (a few roundings: exact for small integer
// results); other exponents are exp2(y log2 |x|), the driver's pow defined for x > 0 only,
// with a relative error of about |y log2 x| float32 ulps.
float vkumd_pow(float x, float y) {
    uint ax = floatBitsToUint(x) & 0x7FFFFFFFu;
    uint ay = floatBitsToUint(y) & 0x7FFFFFFFu;
    if (ay == 0u || x == 1.0) {
        return 1.0;
    }
    if (ax > 0x7F800000u || ay > 0x7F800000u) {
        return vkumd_nan();
    }
    float m = abs(x);
    bool integral = ay >= 0x4B000000u || floor(y) == y;  // from 2^23 up every float is one
    if (x < 0.0 && !integral) {
        return vkumd_nan();
    }
    bool odd = integral && ay < 0x4B800000u && fract(abs(y) * 0.5) == 0.5;  // below 2^24
    float inf = uintBitsToFloat(0x7F800000u);
    float r;
    if (ay == 0x7F800000u) {
        r = m == 1.0 ? 1.0 : ((m > 1.0) == (y > 0.0) ? inf : 0.0);
    } else if (ax == 0u || ax == 0x7F800000u) {
        r = (ax == 0u) == (y < 0.0) ? inf : 0.0;
    } else if (integral && abs(y) <= 64.0) {
        uint e = uint(abs(y));
        float base = m;
        r = 1.0;
        while (e != 0u) {
            if ((e & 1u) != 0u) {
                r *= base;
            }
            base *= base;
            e >>= 1;
        }
        r = y < 0.0 ? 1.0 / r : r;
    } else {
        r = exp2(y * log2(m));
    }
    return odd && (floatBitsToUint(x) & 0x80000000u) != 0u ? -r : r;
}

// The sign of x, NaN kept (GLSL's sign leaves NaN undefined).
float vkumd_sign(float x) {
    return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : x);
}

float vkumd_activate(uint code, float x) {
    if (code == VKUMD_ACT_RELU) return max(x, 0.0);
    if (code == VKUMD_ACT_GELU) return vkumd_gelu(x);
    if (code == VKUMD_ACT_GELU_TANH) return vkumd_gelu_tanh(x);
    if (code == VKUMD_ACT_SILU) return vkumd_silu(x);
    return x;
}

// vkumd_activate and the parametric activations: the same expressions as the elementwise
// ops' (opset/activation.py, activation_params.py), so a fused epilogue gives their bits.
float vkumd_activate_params(uint code, float x, float p0, float p1) {
    if (code < VKUMD_ACT_SIGMOID) return vkumd_activate(code, x);
    if (code == VKUMD_ACT_SIGMOID) return vkumd_sigmoid(x);
    if (code == VKUMD_ACT_HARDSWISH) return x * clamp(x / 6.0 + 0.5, 0.0, 1.0);
    if (code == VKUMD_ACT_CLIP) return vkumd_clip(x, p0, p1);
    if (code == VKUMD_ACT_LEAKY_RELU) return x >= 0.0 ? x : x * p0;
    if (code == VKUMD_ACT_HARD_SIGMOID) return vkumd_clip(x * p0 + p1, 0.0, 1.0);
    return x;
}
