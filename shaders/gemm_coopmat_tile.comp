#version 450
// C[M,N] (float32) = A[M,K] (float16) x B[K,N] (float16), all row-major, with
// VK_KHR_cooperative_matrix at subgroup scope.
//
// One workgroup is one subgroup and owns one TM x TN tile of C; it walks K in steps of TK.
// TM, TN and TK are specialization constants set from the shapes the driver lists
// (DeviceCaps.coopmat_shapes("float16", "float32")), never hard-coded: the defaults below
// only exist so that the module compiles. The workgroup size (constant_id 0) must be the
// device's subgroup size.
//
// Edges: a step whose A (or B) block lies wholly inside the matrix, with row strides that
// meet coopMatLoad's alignment rule (pc.aligned, worked out by the host), loads straight from
// the storage buffer. Any other block is copied by the lanes into shared memory with zeros
// outside the matrix, and loaded from there; the C tile likewise goes through shared memory
// and only in-range elements are written. So any M, N, K >= 1 is correct.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8u;
layout(constant_id = 2) const uint TN = 8u;
layout(constant_id = 3) const uint TK = 8u;

layout(std430, binding = 0) readonly buffer BufA { float16_t a[]; };
layout(std430, binding = 1) readonly buffer BufB { float16_t b[]; };
layout(std430, binding = 2) writeonly buffer BufC { float c[]; };

layout(push_constant) uniform Params {
    uint M;
    uint N;
    uint K;
    uint tiles_n;   // ceil(N / TN): workgroups along N in the flattened grid
    uint tiles;     // ceil(M / TM) * tiles_n
    uint aligned;   // bit 0: A rows (K) direct-loadable, bit 1: B rows (N), bit 2: C rows (N)
} pc;

shared float16_t sA[TM * TK];
shared float16_t sB[TK * TN];
shared float sC[TM * TN];

void main() {
    uint row_width = gl_NumWorkGroups.x;
    uint tile = gl_WorkGroupID.y * row_width + gl_WorkGroupID.x;
    if (tile >= pc.tiles) {
        return;  // uniform over the workgroup: the whole subgroup leaves together
    }
    uint m0 = (tile / pc.tiles_n) * TM;
    uint n0 = (tile % pc.tiles_n) * TN;
    uint lane = gl_LocalInvocationIndex;
    uint lanes = gl_WorkGroupSize.x;
    bool full_m = m0 + TM <= pc.M;
    bool full_n = n0 + TN <= pc.N;

    coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);
    coopmat<float16_t, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> mb;

    for (uint k0 = 0u; k0 < pc.K; k0 += TK) {
        bool full_k = k0 + TK <= pc.K;
        bool direct_a = (pc.aligned & 1u) != 0u && full_m && full_k;
        bool direct_b = (pc.aligned & 2u) != 0u && full_k && full_n;
        if (!direct_a) {
            for (uint i = lane; i < TM * TK; i += lanes) {
                uint r = m0 + i / TK;
                uint k = k0 + i % TK;
                sA[i] = (r < pc.M && k < pc.K) ? a[r * pc.K + k] : float16_t(0.0);
            }
        }
        if (!direct_b) {
            for (uint i = lane; i < TK * TN; i += lanes) {
                uint k = k0 + i / TN;
                uint col = n0 + i % TN;
                sB[i] = (k < pc.K && col < pc.N) ? b[k * pc.N + col] : float16_t(0.0);
            }
        }
        barrier();
        if (direct_a) {
            coopMatLoad(ma, a, m0 * pc.K + k0, pc.K, gl_CooperativeMatrixLayoutRowMajor);
        } else {
            coopMatLoad(ma, sA, 0u, TK, gl_CooperativeMatrixLayoutRowMajor);
        }
        if (direct_b) {
            coopMatLoad(mb, b, k0 * pc.N + n0, pc.N, gl_CooperativeMatrixLayoutRowMajor);
        } else {
            coopMatLoad(mb, sB, 0u, TN, gl_CooperativeMatrixLayoutRowMajor);
        }
        acc = coopMatMulAdd(ma, mb, acc);
        barrier();  // the next step overwrites sA and sB
    }

    if ((pc.aligned & 4u) != 0u && full_m && full_n) {
        coopMatStore(acc, c, m0 * pc.N + n0, pc.N, gl_CooperativeMatrixLayoutRowMajor);
        return;
    }
    coopMatStore(acc, sC, 0u, TN, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    for (uint i = lane; i < TM * TN; i += lanes) {
        uint r = m0 + i / TN;
        uint col = n0 + i % TN;
        if (r < pc.M && col < pc.N) {
            c[r * pc.N + col] = sC[i];
        }
    }
}
