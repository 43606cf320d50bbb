#version 450
// float64 work along one axis of x seen as [rows, cols, inner], in double: one invocation per
// (row, i) walking x[row, :, i] at a stride of inner elements (neighbouring invocations read
// neighbouring addresses; no axis is moved first). Built only where the device has
// shaderFloat64. OP (vkumd.compiler.kernels.double.AXIS_DOUBLE_OPS):
//   0-11  the reductions of reduce.py's REDUCE_OPS (sum, mean, max, min, prod, sum_square,
//         l1_norm, l2_norm, logsumexp, log_sum, var, std) into out[rows, inner];
//   12-13 argmax, argmin: the int32 index of the first (flags bit 2: the last) extreme, a NaN
//         counting as the extreme (numpy's), into out[rows, inner];
//   14-15 softmax (scaled), log_softmax along the axis into out[rows, cols, inner];
//   16-17 cumsum, cumprod into out[rows, cols, inner]; flags bit 0: exclusive, bit 1: reverse.
// The running sums are sequential in double (no pairwise tree), as numpy's cumsum.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#include "double_math.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint OP = 0u;

layout(std430, binding = 0) readonly buffer X { double x[]; };
layout(std430, binding = 1) writeonly buffer Out { double result[]; };
layout(std430, binding = 1) writeonly buffer OutIndex { int index_result[]; };

layout(push_constant) uniform Shape {
    uint cols;
    uint rows;
    uint inner;
    uint flags;
    uvec2 denominator;  // the bits of a double: what mean, var and std divide by; softmax's scale
} pc;

double load(uint base, uint r) {
    return x[base + r * pc.inner];
}

double reduce_row(uint base, uint n) {
    if (OP == 2u || OP == 3u || OP == 8u) {  // max, min, logsumexp
        double sign = OP == 3u ? -1.0LF : 1.0LF;
        double m = -vkumd_inf_d();
        bool has_nan = false;
        for (uint r = 0u; r < n; ++r) {
            double v = sign * load(base, r);
            has_nan = has_nan || vkumd_isnan_d(v);
            m = max(m, v);
        }
        if (has_nan) {
            return vkumd_nan_d();
        }
        if (OP == 8u && !vkumd_isinf_d(m)) {
            double s = 0.0LF;
            for (uint r = 0u; r < n; ++r) {
                s += vkumd_exp_d(load(base, r) - m);
            }
            return m + vkumd_log_d(s);
        }
        return sign * m;
    }
    double den = packDouble2x32(pc.denominator);
    if (OP == 10u || OP == 11u) {  // var, std: two passes around the mean
        double s = 0.0LF;
        for (uint r = 0u; r < n; ++r) {
            s += load(base, r);
        }
        double mean = s / double(n);
        double d = 0.0LF;
        for (uint r = 0u; r < n; ++r) {
            double c = load(base, r) - mean;
            d += c * c;
        }
        double v = den > 0.0LF ? d / den : (d > 0.0LF ? vkumd_inf_d() : vkumd_nan_d());
        return OP == 11u ? sqrt(v) : v;
    }
    if (OP == 4u) {
        double p = 1.0LF;
        for (uint r = 0u; r < n; ++r) {
            p *= load(base, r);
        }
        return p;
    }
    double s = 0.0LF;
    for (uint r = 0u; r < n; ++r) {
        double v = load(base, r);
        s += (OP == 5u || OP == 7u) ? v * v : (OP == 6u ? abs(v) : v);
    }
    if (OP == 1u) {
        return s / den;
    }
    if (OP == 7u) {
        return sqrt(s);
    }
    if (OP == 9u) {
        return vkumd_log_d(s);
    }
    return s;
}

int arg_row(uint base, uint n) {
    bool last = (pc.flags & 4u) != 0u;
    double sign = OP == 13u ? -1.0LF : 1.0LF;
    int at = -1;
    int nan_at = -1;
    double best = 0.0LF;
    for (uint r = 0u; r < n; ++r) {
        double v = sign * load(base, r);
        if (vkumd_isnan_d(v)) {
            if (!last) {
                return int(r);  // the first NaN
            }
            nan_at = int(r);
        } else if (at < 0 || v > best || (last && v == best)) {
            at = int(r);
            best = v;
        }
    }
    return nan_at >= 0 ? nan_at : at;
}

void along_row(uint base, uint n) {
    if (OP == 14u || OP == 15u) {
        // softmax(scale * x), log_softmax(x) (scale 1), as the float kernels: each row's
        // largest x * sign(scale) is the reference, subtracted before scaling; a NaN or +inf
        // entry makes the row NaN; a row of -inf only is 0 (softmax), -inf (log_softmax).
        double scale = packDouble2x32(pc.denominator);
        double sign = scale < 0.0LF ? -1.0LF : 1.0LF;
        double m = -vkumd_inf_d();
        uint top = 0u;
        bool has_nan = false;
        for (uint r = 0u; r < n; ++r) {
            double v = sign * load(base, r);
            has_nan = has_nan || vkumd_isnan_d(v);
            if (v > m) {
                m = v;
                top = r;
            }
        }
        has_nan = has_nan || m == vkumd_inf_d();  // inf - inf: the row is NaN
        bool dead = !has_nan && m == -vkumd_inf_d();
        double ref = sign * m;
        // The sum is 1 (the reference entry, z = 0) plus the rest: log(sum) = log1p(rest)
        // keeps the digits of a row's largest log-probability, -log(1 + tiny).
        double rest = 0.0LF;
        for (uint r = 0u; r < n; ++r) {
            if (r != top) {
                rest += vkumd_exp_d(scale * (load(base, r) - ref));
            }
        }
        double s = 1.0LF + rest;
        double log_s = vkumd_log1p_d(rest);
        for (uint r = 0u; r < n; ++r) {
            double z = scale * (load(base, r) - ref);
            double v = OP == 14u ? vkumd_exp_d(z) / s : z - log_s;
            if (has_nan) {
                v = vkumd_nan_d();
            } else if (dead) {
                v = OP == 14u ? 0.0LF : -vkumd_inf_d();
            }
            result[base + r * pc.inner] = v;
        }
        return;
    }
    bool exclusive = (pc.flags & 1u) != 0u;
    bool reverse = (pc.flags & 2u) != 0u;
    double carry = OP == 17u ? 1.0LF : 0.0LF;
    for (uint k = 0u; k < n; ++k) {
        uint r = reverse ? n - 1u - k : k;
        double v = load(base, r);
        double next = OP == 17u ? carry * v : carry + v;
        result[base + r * pc.inner] = exclusive ? carry : next;
        carry = next;
    }
}

void main() {
    // The invocations past maxComputeWorkGroupCount[0] groups fold into y (rows.grid).
    uint index = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
                 + gl_GlobalInvocationID.x;
    if (index >= pc.rows * pc.inner) {
        return;
    }
    uint row = index / pc.inner;
    uint base = row * pc.cols * pc.inner + (index - row * pc.inner);
    if (OP <= 11u) {
        result[index] = reduce_row(base, pc.cols);
    } else if (OP <= 13u) {
        index_result[index] = arg_row(base, pc.cols);
    } else {
        along_row(base, pc.cols);
    }
}
