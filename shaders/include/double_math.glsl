// Double-precision elementary functions (vkumd_*_d), for the float64 kernels.
//
// Core GLSL has double overloads of sqrt, abs, sign, floor, ceil, roundEven, fma, min and max
// only; exp, log, the trigonometric and hyperbolic functions are float32-only, and computing
// a float64 result through them would keep 24 bits. These are written out here: each reduces
// its argument exactly (or to within an ulp) and sums a Taylor polynomial whose truncation
// error is below 2^-56 on the reduced range (coefficients 1/n! and 1/(2k+1) rounded once to
// double), so each is a few ulps from the exact result (tests/compiler/test_double_math.py
// checks 1e-14 relative against numpy over wide ranges). sin, cos and tan reduce by pi/2
// in three 33-bit pieces, whose products are exact for |x| <= 2^19 pi/2 (VKUMD_D_TRIG_MAX,
// about 8.2e5); past it they return NaN rather than a value whose reduction lost its digits.
//
// Special values follow C's libm: NaN in, NaN out; exp(-inf) = 0, log(0) = -inf, log of a
// negative is NaN, tanh(+-inf) = +-1 and so on. NaN and infinity are told from their bits, not
// with isnan/isinf, which a driver's optimiser may assume away. The reductions are `precise`
// so that no compiler reassociates the exact steps they depend on.
#pragma once

const double VKUMD_D_LN2 = 0.6931471805599453LF;
const double VKUMD_D_LN2_HI = 0.6931471803691238LF;  // ln 2's first 32 bits: k * it is exact
const double VKUMD_D_LN2_LO = 1.9082149292705877e-10LF;
const double VKUMD_D_INV_LN2 = 1.4426950408889634LF;
const double VKUMD_D_PIO2 = 1.5707963267948966LF;
const double VKUMD_D_PIO4 = 0.7853981633974483LF;
const double VKUMD_D_TWO_OVER_PI = 0.6366197723675814LF;
// pi/2 in three 33-bit pieces and the rest (each product with |k| < 2^20 is exact).
const double VKUMD_D_PIO2_1 = 1.5707963267341256LF;
const double VKUMD_D_PIO2_2 = 6.077100506303966e-11LF;
const double VKUMD_D_PIO2_3 = 2.0222662487111665e-21LF;
const double VKUMD_D_PIO2_3T = 8.4784276603689e-32LF;
const double VKUMD_D_TRIG_MAX = 823549.6645826427LF;  // 2^19 pi/2
const double VKUMD_D_SQRT2 = 1.4142135623730951LF;
const double VKUMD_D_TAN_PI8 = 0.41421356237309503LF;
// exp overflows above this and is 0 below the other (ln of the largest double, of 2^-1075).
const double VKUMD_D_EXP_MAX = 709.782712893384LF;
const double VKUMD_D_EXP_MIN = -745.1332191019412LF;

double vkumd_inf_d() {
    return packDouble2x32(uvec2(0u, 0x7FF00000u));
}

double vkumd_nan_d() {
    return packDouble2x32(uvec2(0u, 0x7FF80000u));
}

bool vkumd_isnan_d(double x) {
    uvec2 b = unpackDouble2x32(x);
    uint high = b.y & 0x7FFFFFFFu;
    return high > 0x7FF00000u || (high == 0x7FF00000u && b.x != 0u);
}

bool vkumd_isinf_d(double x) {
    uvec2 b = unpackDouble2x32(x);
    return (b.y & 0x7FFFFFFFu) == 0x7FF00000u && b.x == 0u;
}

// 2^k exactly, for k in the normal range [-1022, 1023].
double vkumd_pow2_d(int k) {
    return packDouble2x32(uvec2(0u, uint(k + 1023) << 20));
}

// A copy of x with the sign of s (s's sign bit, so -0.0 counts as negative).
double vkumd_copysign_d(double x, double s) {
    uvec2 b = unpackDouble2x32(x);
    b.y = (b.y & 0x7FFFFFFFu) | (unpackDouble2x32(s).y & 0x80000000u);
    return packDouble2x32(b);
}

// x rounded to the nearest integer, halves to even. Written out: lavapipe's double roundEven
// rounds -1.5 to -1.
double vkumd_round_even_d(double x) {
    if (!(abs(x) < 4503599627370496.0LF)) {  // 2^52 and past: an integer already (or NaN, inf)
        return x;
    }
    double r = floor(x);
    double d = x - r;  // exact
    if (d > 0.5LF || (d == 0.5LF && r - 2.0LF * floor(0.5LF * r) != 0.0LF)) {
        r += 1.0LF;
    }
    return vkumd_copysign_d(r, x);  // -0.4 rounds to -0.0, as numpy's
}

double vkumd_exp_d(double x) {
    if (vkumd_isnan_d(x)) {
        return x;
    }
    if (x > VKUMD_D_EXP_MAX) {
        return vkumd_inf_d();
    }
    if (x < VKUMD_D_EXP_MIN) {
        return 0.0LF;
    }
    // x = k ln2 + r, |r| <= ln2 / 2; k ln2_hi is exact, so only the ln2_lo product rounds.
    double kd = vkumd_round_even_d(x * VKUMD_D_INV_LN2);
    precise double r = (x - kd * VKUMD_D_LN2_HI) - kd * VKUMD_D_LN2_LO;
    double p = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(
        7.647163731819816e-13LF, r, 1.1470745597729725e-11LF), r, 1.6059043836821613e-10LF),
        r, 2.08767569878681e-09LF), r, 2.505210838544172e-08LF), r, 2.755731922398589e-07LF),
        r, 2.7557319223985893e-06LF), r, 2.48015873015873e-05LF), r, 0.0001984126984126984LF),
        r, 0.001388888888888889LF), r, 0.008333333333333333LF), r, 0.041666666666666664LF),
        r, 0.16666666666666666LF), r, 0.5LF), r, 1.0LF), r, 1.0LF);
    // 2^k in two factors, each normal: k runs from -1075 to 1024. A subnormal result rounds
    // once, at the second product.
    int k = int(kd);
    int half_k = k / 2;
    return (p * vkumd_pow2_d(half_k)) * vkumd_pow2_d(k - half_k);
}

// e^x - 1 without the cancellation near 0.
double vkumd_expm1_d(double x) {
    if (abs(x) >= 0.5LF || vkumd_isnan_d(x)) {
        return vkumd_exp_d(x) - 1.0LF;  // at |x| >= 1/2 the subtraction costs under 2 bits
    }
    double p = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(
        2.8114572543455206e-15LF, x, 4.779477332387385e-14LF), x, 7.647163731819816e-13LF),
        x, 1.1470745597729725e-11LF), x, 1.6059043836821613e-10LF), x, 2.08767569878681e-09LF),
        x, 2.505210838544172e-08LF), x, 2.755731922398589e-07LF), x, 2.7557319223985893e-06LF),
        x, 2.48015873015873e-05LF), x, 0.0001984126984126984LF), x, 0.001388888888888889LF),
        x, 0.008333333333333333LF), x, 0.041666666666666664LF), x, 0.16666666666666666LF),
        x, 0.5LF), x, 1.0LF);
    return x * p;
}

double vkumd_log_d(double x) {
    if (vkumd_isnan_d(x) || x < 0.0LF) {
        return vkumd_nan_d();
    }
    if (x == 0.0LF) {
        return -vkumd_inf_d();
    }
    if (vkumd_isinf_d(x)) {
        return x;
    }
    int e = 0;
    if (x < 2.2250738585072014e-308LF) {  // subnormal: scale into the normal range
        x *= vkumd_pow2_d(54);
        e = -54;
    }
    // x = m 2^e with m in [sqrt(1/2), sqrt(2)); f = m - 1 is exact there.
    uvec2 b = unpackDouble2x32(x);
    e += int((b.y >> 20) & 0x7FFu) - 1023;
    b.y = (b.y & 0x000FFFFFu) | 0x3FF00000u;
    double m = packDouble2x32(b);
    if (m > VKUMD_D_SQRT2) {
        m *= 0.5LF;
        e += 1;
    }
    precise double f = m - 1.0LF;
    // log m = 2 atanh(s), s = f / (2 + f), |s| < 0.172: 2 s (1 + z/3 + z^2/5 + ...), z = s^2.
    double s = f / (2.0LF + f);
    double z = s * s;
    double p = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(
        0.043478260869565216LF, z, 0.047619047619047616LF), z, 0.05263157894736842LF),
        z, 0.058823529411764705LF), z, 0.06666666666666667LF), z, 0.07692307692307693LF),
        z, 0.09090909090909091LF), z, 0.1111111111111111LF), z, 0.14285714285714285LF),
        z, 0.2LF), z, 0.3333333333333333LF), z, 1.0LF);
    double log_m = 2.0LF * s * p;
    double ed = double(e);
    return ed * VKUMD_D_LN2_HI + (log_m + ed * VKUMD_D_LN2_LO);
}

// log(1 + x) without the rounding of 1 + x: log(u) scaled by x / (u - 1), u = 1 + x rounded
// (the quotient corrects for what the rounding lost).
double vkumd_log1p_d(double x) {
    // precise: a compiler may not simplify (1 + x) - 1 to x, which is the point here.
    precise double u = 1.0LF + x;
    if (u == 1.0LF) {
        return x;
    }
    if (vkumd_isinf_d(u) || vkumd_isnan_d(u)) {
        return vkumd_log_d(u);
    }
    precise double rounded = u - 1.0LF;
    return vkumd_log_d(u) * (x / rounded);
}

// sin and cos of r, |r| <= pi/4 (a little more at the reduction's rounding).
double vkumd_sin_kernel_d(double r) {
    double z = r * r;
    double p = fma(fma(fma(fma(fma(fma(fma(fma(
        -8.22063524662433e-18LF, z, 2.8114572543455206e-15LF), z, -7.647163731819816e-13LF),
        z, 1.6059043836821613e-10LF), z, -2.505210838544172e-08LF), z, 2.7557319223985893e-06LF),
        z, -0.0001984126984126984LF), z, 0.008333333333333333LF), z, -0.16666666666666666LF);
    return fma(r * z, p, r);
}

double vkumd_cos_kernel_d(double r) {
    double z = r * r;
    double q = fma(fma(fma(fma(fma(fma(fma(fma(
        4.110317623312165e-19LF, z, -1.5619206968586225e-16LF), z, 4.779477332387385e-14LF),
        z, -1.1470745597729725e-11LF), z, 2.08767569878681e-09LF), z, -2.755731922398589e-07LF),
        z, 2.48015873015873e-05LF), z, -0.001388888888888889LF), z, 0.041666666666666664LF);
    return fma(z * z, q, 1.0LF - 0.5LF * z);
}

// x = k pi/2 + r: returns r and sets quadrant to k mod 4.
// The caller refuses |x| > VKUMD_D_TRIG_MAX (and NaN, inf).
double vkumd_reduce_pio2_d(double x, out uint quadrant) {
    double kd = vkumd_round_even_d(x * VKUMD_D_TWO_OVER_PI);
    precise double r = x - kd * VKUMD_D_PIO2_1;
    r = r - kd * VKUMD_D_PIO2_2;
    r = r - kd * VKUMD_D_PIO2_3;
    r = r - kd * VKUMD_D_PIO2_3T;
    quadrant = uint(int(kd) & 3);
    return r;
}

double vkumd_sin_d(double x) {
    if (!(abs(x) <= VKUMD_D_TRIG_MAX)) {  // NaN, infinities and arguments past the reduction
        return vkumd_nan_d();
    }
    uint q;
    double r = vkumd_reduce_pio2_d(x, q);
    double v = (q & 1u) == 0u ? vkumd_sin_kernel_d(r) : vkumd_cos_kernel_d(r);
    return q >= 2u ? -v : v;
}

double vkumd_cos_d(double x) {
    if (!(abs(x) <= VKUMD_D_TRIG_MAX)) {  // NaN, infinities and arguments past the reduction
        return vkumd_nan_d();
    }
    uint q;
    double r = vkumd_reduce_pio2_d(x, q);
    q = (q + 1u) & 3u;
    double v = (q & 1u) == 0u ? vkumd_sin_kernel_d(r) : vkumd_cos_kernel_d(r);
    return q >= 2u ? -v : v;
}

double vkumd_tan_d(double x) {
    if (!(abs(x) <= VKUMD_D_TRIG_MAX)) {  // NaN, infinities and arguments past the reduction
        return vkumd_nan_d();
    }
    uint q;
    double r = vkumd_reduce_pio2_d(x, q);
    double s = vkumd_sin_kernel_d(r);
    double c = vkumd_cos_kernel_d(r);
    return (q & 1u) == 0u ? s / c : -c / s;
}

// atan of t, |t| <= tan(pi/8): t + t z A(z), z = t^2, A the alternating 1/(2k+1) series.
double vkumd_atan_kernel_d(double t) {
    double z = t * t;
    double a = fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(fma(
        fma(fma(0.022222222222222223LF, z, -0.023255813953488372LF), z, 0.024390243902439025LF),
        z, -0.02564102564102564LF), z, 0.02702702702702703LF), z, -0.02857142857142857LF),
        z, 0.030303030303030304LF), z, -0.03225806451612903LF), z, 0.034482758620689655LF),
        z, -0.037037037037037035LF), z, 0.04LF), z, -0.043478260869565216LF),
        z, 0.047619047619047616LF), z, -0.05263157894736842LF), z, 0.058823529411764705LF),
        z, -0.06666666666666667LF), z, 0.07692307692307693LF), z, -0.09090909090909091LF),
        z, 0.1111111111111111LF), z, -0.14285714285714285LF), z, 0.2LF), z, -0.3333333333333333LF);
    return fma(t * z, a, t);
}

double vkumd_atan_d(double x) {
    if (vkumd_isnan_d(x)) {
        return x;
    }
    double a = abs(x);
    bool inverted = a > 1.0LF;  // atan(a) = pi/2 - atan(1/a)
    double b = inverted ? 1.0LF / a : a;
    double v;
    if (b > VKUMD_D_TAN_PI8) {  // atan(b) = pi/4 + atan((b - 1) / (b + 1))
        v = VKUMD_D_PIO4 + vkumd_atan_kernel_d((b - 1.0LF) / (b + 1.0LF));
    } else {
        v = vkumd_atan_kernel_d(b);
    }
    if (inverted) {
        v = VKUMD_D_PIO2 - v;
    }
    return vkumd_copysign_d(v, x);
}

double vkumd_asin_d(double x) {
    double a = abs(x);
    if (vkumd_isnan_d(x) || a > 1.0LF) {
        return vkumd_nan_d();
    }
    // (1 - a)(1 + a) keeps its digits near |x| = 1, where 1 - a^2 would cancel.
    double v = vkumd_atan_d(a / sqrt((1.0LF - a) * (1.0LF + a)));
    return vkumd_copysign_d(v, x);
}

double vkumd_acos_d(double x) {
    if (vkumd_isnan_d(x) || abs(x) > 1.0LF) {
        return vkumd_nan_d();
    }
    return 2.0LF * vkumd_atan_d(sqrt((1.0LF - x) / (1.0LF + x)));
}

double vkumd_sinh_d(double x) {
    double a = abs(x);
    double v;
    if (a < 22.0LF) {
        // e^a - e^-a = t + t / (t + 1), t = e^a - 1: no cancellation near 0.
        double t = vkumd_expm1_d(a);
        v = 0.5LF * (t + t / (t + 1.0LF));
    } else if (a < 709.0LF) {
        v = 0.5LF * vkumd_exp_d(a);  // e^-a is below half an ulp
    } else {
        double w = vkumd_exp_d(0.5LF * a);  // e^a / 2 without overflowing first
        v = (0.5LF * w) * w;
    }
    return vkumd_isnan_d(x) ? x : vkumd_copysign_d(v, x);
}

double vkumd_cosh_d(double x) {
    double a = abs(x);
    if (vkumd_isnan_d(x)) {
        return x;
    }
    if (a < 22.0LF) {
        double e = vkumd_exp_d(a);
        return 0.5LF * (e + 1.0LF / e);
    }
    if (a < 709.0LF) {
        return 0.5LF * vkumd_exp_d(a);
    }
    double w = vkumd_exp_d(0.5LF * a);
    return (0.5LF * w) * w;
}

double vkumd_tanh_d(double x) {
    if (vkumd_isnan_d(x)) {
        return x;
    }
    double a = abs(x);
    double v;
    if (a > 22.0LF) {
        v = 1.0LF;  // 1 - tanh(22) is below half an ulp of 1
    } else {
        double t = vkumd_expm1_d(2.0LF * a);
        v = t / (t + 2.0LF);
    }
    return vkumd_copysign_d(v, x);
}

double vkumd_sigmoid_d(double x) {
    if (x >= 0.0LF) {
        return 1.0LF / (1.0LF + vkumd_exp_d(-x));
    }
    double e = vkumd_exp_d(x);  // x < 0 (or NaN, which propagates)
    return e / (1.0LF + e);
}

double vkumd_asinh_d(double x) {
    double a = abs(x);
    double v;
    if (a > 268435456.0LF) {  // 2^28: sqrt(a^2 + 1) is a, and a^2 may overflow
        v = vkumd_log_d(a) + VKUMD_D_LN2;
    } else if (a > 2.0LF) {
        v = vkumd_log_d(2.0LF * a + 1.0LF / (sqrt(a * a + 1.0LF) + a));
    } else {
        double a2 = a * a;
        v = vkumd_log1p_d(a + a2 / (1.0LF + sqrt(1.0LF + a2)));
    }
    return vkumd_isnan_d(x) ? x : vkumd_copysign_d(v, x);
}

double vkumd_acosh_d(double x) {
    if (vkumd_isnan_d(x) || x < 1.0LF) {
        return vkumd_nan_d();
    }
    if (x > 268435456.0LF) {
        return vkumd_log_d(x) + VKUMD_D_LN2;
    }
    if (x > 2.0LF) {
        return vkumd_log_d(2.0LF * x - 1.0LF / (x + sqrt(x * x - 1.0LF)));
    }
    double t = x - 1.0LF;  // exact for x in [1, 2]
    return vkumd_log1p_d(t + sqrt(2.0LF * t + t * t));
}

double vkumd_atanh_d(double x) {
    double a = abs(x);
    if (vkumd_isnan_d(x) || a > 1.0LF) {
        return vkumd_nan_d();
    }
    double v;
    if (a == 1.0LF) {
        v = vkumd_inf_d();
    } else if (a < 0.5LF) {
        v = 0.5LF * vkumd_log1p_d(2.0LF * a + 2.0LF * a * a / (1.0LF - a));
    } else {
        v = 0.5LF * vkumd_log1p_d(2.0LF * a / (1.0LF - a));
    }
    return vkumd_copysign_d(v, x);
}

// -1, 0 or 1 by the sign of x (NaN stays NaN; zero keeps its sign, as numpy's).
double vkumd_sign_d(double x) {
    return vkumd_isnan_d(x) ? x : (x > 0.0LF ? 1.0LF : (x < 0.0LF ? -1.0LF : x));
}
