#version 450
// Fused attention, portable variant: out = softmax(Q K^T * scale + mask) V, flash style.
//
// One workgroup is one subgroup of SG lanes. It owns ROWS rows (see attention_common.glsl:
// (query head, query index) pairs of one key/value head) and streams key tiles of
// KT = SG * KPL keys with an online softmax: a running maximum and sum per row, the
// accumulator rescaled whenever the maximum grows. No scores reach global memory.
//
// Work split inside the subgroup, chosen for CPU Vulkan drivers (lavapipe) where every
// buffer load is a per-lane loop and subgroup broadcasts are cheap:
//   Q K^T: each lane owns KPL keys of the tile and loads their rows as vec4 chunks; the
//          query chunk it multiplies with is broadcast from the lane that holds it
//          (Q lives in registers, chunk c of every row in lane c % SG).
//   P V:   each lane owns the vec4 chunks c = lane + SG * t of head_dim; the probability of
//          key j is broadcast from the lane that computed it.
// So no shared memory and no barriers. HD (head_dim, a multiple of 4) is a specialization
// constant, so register arrays and loops have fixed sizes. ADDRESSES = 1 reads K and V through
// buffer_reference pointers: on lavapipe that turns a bounds-checked loop per lane into one
// hardware gather per component (about 1.5x faster here). Tried and slower on lavapipe 25:
// [[unroll]] on the chunk loops (code size), every lane holding all of Q instead of
// broadcasting it, one query row per lane with subgroup-uniform K/V loads, explicit fma().
// ROWS = 8, KPL = 2 measured best of 4..16 x 1..4.
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
#include "attention_common.glsl"

#ifndef ADDRESSES
#define ADDRESSES 0
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint HD = 64u;
layout(constant_id = 2) const uint ROWS = 4u;
layout(constant_id = 3) const uint KPL = 1u;
layout(constant_id = 4) const uint SPLIT = 0u;

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
#if DTYPE == F16
// float16 rows are read as uvec2 and unpacked: two 32-bit loads per chunk instead of four
// 16-bit ones.
layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Rows4 { uvec2 x[]; };
vec4 unpack4(uvec2 bits) {
    return vec4(unpackHalf2x16(bits.x), unpackHalf2x16(bits.y));
}
#else
layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Rows4 { vec4 x[]; };
#define unpack4(x) (x)
#endif

#if ADDRESSES
#define LOAD_K(index) unpack4(Rows4(pc.k_addr).x[index])
#define LOAD_V(index) unpack4(Rows4(pc.v_addr).x[index])
#else
#define LOAD_K(index) vec4(k4[index])
#define LOAD_V(index) vec4(v4[index])
#endif

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
        uint qbase = ((b * pc.Hq + head[r]) * pc.Lq + uint(qi[r])) * C4;
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

    uint kv_base = (b * pc.Hkv + kvh) * pc.Lk * C4;
    for (uint j0 = key_begin; j0 < key_end; j0 += KT) {
        // Scores of this lane's KPL keys against every row.
        float s[ROWS * KPL];
        uint kbase[KPL];
        for (uint kk = 0u; kk < KPL; ++kk) {
            uint j = min(j0 + kk * SG + lane, pc.Lk - 1u);  // clamped: masked below
            kbase[kk] = kv_base + j * C4;
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
                    vv[t] = c < C4 ? LOAD_V(kv_base + j * C4 + c) : vec4(0.0);
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
        uint orow = (b * pc.Hq + head[r]) * pc.Lq + uint(qi[r]);
        if (SPLIT != 0u) {
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
            for (uint t = 0u; t < CPL; ++t) {
                uint c = lane + SG * t;
                if (c < C4) {
                    o4[orow * C4 + c] = ELEM4(acc[r * CPL + t] * inv);
                }
            }
        }
    }
}
