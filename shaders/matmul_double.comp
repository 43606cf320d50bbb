#version 450
// float64 matmul in double: out[b, i, j] = alpha * sum_k op(a)[b, i, k] op(b)[b, k, j]
// + bias[j] + residual[b, i, j], one invocation per output element, the products summed in
// order with fma. Built only where the device has shaderFloat64. A plain kernel (no tiles):
// float64 is for accuracy, not speed. flags: bit 0 trans_a, 1 trans_b, 2 a repeats across
// the batch, 3 b repeats, 4 the residual repeats ([M, N]), 5 a bias, 6 a residual.
#extension GL_EXT_shader_explicit_arithmetic_types : require

layout(local_size_x_id = 0) in;

layout(std430, binding = 0) readonly buffer A { double a[]; };
layout(std430, binding = 1) readonly buffer B { double b[]; };
layout(std430, binding = 2) writeonly buffer Out { double result[]; };
layout(std430, binding = 3) readonly buffer Bias { double bias[]; };
layout(std430, binding = 4) readonly buffer Residual { double residual[]; };

layout(push_constant) uniform Shape {
    uint m;
    uint n;
    uint k;
    uint count;  // batch entries
    uint flags;
    uint pad;
    uvec2 alpha;  // the bits of a double
} pc;

bool has(uint bit) {
    return (pc.flags & (1u << bit)) != 0u;
}

void main() {
    // The invocations past maxComputeWorkGroupCount[0] groups fold into y (rows.grid).
    uint index = gl_GlobalInvocationID.y * (gl_NumWorkGroups.x * gl_WorkGroupSize.x)
                 + gl_GlobalInvocationID.x;
    uint per_entry = pc.m * pc.n;
    if (index >= pc.count * per_entry) {
        return;
    }
    uint entry = index / per_entry;
    uint rest = index - entry * per_entry;
    uint i = rest / pc.n;
    uint j = rest - i * pc.n;
    uint a_base = has(2u) ? 0u : entry * pc.m * pc.k;
    uint b_base = has(3u) ? 0u : entry * pc.k * pc.n;
    // Steps along k through each operand.
    uint a_at = a_base + (has(0u) ? i : i * pc.k);
    uint a_step = has(0u) ? pc.m : 1u;
    uint b_at = b_base + (has(1u) ? j * pc.k : j);
    uint b_step = has(1u) ? 1u : pc.n;
    double s = 0.0LF;
    for (uint kk = 0u; kk < pc.k; ++kk) {
        s = fma(a[a_at], b[b_at], s);
        a_at += a_step;
        b_at += b_step;
    }
    double v = packDouble2x32(pc.alpha) * s;
    if (has(5u)) {
        v += bias[j];
    }
    if (has(6u)) {
        v += residual[has(4u) ? rest : index];
    }
    result[index] = v;
}
