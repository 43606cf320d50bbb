#version 450
// Fused attention, portable variant: out = softmax(Q K^T * scale + mask) V, flash style.
//
// One workgroup is one subgroup of SG lanes. It owns a block of rows (see attention_common.glsl:
// (query head, query index) pairs of one key/value head) and streams key tiles with an online
// softmax: a running maximum and sum per row, the accumulator rescaled as the maximum grows.
// No scores reach global memory. Two work splits, for CPU Vulkan drivers (lavapipe) where a
// per-lane buffer load is a gather (or a loop per lane through a descriptor) and a subgroup
// broadcast with a constant lane is one shuffle:
//
// LANE_ROWS = 1 (every non-split launch): each lane owns RPL rows, Q and the accumulator of
//   all head_dim columns in registers; the subgroup walks KT1 keys per tile. The tile's K and
//   V rows are gathered once, spread over the lanes (lane l holds chunk t * SG + l), and each
//   chunk is broadcast to every lane, where it feeds RPL rows. So a gathered element serves
//   SG * RPL rows, and the softmax is per lane, without subgroup reductions. All loops inside
//   a tile are unrolled: register arrays indexed by a non-constant become gathers too.
//   Measured on lavapipe 25 at seq 1024, 12 heads, head_dim 64 (bench/attention.py): about
//   1.8x faster than the split below with ROWS = 8, KPL = 2. Not faster there: K/V loads
//   whose offset is uniform through a descriptor (lavapipe loads a scalar and broadcasts it,
//   but behind a bounds-check branch per component; 120 s to compile at 4 x 8), and rows x
//   tile other than 2 x 4.
// LANE_ROWS = 0 (the flash-decoding split, few rows): the workgroup owns ROWS rows.
//   Q K^T: each lane owns KPL keys of the tile and loads their rows as vec4 chunks; the
//          query chunk it multiplies with is broadcast from the lane that holds it
//          (Q lives in registers, chunk c of every row in lane c % SG).
//   P V:   each lane owns the vec4 chunks c = lane + SG * t of head_dim; the probability of
//          key j is broadcast from the lane that computed it.
// Neither uses shared memory or barriers. HD (head_dim, a multiple of 4) is a specialization
// constant, so register arrays and loops have fixed sizes. ADDRESSES = 1 reads K and V through
// buffer_reference pointers: on lavapipe that turns a bounds-checked loop per lane into one
// hardware gather per component (about 1.5x faster here). Tried and slower for LANE_ROWS = 0
// on lavapipe 25: [[unroll]] on the chunk loops (code size), every lane holding all of Q
// instead of broadcasting it, explicit fma(). ROWS = 8, KPL = 2 measured best of 4..16 x 1..4.
//
// SPLIT = 1 is the flash-decoding mode: workgroup z handles keys
// [z * split_keys, (z + 1) * split_keys) and writes its unnormalised output, maximum and sum
// to `part`; attention_combine.comp merges the splits.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference_uvec2 : require
#extension GL_EXT_control_flow_attributes : require
#include "attention_common.glsl"

#ifndef ADDRESSES
#define ADDRESSES 0
#endif
#ifndef LANE_ROWS
#define LANE_ROWS 0
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64u;
layout(constant_id = 2) const uint ROWS = 4u;
layout(constant_id = 3) const uint KPL = 1u;
layout(constant_id = 4) const uint SPLIT = 0u;
layout(constant_id = 5) const uint RPL = 4u;  // LANE_ROWS = 1: query rows per lane
layout(constant_id = 6) const uint KT1 = 8u;  // LANE_ROWS = 1: keys per tile
// LANE_ROWS = 1: whether an additive mask is bound (ATTN_MASK). A constant, because lavapipe
// runs both sides of a branch with masked lanes, and the mask's per-lane loads would cost
// every tile even when the flag is off.
layout(constant_id = 7) const bool MASKED = false;

const uint SG = gl_WorkGroupSize.x;
const uint C4 = HD / 4u;                 // vec4 chunks per row
const uint CPL = (C4 + SG - 1u) / SG;    // chunks per lane
const uint KT = SG * KPL;                // keys per tile

layout(std430, binding = 0) readonly buffer BufQ { ELEM4 q4[]; };
layout(std430, binding = 1) readonly buffer BufK { ELEM4 k4[]; };
layout(std430, binding = 2) readonly buffer BufV { ELEM4 v4[]; };
layout(std430, binding = 3) writeonly buffer BufO { ELEM4 o4[]; };
layout(std430, binding = 4) readonly buffer BufLen { int key_len[]; };
layout(std430, binding = 5) readonly buffer BufMask { float mask[]; };
// Per (batch, query head, query index, split): C4 chunks of output, then (max, sum, 0, 0).
layout(std430, binding = 6) writeonly buffer BufPart { vec4 part[]; };
#if ADDRESSES
// Chunks are read as 64-bit words: lavapipe then gathers half as many elements (a vec4 is two
// words, a float16 chunk one) as with vec4 or uvec2 loads. Measured on lavapipe 25, seq 1024,
// head_dim 64, one thread: float32 1.16x, float16 1.06x (docs/performance.md, attention).
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Words {
    uint64_t w[];
};
// Each word's byte address is computed in 64 bits and read as element 0: lavapipe 25 at
// 16-wide subgroups miscompiles Words(address).w[index] with a per-lane index in loops.
#if DTYPE == F16
vec4 chunk_at(uvec2 address, uint index) {
    uint64_t p = packUint2x32(address) + uint64_t(index) * 8ul;
    uvec2 u = unpackUint2x32(Words(p).w[0]);
    return vec4(unpackHalf2x16(u.x), unpackHalf2x16(u.y));
}
#else
vec4 chunk_at(uvec2 address, uint index) {
    uint64_t p = packUint2x32(address) + uint64_t(index) * 16ul;
    uvec2 lo = unpackUint2x32(Words(p).w[0]);
    uvec2 hi = unpackUint2x32(Words(p).w[1]);
    return uintBitsToFloat(uvec4(lo, hi));
}
#endif
#define LOAD_K(index) chunk_at(pc.k_addr, index)
#define LOAD_V(index) chunk_at(pc.v_addr, index)
#else
#define LOAD_K(index) vec4(k4[index])
#define LOAD_V(index) vec4(v4[index])
#endif

#if LANE_ROWS
// LANE_ROWS = 1 (see the top): lane-owned rows row0 + r * SG + lane, keys walked together.
void main() {
    uint lane = gl_LocalInvocationID.x;
    uint b = gl_WorkGroupID.y / pc.Hkv;
    uint kvh = gl_WorkGroupID.y % pc.Hkv;
    uint row0 = gl_WorkGroupID.x * (SG * RPL);
    float neg_inf = attn_neg_inf();
    bool causal = (pc.flags & ATTN_CAUSAL) != 0u;

    uint head[RPL];
    int qi[RPL];
    bool live[RPL];
    [[unroll]] for (uint r = 0u; r < RPL; ++r) {
        uint row = row0 + r * SG + lane;
        live[r] = row < pc.rows;
        uint rr = min(row, pc.rows - 1u);
        head[r] = kvh * pc.group + rr / pc.Lq;
        qi[r] = int(rr % pc.Lq);
    }

    // The key range is computed from workgroup-uniform values only, so that the loop and
    // every K/V offset in it stay uniform: the largest query index among the workgroup's
    // rows is its last row's unless the rows cross into the next query head.
    uint key_end = pc.Lk;
    if ((pc.flags & ATTN_KEY_LENGTHS) != 0u) {
        key_end = min(key_end, uint(max(key_len[b], 0)));
    }
    if (causal) {
        uint last_row = min(row0 + SG * RPL, pc.rows) - 1u;
        int max_qi = row0 / pc.Lq != last_row / pc.Lq ? int(pc.Lq) - 1 : int(last_row % pc.Lq);
        key_end = min(key_end, uint(max(max_qi + pc.causal_offset + 1, 0)));
    }

    vec4 qreg[RPL * C4];
    vec4 acc[RPL * C4];
    float row_max[RPL];
    float row_sum[RPL];
    [[unroll]] for (uint r = 0u; r < RPL; ++r) {
        uint qbase = attn_q_row(b, head[r], uint(qi[r])) / 4u;
        [[unroll]] for (uint c = 0u; c < C4; ++c) {
            qreg[r * C4 + c] = vec4(q4[qbase + c]) * pc.scale_log2;
            acc[r * C4 + c] = vec4(0.0);
        }
        row_max[r] = neg_inf;
        row_sum[r] = 0.0;
    }

    uint kv_base = attn_kv_head(b, kvh) / 4u;
    uint kv_step = pc.kv_ss / 4u;  // chunks from one key's row to the next
    for (uint j0 = 0u; j0 < key_end; j0 += KT1) {
        // Keys past key_end are clamped to a real one (its data is finite where the valid
        // keys are) and masked below.
        float s[RPL * KT1];
        [[unroll]] for (uint i = 0u; i < RPL * KT1; ++i) {
            s[i] = 0.0;
        }
        // The tile's K rows, gathered once (lane l holds chunk t * SG + l of each key); then
        // chunk-major so that each query chunk is read once per tile.
        vec4 kc[KT1 * CPL];
        [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
            uint j = min(j0 + kk, key_end - 1u);
            [[unroll]] for (uint t = 0u; t < CPL; ++t) {
                kc[kk * CPL + t] = LOAD_K(kv_base + j * kv_step + min(t * SG + lane, C4 - 1u));
            }
        }
        [[unroll]] for (uint c = 0u; c < C4; ++c) {
            [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
                vec4 kv = subgroupBroadcast(kc[kk * CPL + c / SG], c % SG);
                [[unroll]] for (uint r = 0u; r < RPL; ++r) {
                    s[r * KT1 + kk] += dot(qreg[r * C4 + c], kv);
                }
            }
        }

        [[unroll]] for (uint r = 0u; r < RPL; ++r) {
            float tile_max = neg_inf;
            [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
                uint j = j0 + kk;
                float x = s[r * KT1 + kk];
                if (MASKED) {
                    x += mask[b * pc.mask_sb + head[r] * pc.mask_sh + uint(qi[r]) * pc.mask_si
                              + min(j, key_end - 1u) * pc.mask_sj] * ATTN_LOG2E;
                }
                bool visible = j < key_end && !(causal && int(j) > qi[r] + pc.causal_offset);
                x = visible ? x : neg_inf;
                s[r * KT1 + kk] = x;
                tile_max = max(tile_max, x);
            }
            float new_max = max(row_max[r], tile_max);
            // While every key so far is masked, new_max is -inf: subtract 0 instead, so that
            // the probabilities are exp2(-inf) = 0 and not NaN.
            float base = new_max == neg_inf ? 0.0 : new_max;
            float alpha = exp2(row_max[r] - base);
            float tile_sum = 0.0;
            [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
                float e = exp2(s[r * KT1 + kk] - base);
                s[r * KT1 + kk] = e;
                tile_sum += e;
            }
            row_max[r] = new_max;
            row_sum[r] = row_sum[r] * alpha + tile_sum;
            [[unroll]] for (uint c = 0u; c < C4; ++c) {
                acc[r * C4 + c] *= alpha;
            }
        }

        vec4 vc[KT1 * CPL];
        [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
            uint j = min(j0 + kk, key_end - 1u);
            [[unroll]] for (uint t = 0u; t < CPL; ++t) {
                vc[kk * CPL + t] = LOAD_V(kv_base + j * kv_step + min(t * SG + lane, C4 - 1u));
            }
        }
        [[unroll]] for (uint c = 0u; c < C4; ++c) {
            [[unroll]] for (uint kk = 0u; kk < KT1; ++kk) {
                vec4 vv = subgroupBroadcast(vc[kk * CPL + c / SG], c % SG);
                [[unroll]] for (uint r = 0u; r < RPL; ++r) {
                    acc[r * C4 + c] += s[r * KT1 + kk] * vv;
                }
            }
        }
    }

    [[unroll]] for (uint r = 0u; r < RPL; ++r) {
        if (live[r]) {
            uint obase = attn_o_row(b, head[r], uint(qi[r])) / 4u;
            // A row with every key masked has row_sum == 0 and outputs zeros.
            float inv = row_sum[r] > 0.0 ? 1.0 / row_sum[r] : 0.0;
            [[unroll]] for (uint c = 0u; c < C4; ++c) {
                o4[obase + c] = ELEM4(acc[r * C4 + c] * inv);
            }
        }
    }
}
#else
void main() {
    uint lane = gl_SubgroupInvocationID;
    uint b = gl_WorkGroupID.y / pc.Hkv;
    uint kvh = gl_WorkGroupID.y % pc.Hkv;
    uint row0 = gl_WorkGroupID.x * ROWS;
    uint split = gl_WorkGroupID.z;
    float neg_inf = attn_neg_inf();
    bool causal = (pc.flags & ATTN_CAUSAL) != 0u;
    bool has_mask = (pc.flags & ATTN_MASK) != 0u;

    // Rows of this workgroup: query head, query index and whether the row exists.
    uint head[ROWS];
    int qi[ROWS];
    bool live[ROWS];
    int last_visible = -1;  // largest key index any live row may see (causal)
    for (uint r = 0u; r < ROWS; ++r) {
        uint row = row0 + r;
        live[r] = row < pc.rows;
        uint rr = min(row, pc.rows - 1u);
        head[r] = kvh * pc.group + rr / pc.Lq;
        qi[r] = int(rr % pc.Lq);
        if (live[r]) {
            last_visible = max(last_visible, qi[r] + pc.causal_offset);
        }
    }

    uint key_end = pc.Lk;
    if ((pc.flags & ATTN_KEY_LENGTHS) != 0u) {
        key_end = min(key_end, uint(max(key_len[b], 0)));
    }
    if (causal) {
        key_end = min(key_end, uint(max(last_visible + 1, 0)));
    }
    uint key_begin = 0u;
    if (SPLIT != 0u) {
        key_begin = split * pc.split_keys;
        key_end = min(key_end, key_begin + pc.split_keys);
    }

    // Q rows in registers, pre-scaled into log2 units.
    vec4 qreg[ROWS * CPL];
    vec4 acc[ROWS * CPL];
    float row_max[ROWS];
    float row_sum[ROWS];  // this lane's share; summed over the subgroup at the end
    for (uint r = 0u; r < ROWS; ++r) {
        uint qbase = attn_q_row(b, head[r], uint(qi[r])) / 4u;
        for (uint t = 0u; t < CPL; ++t) {
            uint c = lane + SG * t;
            vec4 x = vec4(0.0);
            if (live[r] && c < C4) {
                x = vec4(q4[qbase + c]) * pc.scale_log2;
            }
            qreg[r * CPL + t] = x;
            acc[r * CPL + t] = vec4(0.0);
        }
        row_max[r] = neg_inf;
        row_sum[r] = 0.0;
    }

    uint kv_base = attn_kv_head(b, kvh) / 4u;
    uint kv_step = pc.kv_ss / 4u;
    for (uint j0 = key_begin; j0 < key_end; j0 += KT) {
        // Scores of this lane's KPL keys against every row.
        float s[ROWS * KPL];
        uint kbase[KPL];
        for (uint kk = 0u; kk < KPL; ++kk) {
            uint j = min(j0 + kk * SG + lane, pc.Lk - 1u);  // clamped: masked below
            kbase[kk] = kv_base + j * kv_step;
            for (uint r = 0u; r < ROWS; ++r) {
                s[r * KPL + kk] = 0.0;
            }
        }
        for (uint t = 0u; t < CPL; ++t) {
            for (uint src = 0u; src < SG; ++src) {
                uint c = t * SG + src;
                if (c >= C4) {
                    break;
                }
                vec4 kv[KPL];
                for (uint kk = 0u; kk < KPL; ++kk) {
                    kv[kk] = LOAD_K(kbase[kk] + c);
                }
                for (uint r = 0u; r < ROWS; ++r) {
                    vec4 qc = subgroupBroadcast(qreg[r * CPL + t], src);
                    for (uint kk = 0u; kk < KPL; ++kk) {
                        s[r * KPL + kk] += dot(qc, kv[kk]);
                    }
                }
            }
        }

        // Masks, then the online-softmax update per row.
        float p[ROWS * KPL];
        for (uint r = 0u; r < ROWS; ++r) {
            float tile_max = neg_inf;
            for (uint kk = 0u; kk < KPL; ++kk) {
                uint j = j0 + kk * SG + lane;
                float x = s[r * KPL + kk];
                if (j >= key_end || (causal && int(j) > qi[r] + pc.causal_offset)) {
                    x = neg_inf;
                } else if (has_mask) {
                    x += mask[b * pc.mask_sb + head[r] * pc.mask_sh + uint(qi[r]) * pc.mask_si
                              + j * pc.mask_sj] * ATTN_LOG2E;
                }
                s[r * KPL + kk] = x;
                tile_max = max(tile_max, x);
            }
            tile_max = subgroupMax(tile_max);
            float new_max = max(row_max[r], tile_max);
            float alpha = 1.0;
            float tile_sum = 0.0;
            if (new_max != neg_inf) {
                alpha = exp2(row_max[r] - new_max);  // 0 the first time (row_max = -inf)
                for (uint kk = 0u; kk < KPL; ++kk) {
                    float x = s[r * KPL + kk];
                    float e = x == neg_inf ? 0.0 : exp2(x - new_max);
                    p[r * KPL + kk] = e;
                    tile_sum += e;
                }
            } else {
                for (uint kk = 0u; kk < KPL; ++kk) {
                    p[r * KPL + kk] = 0.0;
                }
            }
            row_max[r] = new_max;
            row_sum[r] = row_sum[r] * alpha + tile_sum;
            for (uint t = 0u; t < CPL; ++t) {
                acc[r * CPL + t] *= alpha;
            }
        }

        // acc += P V: key j's probabilities come from the lane that owns j.
        for (uint kk = 0u; kk < KPL; ++kk) {
            for (uint src = 0u; src < SG; ++src) {
                uint j = j0 + kk * SG + src;
                if (j >= key_end) {
                    break;
                }
                vec4 vv[CPL];
                for (uint t = 0u; t < CPL; ++t) {
                    uint c = lane + SG * t;
                    vv[t] = c < C4 ? LOAD_V(kv_base + j * kv_step + c) : vec4(0.0);
                }
                for (uint r = 0u; r < ROWS; ++r) {
                    float pj = subgroupBroadcast(p[r * KPL + kk], src);
                    for (uint t = 0u; t < CPL; ++t) {
                        acc[r * CPL + t] += pj * vv[t];
                    }
                }
            }
        }
    }

    for (uint r = 0u; r < ROWS; ++r) {
        float total = subgroupAdd(row_sum[r]);
        if (!live[r]) {
            continue;
        }
        if (SPLIT != 0u) {
            // The scratch is [b, h, s] row-major whatever the layout; the combine step
            // writes out through its strides.
            uint orow = (b * pc.Hq + head[r]) * pc.Lq + uint(qi[r]);
            uint base = (orow * pc.splits + split) * (C4 + 1u);
            for (uint t = 0u; t < CPL; ++t) {
                uint c = lane + SG * t;
                if (c < C4) {
                    part[base + c] = acc[r * CPL + t];
                }
            }
            if (lane == 0u) {
                part[base + C4] = vec4(row_max[r], total, 0.0, 0.0);
            }
        } else {
            // A row with every key masked has total == 0 and outputs zeros.
            float inv = total > 0.0 ? 1.0 / total : 0.0;
            uint obase = attn_o_row(b, head[r], uint(qi[r])) / 4u;
            for (uint t = 0u; t < CPL; ++t) {
                uint c = lane + SG * t;
                if (c < C4) {
                    o4[obase + c] = ELEM4(acc[r * CPL + t] * inv);
                }
            }
        }
    }
}
#endif
