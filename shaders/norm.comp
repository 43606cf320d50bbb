#version 450
// Layer norm (OP 0) and RMS norm (OP 1) over the last dimension; one workgroup per row.
//   layer: y = (x - mean) / sqrt(var + eps) * weight + bias   (biased variance, as torch)
//   rms:   y = x / sqrt(mean(x^2) + eps) * weight
// Mean and variance are taken of x minus the row's first element (a shift close to the mean
// for real activations), so a large common offset does not cancel the digits that matter.
//
// That one pass is the fast path. Its reduced sums say when it cannot be trusted, and then
// (a uniform decision: every lane holds the same sums) the row takes the scaled path:
//   - sum of squares inf or NaN: x*x overflowed (|x| from about 1e19 on) or x holds inf/NaN;
//   - mean square below 2^-60: x*x underflowed (|x| below about 1e-19), which with eps = 0
//     gave 1/sqrt(0) = inf;
//   - layer norm, mean square above 16 variances: the first element is an outlier and
//     E[d^2] - E[d]^2 cancels (measured: 6e-5 relative error with x[0] = 1e4 in 1000 N(0,1)).
// The scaled path finds the row's largest |x| (a row holding inf or NaN is written as NaN:
// it has no finite mean or norm), divides x by the power of two 2^k next to it (exact), and
// works on u = x / 2^k, |u| < 4, whose squares can neither overflow nor underflow. Layer
// norm takes two passes there (mean first, then the variance about it, corrected by the
// residual mean). The norm is scale-invariant but for eps, which becomes eps / 2^2k.
// weight and bias (flags bits 0 and 1) have the row's length and x's storage type; when
// absent their bindings are dummies. Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

layout(constant_id = 1) const uint OP = 0u;  // 0 layer norm, 1 RMS norm

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) readonly buffer Weight { UNIT weight[]; };
layout(std430, binding = 2) readonly buffer Bias { UNIT bias[]; };
layout(std430, binding = 3) writeonly buffer Out { UNIT result[]; };
layout(std430, binding = 0) readonly buffer XElems { ELEM x_elem[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    float eps;
    uint flags;  // bit 0: weight given, bit 1: bias given
} pc;

// Below this mean square, some x*x may have been flushed or rounded as subnormals; above it
// their loss (under 2^-126 each, at most 2^32 of them) is 2^-34 of the sum, below rounding.
const float SMALLEST_FAST_MEAN_SQUARE = 8.6736174e-19;  // 2^-60

void write_nan_row(uint base, uint units, uint lane, uint width) {
    for (uint u = lane; u < units; u += width) {
        result[base + u] = F_TO_UNIT(VT(QNAN));
    }
}

void main() {
    uint row = row_index();
    if (row >= pc.rows) {
        return;
    }
    uint units = pc.cols / VEC;
    uint base = row * units;
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    float n = float(pc.cols);
    bool has_weight = (pc.flags & 1u) != 0u;
    bool has_bias = (pc.flags & 2u) != 0u;

    float shift = OP == 0u ? TO_F(x_elem[row * pc.cols]) : 0.0;
    VT sum = VT(0.0);
    VT squares = VT(0.0);
    for (uint u = lane; u < units; u += width) {
        VT d = UNIT_TO_F(x[base + u]) - shift;
        sum += d;
        squares = fma(d, d, squares);
    }
    // Centre as (x - shift) - mean_of_shifted: x - shift is exact for x near the shift,
    // while mean + shift rounded back to float32 would lose the digits that matter.
    float mean = 0.0;
    float mean_square = row_sum(HSUM(squares)) / n;
    float var = mean_square;
    if (OP == 0u) {
        mean = row_sum(HSUM(sum)) / n;
        var = max(mean_square - mean * mean, 0.0);
    }
    bool fast = is_finite(mean_square) && mean_square >= SMALLEST_FAST_MEAN_SQUARE
        && is_finite(var + pc.eps) && (OP == 1u || var >= mean_square * 0.0625);

    // The scaled path (see the top) works in units of 2^k: y = ((x * 2^-k - shift * 2^-k) -
    // mean - residual) * inv; the fast path is the same with down = 1 and residual = 0.
    float down = 1.0;
    float residual = 0.0;  // subtracted after the mean, not added to it, so no digits drop
    float inv;
    if (fast) {
        inv = 1.0 / sqrt(var + pc.eps);
    } else {
        float top = 0.0;  // largest |x|; +inf for inf or NaN (max() may drop a NaN)
        for (uint u = lane; u < units; u += width) {
            VT a = abs(UNIT_TO_F(x[base + u]));
            top = max(top, HMAX(mix(VT(POS_INF), a, FINITE(a))));
        }
        top = row_max(top);
        if (!is_finite(top)) {
            write_nan_row(base, units, lane, width);
            return;
        }
        // 2^k at or below top (|u| in [1, 2)); k clamped so 2^k and 2^-k are normal floats:
        // then |u| < 4 for top near FLT_MAX, and an all-subnormal or zero row keeps |u| < 1.
        int k = clamp(int(floatBitsToUint(top) >> 23) - 127, -126, 126);
        down = uintBitsToFloat(uint(127 - k) << 23);
        float up = uintBitsToFloat(uint(127 + k) << 23);
        shift *= down;
        if (OP == 0u) {
            VT first = VT(0.0);
            for (uint u = lane; u < units; u += width) {
                first += UNIT_TO_F(x[base + u]) * down - shift;
            }
            float rough = row_sum(HSUM(first)) / n;
            VT rest = VT(0.0);
            squares = VT(0.0);
            for (uint u = lane; u < units; u += width) {
                VT d = (UNIT_TO_F(x[base + u]) * down - shift) - rough;
                rest += d;
                squares = fma(d, d, squares);
            }
            // The corrected two-pass variance: the residual mean removes the rounding
            // error of the first pass's mean to first order.
            residual = row_sum(HSUM(rest)) / n;
            mean = rough;
            var = max(row_sum(HSUM(squares)) / n - residual * residual, 0.0);
        } else {
            squares = VT(0.0);
            for (uint u = lane; u < units; u += width) {
                VT d = UNIT_TO_F(x[base + u]) * down;
                squares = fma(d, d, squares);
            }
            var = row_sum(HSUM(squares)) / n;
        }
        // eps / 2^2k overflows for a tiny row (|x| ~ 1e-25 against eps = 1e-5): var is then
        // nothing beside it and y = x / sqrt(eps), which may still be a normal float.
        // A zero variance (a constant row) with eps = 0, or with eps / 2^2k flushed to zero
        // beside a huge row, leaves every centred value 0: y is 0 (weight times 0, plus the
        // bias) at any magnitude, not 0 * (1 / sqrt(0)) = NaN.
        float scaled = var + (pc.eps * down) * down;
        inv = scaled == 0.0 ? 0.0 : (is_finite(scaled) ? 1.0 / sqrt(scaled) : up / sqrt(pc.eps));
    }
    for (uint u = lane; u < units; u += width) {
        VT y = (((UNIT_TO_F(x[base + u]) * down - shift) - mean) - residual) * inv;
        if (has_weight) {
            y *= UNIT_TO_F(weight[u]);
        }
        if (has_bias) {
            y += UNIT_TO_F(bias[u]);
        }
        result[base + u] = F_TO_UNIT(y);
    }
}
