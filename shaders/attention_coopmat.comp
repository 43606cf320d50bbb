#version 450
// Fused attention with VK_KHR_cooperative_matrix (float16 Q, K, V; float32 accumulation):
// out = softmax(Q K^T * scale + mask) V, flash style, for devices that list a float16 x
// float16 + float32 subgroup shape. TM x TN x TK come from that list as specialization
// constants (never compiled in); the defaults below only let the module compile.
//
// One workgroup is one subgroup and owns TM rows (attention_common.glsl: (query head, query
// index) pairs of one key/value head). Per key tile of BC keys (BC = lcm(TN, TK)):
//   1. the lanes copy the K and V tiles into shared memory, zero-padded to HDP columns
//      (head_dim rounded up to a multiple of TK and TN) and past the last key;
//   2. S = Q K^T on cooperative matrices (K^T is the K tile read column-major), stored to
//      shared memory;
//   3. each lane takes rows of S: scale, masks, online softmax (running maximum and sum),
//      P = exp2(S - max) as float16, and rescales its rows of the float32 accumulator O;
//   4. O += P V on cooperative matrices, O loaded from and stored back to shared memory.
// O, the maximum and the sum live in shared memory for the whole sweep; nothing of size
// seq x seq reaches global memory. A row with every key masked outputs zeros.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#define DTYPE F16
#include "attention_common.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8u;
layout(constant_id = 2) const uint TN = 8u;
layout(constant_id = 3) const uint TK = 8u;
layout(constant_id = 4) const uint HD = 64u;
layout(constant_id = 5) const uint HDP = 64u;  // HD rounded up to a multiple of TK and TN
layout(constant_id = 6) const uint BC = 8u;    // keys per tile: a multiple of TN and TK

layout(std430, binding = 0) readonly buffer BufQ { float16_t q[]; };
layout(std430, binding = 1) readonly buffer BufK { float16_t k[]; };
layout(std430, binding = 2) readonly buffer BufV { float16_t v[]; };
layout(std430, binding = 3) writeonly buffer BufO { float16_t o[]; };
layout(std430, binding = 4) readonly buffer BufLen { int key_len[]; };
layout(std430, binding = 5) readonly buffer BufMask { float mask[]; };

shared float16_t sQ[TM * HDP];
shared float16_t sK[BC * HDP];
shared float16_t sV[BC * HDP];
shared float sS[TM * BC];
shared float16_t sP[TM * BC];
shared float sO[TM * HDP];
shared float sMax[TM];
shared float sSum[TM];

void row_of(uint row, out uint head, out int qi) {
    uint rr = min(row, pc.rows - 1u);
    head = (gl_WorkGroupID.y % pc.Hkv) * pc.group + rr / pc.Lq;
    qi = int(rr % pc.Lq);
}

void main() {
    uint lane = gl_LocalInvocationIndex;
    uint lanes = gl_WorkGroupSize.x;
    uint b = gl_WorkGroupID.y / pc.Hkv;
    uint kvh = gl_WorkGroupID.y % pc.Hkv;
    uint row0 = gl_WorkGroupID.x * TM;
    float neg_inf = attn_neg_inf();
    bool causal = (pc.flags & ATTN_CAUSAL) != 0u;
    bool has_mask = (pc.flags & ATTN_MASK) != 0u;

    // Every lane works out the same key range (uniform control flow around barriers).
    uint key_end = pc.Lk;
    if ((pc.flags & ATTN_KEY_LENGTHS) != 0u) {
        key_end = min(key_end, uint(max(key_len[b], 0)));
    }
    if (causal) {
        int last_visible = -1;
        for (uint r = 0u; r < TM; ++r) {
            uint head;
            int qi;
            row_of(row0 + r, head, qi);
            if (row0 + r < pc.rows) {
                last_visible = max(last_visible, qi + pc.causal_offset);
            }
        }
        key_end = min(key_end, uint(max(last_visible + 1, 0)));
    }

    for (uint i = lane; i < TM * HDP; i += lanes) {
        uint r = i / HDP;
        uint d = i % HDP;
        uint head;
        int qi;
        row_of(row0 + r, head, qi);
        bool inside = row0 + r < pc.rows && d < HD;
        sQ[i] = inside ? q[((b * pc.Hq + head) * pc.Lq + uint(qi)) * HD + d] : float16_t(0.0);
        sO[i] = 0.0;
    }
    for (uint r = lane; r < TM; r += lanes) {
        sMax[r] = neg_inf;
        sSum[r] = 0.0;
    }
    barrier();

    uint kv_base = (b * pc.Hkv + kvh) * pc.Lk * HD;
    coopmat<float16_t, gl_ScopeSubgroup, TM, TK, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, TK, TN, gl_MatrixUseB> mb;
    coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator> acc;

    for (uint j0 = 0u; j0 < key_end; j0 += BC) {
        for (uint i = lane; i < BC * HDP; i += lanes) {
            uint j = j0 + i / HDP;
            uint d = i % HDP;
            bool inside = j < key_end && d < HD;
            sK[i] = inside ? k[kv_base + j * HD + d] : float16_t(0.0);
            sV[i] = inside ? v[kv_base + j * HD + d] : float16_t(0.0);
        }
        barrier();

        // S = Q K^T: B(kk, n) = K[n, kk], i.e. the K tile read column-major.
        for (uint n0 = 0u; n0 < BC; n0 += TN) {
            acc = coopmat<float, gl_ScopeSubgroup, TM, TN, gl_MatrixUseAccumulator>(0.0);
            for (uint d0 = 0u; d0 < HDP; d0 += TK) {
                coopMatLoad(ma, sQ, d0, HDP, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(mb, sK, n0 * HDP + d0, HDP, gl_CooperativeMatrixLayoutColumnMajor);
                acc = coopMatMulAdd(ma, mb, acc);
            }
            coopMatStore(acc, sS, n0, BC, gl_CooperativeMatrixLayoutRowMajor);
        }
        barrier();

        for (uint r = lane; r < TM; r += lanes) {
            uint head;
            int qi;
            row_of(row0 + r, head, qi);
            uint mask_row = b * pc.mask_sb + head * pc.mask_sh + uint(qi) * pc.mask_si;
            float tile_max = neg_inf;
            for (uint jj = 0u; jj < BC; ++jj) {
                uint j = j0 + jj;
                float x = sS[r * BC + jj] * pc.scale_log2;
                if (j >= key_end || (causal && int(j) > qi + pc.causal_offset)) {
                    x = neg_inf;
                } else if (has_mask) {
                    x += mask[mask_row + j * pc.mask_sj] * ATTN_LOG2E;
                }
                sS[r * BC + jj] = x;
                tile_max = max(tile_max, x);
            }
            float old_max = sMax[r];
            float new_max = max(old_max, tile_max);
            float alpha = 1.0;
            float tile_sum = 0.0;
            for (uint jj = 0u; jj < BC; ++jj) {
                float x = sS[r * BC + jj];
                float e = (new_max == neg_inf || x == neg_inf) ? 0.0 : exp2(x - new_max);
                sP[r * BC + jj] = float16_t(e);
                tile_sum += e;
            }
            if (new_max != neg_inf) {
                alpha = exp2(old_max - new_max);
            }
            sMax[r] = new_max;
            sSum[r] = sSum[r] * alpha + tile_sum;
            for (uint d = 0u; d < HDP; ++d) {
                sO[r * HDP + d] *= alpha;
            }
        }
        barrier();

        // O += P V.
        for (uint n0 = 0u; n0 < HDP; n0 += TN) {
            coopMatLoad(acc, sO, n0, HDP, gl_CooperativeMatrixLayoutRowMajor);
            for (uint k0 = 0u; k0 < BC; k0 += TK) {
                coopMatLoad(ma, sP, k0, BC, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(mb, sV, k0 * HDP + n0, HDP, gl_CooperativeMatrixLayoutRowMajor);
                acc = coopMatMulAdd(ma, mb, acc);
            }
            coopMatStore(acc, sO, n0, HDP, gl_CooperativeMatrixLayoutRowMajor);
        }
        barrier();
    }

    for (uint i = lane; i < TM * HD; i += lanes) {
        uint r = i / HD;
        uint d = i % HD;
        if (row0 + r >= pc.rows) {
            continue;
        }
        uint head;
        int qi;
        row_of(row0 + r, head, qi);
        float total = sSum[r];
        float value = total > 0.0 ? sO[r * HDP + d] / total : 0.0;
        o[((b * pc.Hq + head) * pc.Lq + uint(qi)) * HD + d] = float16_t(value);
    }
}
