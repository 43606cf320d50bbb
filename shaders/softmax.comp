#version 450
// out[r, :] = softmax(x[r, :] * scale + mask[...]) over the last dimension; one workgroup
// per row. One pass keeps a running maximum and a running sum of exponentials per lane
// (rescaled when the maximum grows), the lanes combine them, and a second pass writes
// exp(v - max) / sum. A row whose every value is -inf has no maximum to subtract: it is
// written as zeros instead of NaN.
//
// The mask (same storage type as x) broadcasts against x: the row's offset in the mask is
// sum(coord[d] * mstride[d]) over x's leading dimensions, and along the row it either steps
// by one element (mask_mode 1) or repeats one value (mask_mode 2). mask_mode 0: no mask (the
// mask binding is then a dummy). Defines: see rows.glsl.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : enable
#extension GL_KHR_shader_subgroup_arithmetic : enable
#include "rows.glsl"

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

#define NEG_INF uintBitsToFloat(0xFF800000u)

uint mask_offset(uint row) {
    uint offset = 0u;
    for (int d = int(pc.nlead) - 1; d >= 0; --d) {
        offset += (row % pc.lead[d]) * pc.mstride[d];
        row /= pc.lead[d];
    }
    return offset;
}

// x * scale + mask for unit u of the row.
VT value(uint base, uint moff, uint u) {
    VT v = UNIT_TO_F(x[base + u]) * pc.scale;
    if (pc.mask_mode == 1u) {
        v += UNIT_TO_F(mask[moff + u]);
    } else if (pc.mask_mode == 2u) {
        v += VT(TO_F(mask_elem[moff]));
    }
    return v;
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

    float m = NEG_INF;
    float s = 0.0;
    for (uint u = lane; u < units; u += width) {
        VT v = value(base, moff, u);
        float m_new = max(m, HMAX(v));
        if (m_new == NEG_INF) {
            continue;  // everything so far is -inf: nothing to add yet
        }
        s = s * exp(m - m_new) + HSUM(exp(v - m_new));
        m = m_new;
    }
    float row_m = row_max(m);
    float part = m == NEG_INF ? 0.0 : s * exp(m - row_m);
    float total = row_sum(part);
    if (row_m == NEG_INF) {
        for (uint u = lane; u < units; u += width) {
            result[base + u] = F_TO_UNIT(VT(0.0));
        }
        return;
    }
    float inv = 1.0 / total;
    for (uint u = lane; u < units; u += width) {
        result[base + u] = F_TO_UNIT(exp(value(base, moff, u) - row_m) * inv);
    }
}
