#version 450
// out[r, :] = softmax(x[r, :] * scale + mask[...]) over the last dimension; one workgroup
// per row. The values are taken as v = |scale| * (y - c) + mask, y = sign(scale) * x, with
// the reference c the row's largest y: that is x * scale + mask moved by a constant (softmax
// does not see it), but subtracts before scaling. x * scale rounded first is off by
// eps * |x * scale| (7e-4 relative error measured for x ~ 1e4 and scale 3), and overflows
// for huge x although the probabilities are ordinary; y - c is exact near the maximum.
// With scale 0, +-inf or NaN, and without a mask for |scale| = 2^-k (x * scale is exact),
// c is 0 and v the plain x * scale + mask.
// One pass keeps, per lane, the reference, a running maximum of v and a running sum of
// exponentials (rescaled when the maximum grows); the lanes combine them, and a second pass
// writes exp(v - max) / sum.
// A row where some v is NaN or +inf is written as NaN, as in numpy (GLSL's max() may drop a
// NaN, so it is tested for, on the bits). A row whose every v is -inf has no maximum to
// subtract: it is written as zeros instead of NaN.
//
// The mask (same storage type as x) broadcasts against x: the row's offset in the mask is
// sum(coord[d] * mstride[d]) over x's leading dimensions, and along the row it either steps
// by one element (mask_mode 1) or repeats one value (mask_mode 2). mask_mode 0: no mask (the
// mask binding is then a dummy). Defines: see rows.glsl, and LOG_SOFTMAX 1 for log_softmax:
// v - max - log(sum), the same passes with the last one writing logarithms (an all -inf row
// then gives -inf, the logarithm of the zeros softmax writes).
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

#ifndef LOG_SOFTMAX
#define LOG_SOFTMAX 0
#endif

layout(std430, binding = 0) readonly buffer X { UNIT x[]; };
layout(std430, binding = 1) readonly buffer Mask { UNIT mask[]; };
layout(std430, binding = 2) writeonly buffer Out { UNIT result[]; };
// The same mask memory seen element by element, for a mask repeated along the row.
layout(std430, binding = 1) readonly buffer MaskElems { ELEM mask_elem[]; };

layout(push_constant) uniform Shape {
    uint cols;         // row length, in elements
    uint rows;
    float scale;
    uint mask_mode;    // 0 none, 1 a mask row per x row, 2 one mask value per x row
    uint nlead;        // leading dimensions of x (<= 5)
    uint lead[5];      // their sizes, outermost first
    uint mstride[5];   // mask element strides along them (0 = broadcast)
} pc;

uint mask_offset(uint row) {
    uint offset = 0u;
    for (int d = int(pc.nlead) - 1; d >= 0; --d) {
        offset += (row % pc.lead[d]) * pc.mstride[d];
        row /= pc.lead[d];
    }
    return offset;
}

// scale * (x - reference) + mask for unit u; reference is in x's units (sign(scale) * c),
// and with reference 0 this is exactly x * scale + mask.
VT value(VT xs, float reference, uint moff, uint u) {
    VT v = pc.scale * (xs - reference);
    if (pc.mask_mode == 1u) {
        v += UNIT_TO_F(mask[moff + u]);
    } else if (pc.mask_mode == 2u) {
        v += VT(TO_F(mask_elem[moff]));
    }
    return v;
}

// Adds the unit v to a lane's running maximum m and sum s of exp(v - m). NaN shows in the
// largest magnitude bits seen (max() may drop a NaN, an integer maximum does not); +inf in
// m, which max() keeps at +inf.
void accumulate(VT v, inout float m, inout float s, inout UVT magnitude) {
    magnitude = max(magnitude, floatBitsToUint(v) & UVT(0x7FFFFFFFu));
    float m_new = max(m, HMAX(v));
    if (m_new == NEG_INF) {
        return;  // everything so far is -inf: nothing to add yet
    }
    s = s * exp(m - m_new) + HSUM(exp(v - m_new));
    m = m_new;
}

void main() {
    uint row = row_index();
    if (row >= pc.rows) {
        return;  // uniform across the workgroup
    }
    uint units = pc.cols / VEC;
    uint base = row * units;
    uint moff = pc.mask_mode == 0u ? 0u : mask_offset(row);
    if (pc.mask_mode == 1u) {
        moff /= VEC;  // mask rows start at multiples of cols, so of VEC
    }
    uint lane = gl_LocalInvocationID.x;
    uint width = gl_WorkGroupSize.x;
    // Without a mask and with |scale| a power of two at most 1 (1, 1/8, ...), x * scale is
    // exact and so is v - max near the maximum: no reference is needed, which saves most of
    // its cost. 0, inf and NaN take none either (see the top).
    float a = abs(pc.scale);
    uint a_bits = floatBitsToUint(a);
    bool exact = pc.mask_mode == 0u && (a_bits & 0x007FFFFFu) == 0u && a <= 1.0
        && a_bits >= 0x00800000u;
    bool referenced = is_finite(a) && a > 0.0 && !exact;

    // Each lane keeps its own reference c (the largest y it has seen; 0 until one is above
    // -inf), and m and s relative to it: moving c moves every v and m alike, so s stays and
    // m moves by a * (c_old - c_new). The lanes' references meet in one more reduction.
    // Measured at bench/transformer.py's softmax shape, process CPU time with one lavapipe
    // thread (wall time is too noisy here): +6% with the mask, +9% without it (+3% on the
    // no-reference path); a first pass finding the row's reference instead cost 20-25%.
    float sign = pc.scale < 0.0 ? -1.0 : 1.0;
    float top = NEG_INF;
    float c = 0.0;
    float m = NEG_INF;
    float s = 0.0;
    UVT magnitude = UVT(0u);
    // Two loops, not one with a test inside: lavapipe runs a skipped branch's body under an
    // empty mask, and the reference's work cost the no-reference path 8% even when skipped.
    if (referenced) {
        for (uint u = lane; u < units; u += width) {
            VT xs = UNIT_TO_F(x[base + u]);
            // No finiteness test needed: a y of +inf (or NaN, if max() keeps it) makes the
            // row NaN whatever the reference; -inf and NaN never pass the comparison.
            float t = HMAX(xs * sign);
            if (t > top) {
                m += a * (c - t);  // -inf stays -inf; so does an overflow, making s moot
                c = t;
                top = t;
            }
            accumulate(value(xs, c * sign, moff, u), m, s, magnitude);
        }
    } else {
        for (uint u = lane; u < units; u += width) {
            accumulate(value(UNIT_TO_F(x[base + u]), 0.0, moff, u), m, s, magnitude);
        }
    }
    bool poisoned = HMAX(magnitude) > 0x7F800000u || m == POS_INF;
    // The row's reference, then each lane's m moved to it.
    float row_c = 0.0;
    if (referenced) {
        row_c = row_max(top);
        row_c = row_c == NEG_INF ? 0.0 : row_c;
        m += a * (c - row_c);
    }
    if (poisoned) {
        m = POS_INF;  // never NaN, which row_max might drop: +inf marks the row
    }
    float row_m = row_max(m);
    float part = m == NEG_INF ? 0.0 : s * exp(m - row_m);
    float total = row_sum(part);
    if (row_m == NEG_INF || row_m == POS_INF) {
#if LOG_SOFTMAX
        VT fill = VT(row_m == NEG_INF ? NEG_INF : QNAN);
#else
        VT fill = VT(row_m == NEG_INF ? 0.0 : QNAN);
#endif
        for (uint u = lane; u < units; u += width) {
            result[base + u] = F_TO_UNIT(fill);
        }
        return;
    }
#if LOG_SOFTMAX
    // v - row_m is exact near the maximum; the sum's logarithm is subtracted after it.
    float log_total = log(total);
    for (uint u = lane; u < units; u += width) {
        VT v = value(UNIT_TO_F(x[base + u]), row_c * sign, moff, u);
        result[base + u] = F_TO_UNIT((v - row_m) - log_total);
    }
#else
    float inv = 1.0 / total;
    for (uint u = lane; u < units; u += width) {
        VT v = value(UNIT_TO_F(x[base + u]), row_c * sign, moff, u);
        result[base + u] = F_TO_UNIT(exp(v - row_m) * inv);
    }
#endif
}
