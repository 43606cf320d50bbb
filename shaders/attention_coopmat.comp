#version 450
// Fused attention on VK_KHR_cooperative_matrix (float16 Q, K, V; float32 accumulation):
// out = softmax(Q K^T * scale + mask) V, flash-attention-2 style, for devices that list a
// float16 x float16 + float32 subgroup shape. TM x TN x TK come from that list as
// specialization constants (never compiled in); the defaults below only let the module compile.
//
// Work split. A workgroup is NSG subgroups of SG lanes; subgroup s owns SROWS = RB * TM
// consecutive rows (attention_common.glsl: (query head, query index) pairs of one key/value
// head), so the workgroup covers NSG * SROWS rows. Subgroups never exchange softmax state:
// each one keeps its own rows' running maximum and sum and its own output accumulators, and
// the only thing the workgroup shares is the staged K and V tiles.
//
//   start  each subgroup loads its rows of Q into RB * HDP / TK cooperative-matrix A
//          fragments, held in registers for the whole key sweep: straight from memory when
//          the workgroup's rows are all real, head_dim needs no padding and each TM-row
//          block is one strided matrix (inside one head, or [b, h, s, d]), else staged
//          through shared memory (zero-padded), one subgroup after the other.
//   per key tile of BC keys (only up to the last key any of the workgroup's rows can see):
//     1. the whole workgroup stages the K and V tiles into shared memory, 128-bit global
//        loads where head_dim allows (VEC = 8 halves) else 64-bit (VEC = 4); keys past the
//        visible end are written as zeros and never read from memory.
//     2. per subgroup (skipped when none of its rows sees a key of this tile):
//        S = Q K^T on cooperative matrices (K^T is the K tile read column-major; one K
//        fragment load feeds the RB row blocks), stored to the subgroup's float S tile.
//     3. online softmax with LPR lanes per row (SG / SROWS; 2 on NVIDIA at 16 rows, 1 on
//        lavapipe): each lane reads vec4 chunks of its row, applies scale, masks (only on
//        tiles that can need them) and the additive mask, the row maximum and sum are reduced
//        across the row's lanes with subgroupShuffleXor, P = exp2(S - max) goes to shared as
//        float16, and the per-row rescale factor alpha = exp2(old max - new max) is written
//        as a TM x TN row-broadcast tile.
//     4. O *= alpha (component-wise with that tile, skipped when every alpha is 1, which is
//        the common case once the maximum settles), then O += P V on cooperative matrices.
//   end    O *= 1 / sum the same way, converted to float16 and stored straight to memory (or,
//          where Q was staged, staged back the same way and written with wide stores); a row
//          whose every key is masked outputs zeros.
//
// Why O stays in accumulator fragments (RB * HDP / TN of them per subgroup): the per-row
// rescale costs one TM x TN tile load and HDP / TN component-wise multiplies per key tile,
// against storing and reloading the whole SROWS x HDP float accumulator (or the P V product)
// every tile if O lived in per-lane registers. The S tile and P must pass through shared
// memory either way: the KHR extension does not say which lane holds which element, so a row
// maximum cannot be taken on the accumulator itself.
//
// Shared memory (f16vec4 / vec4 arrays, so that copies are 64/128-bit; rows padded by 16
// bytes, and the S stride chosen so the row's lanes hit distinct banks):
//   sKV  KVROWS x KSTR f16vec4: K tile rows [0, BC), V tile rows [BC, 2 BC); before and
//        after the sweep, where staging is needed, one subgroup's Q or output rows [0, SROWS).
//   sS   per subgroup SROWS x SSTR vec4: S.
//   sP   per subgroup SROWS x PSTR f16vec4: P.
//   sA   per subgroup SROWS x TN floats: the alpha (at the end 1 / sum) row-broadcast tile.
// The host (vkumd/compiler/kernels/attention.py) checks the total against the device limit.
//
// Synchronisation: two workgroup barriers per key tile (around the K/V staging) and two
// subgroup barriers (S stored -> read by the row's lanes; P and alpha written -> loaded as
// matrices). Every barrier is reached by every subgroup, also those that skip the tile's
// work: lavapipe runs a subgroup barrier as a workgroup one.
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_vote : require
#extension GL_KHR_shader_subgroup_shuffle : require
#define DTYPE F16
#include "attention_common.glsl"
#include "coopmat.glsl"

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8u;
layout(constant_id = 2) const uint TN = 8u;
layout(constant_id = 3) const uint TK = 8u;
layout(constant_id = 4) const uint HD = 64u;
layout(constant_id = 5) const uint HDP = 64u;    // HD rounded up to a multiple of TK and TN
layout(constant_id = 6) const uint BC = 16u;     // keys per tile: a multiple of TN and TK
layout(constant_id = 7) const uint NSG = 1u;     // subgroups per workgroup
layout(constant_id = 8) const uint SG = 8u;      // lanes per subgroup (WORKGROUP = NSG * SG)
layout(constant_id = 9) const uint RB = 1u;      // TM-row blocks per subgroup
layout(constant_id = 10) const uint VEC = 8u;    // halves per global load: 8 (HD % 8 == 0) or 4
layout(constant_id = 11) const uint KVROWS = 32u;  // max(2 * BC, RB * TM)

const uint SROWS = RB * TM;                  // rows per subgroup
const uint LPR = (SG + SROWS - 1u) / SROWS;  // lanes per row (SG >= SROWS)
const uint RPL = (SROWS + SG - 1u) / SG;     // rows per lane (SG < SROWS)
const uint ROW_STEP = SG / LPR;              // rows one pass of the subgroup's lanes covers
const uint CPL = BC / (4u * LPR);            // vec4 chunks of a row per lane
const uint KSTR = HDP / 4u + 2u;             // sKV row stride (f16vec4)
// sS row stride (vec4): a multiple of LPR, odd in units of LPR, so that the 8 lanes of a
// 128-bit access phase (8 / LPR rows, LPR chunks each) fall in different banks.
const uint SSTR0 = (BC / 4u + LPR - 1u) / LPR * LPR;
const uint SSTR = SSTR0 + LPR * (1u - (SSTR0 / LPR) % 2u);
const uint PSTR = BC / 4u + 2u;              // sP row stride (f16vec4)
const uint NQ = HDP / TK;                    // fragments along head_dim as A (Q) or K
const uint NO = HDP / TN;                    // output fragments per row block
const uint NS = BC / TN;                     // S fragments per row block
const uint NP = BC / TK;                     // P fragments per row block
const uint CPR = HDP / VEC;                  // global-load chunks per padded row
const uint HDC = HD / VEC;                   // chunks that hold data
const uint SUB4 = VEC / 4u;                  // f16vec4 per chunk

layout(std430, binding = 0) readonly buffer BufQ8 { uvec4 q8[]; };
layout(std430, binding = 0) readonly buffer BufQ4 { uvec2 q4[]; };
layout(std430, binding = 0) readonly buffer BufQh { f16vec4 qh[]; };
layout(std430, binding = 1) readonly buffer BufK8 { uvec4 k8[]; };
layout(std430, binding = 1) readonly buffer BufK4 { uvec2 k4[]; };
layout(std430, binding = 2) readonly buffer BufV8 { uvec4 v8[]; };
layout(std430, binding = 2) readonly buffer BufV4 { uvec2 v4[]; };
layout(std430, binding = 3) writeonly buffer BufO8 { uvec4 o8[]; };
layout(std430, binding = 3) writeonly buffer BufO4 { uvec2 o4[]; };
layout(std430, binding = 3) writeonly buffer BufOh { f16vec4 oh4[]; };
layout(std430, binding = 4) readonly buffer BufLen { int key_len[]; };
layout(std430, binding = 5) readonly buffer BufMask { float mask[]; };

shared f16vec4 sKV[KVROWS * KSTR];
shared vec4 sS[NSG * SROWS * SSTR];
shared f16vec4 sP[NSG * SROWS * PSTR];
shared vec4 sA[NSG * SROWS * (TN / 4u)];

#define MAT_A COOPMAT_A(TM, TK)
#define MAT_B COOPMAT_B(TK, TN)
#define MAT_C COOPMAT_ACC(TM, TN)
#define MAT_H COOPMAT_ACC16(TM, TN)

f16vec4 halves(uint lo, uint hi) {
    return f16vec4(unpackFloat2x16(lo), unpackFloat2x16(hi));
}

// Copy chunk `index` (in units of VEC halves) of buffer `which` (0 = Q, 1 = K, 2 = V) into sKV
// at f16vec4 `dst`, or zeros when `inside` is false (the buffer is then not read).
void stage(uint which, bool inside, uint index, uint dst) {
    f16vec4 lo = f16vec4(0.0);
    f16vec4 hi = f16vec4(0.0);
    if (inside) {
        if (VEC == 8u) {
            uvec4 u = which == 0u ? q8[index] : (which == 1u ? k8[index] : v8[index]);
            lo = halves(u.x, u.y);
            hi = halves(u.z, u.w);
        } else {
            uvec2 u = which == 0u ? q4[index] : (which == 1u ? k4[index] : v4[index]);
            lo = halves(u.x, u.y);
        }
    }
    sKV[dst] = lo;
    if (VEC == 8u) {
        sKV[dst + 1u] = hi;
    }
}

// The causal key range of rows [r0, r0 + n) of this key/value head, clipped to real rows:
// keys below `full` are visible to every one of them, keys from `end` on to none. Uniform.
void causal_range(uint r0, uint n, out int full, out int end) {
    if (r0 >= pc.rows) {
        full = 0;
        end = 0;
        return;
    }
    uint last = min(r0 + n, pc.rows) - 1u;
    bool one_head = r0 / pc.Lq == last / pc.Lq;
    int lo = one_head ? int(r0 % pc.Lq) : 0;
    int hi = one_head ? int(last % pc.Lq) : int(pc.Lq) - 1;
    full = max(lo + pc.causal_offset + 1, 0);
    end = max(hi + pc.causal_offset + 1, 0);
}

// First element of row r (a (query head, query index) pair, see attention_common.glsl) of
// key/value head kvh's group in Q and in O, through their strides.
uint q_row(uint b, uint kvh, uint r) {
    return attn_q_row(b, kvh * pc.group + r / pc.Lq, r % pc.Lq);
}
uint o_row(uint b, uint kvh, uint r) {
    return attn_o_row(b, kvh * pc.group + r / pc.Lq, r % pc.Lq);
}

// Orders this subgroup's shared-memory writes (by lanes or cooperative-matrix stores) before
// its lanes' reads. Called where every subgroup of the workgroup gets to it (never in control
// flow that differs between subgroups): lavapipe runs a subgroup barrier as a workgroup one.
void subgroup_sync() {
    subgroupMemoryBarrierShared();
    subgroupBarrier();
}

void main() {
    uint lid = gl_LocalInvocationIndex;
    uint sg = gl_SubgroupID;
    uint lane = gl_SubgroupInvocationID;
    uint b = gl_WorkGroupID.y / pc.Hkv;
    uint kvh = gl_WorkGroupID.y % pc.Hkv;
    uint wrow0 = gl_WorkGroupID.x * (NSG * SROWS);
    uint srow0 = wrow0 + sg * SROWS;
    bool has_rows = srow0 < pc.rows;
    float neg_inf = attn_neg_inf();
    bool causal = (pc.flags & ATTN_CAUSAL) != 0u;
    bool has_mask = (pc.flags & ATTN_MASK) != 0u;
    // First element of this key/value head's K and V.
    uint kv_base = attn_kv_head(b, kvh);

    // Key ranges (uniform in the subgroup; wg_end in the workgroup): the workgroup loads keys
    // [0, wg_end); this subgroup computes on keys [0, sg_end) and needs per-element masks
    // only from sg_full on.
    uint key_lim = pc.Lk;
    if ((pc.flags & ATTN_KEY_LENGTHS) != 0u) {
        key_lim = min(key_lim, uint(max(key_len[b], 0)));
    }
    uint wg_end = key_lim;
    uint sg_end = has_rows ? key_lim : 0u;
    uint sg_full = key_lim;
    if (causal) {
        int full;
        int end;
        causal_range(wrow0, NSG * SROWS, full, end);
        wg_end = min(key_lim, uint(end));
        causal_range(srow0, SROWS, full, end);
        sg_end = min(key_lim, uint(end));
        sg_full = min(key_lim, uint(full));
    }

    // Q into A fragments: straight from memory when every row of the workgroup is real and
    // head_dim needs no padding (uniform), else staged (zero-padded) through rows [0, SROWS)
    // of sKV, one subgroup after the other.
    // A block of TM rows is one matrix of row stride q_ss (o_ss) when it stays inside one
    // query head (blocks start at multiples of TM) or when the heads' rows follow each other
    // at that stride too ([b, h, s, d]).
    bool heads_follow = pc.q_sh == pc.Lq * pc.q_ss && pc.o_sh == pc.Lq * pc.o_ss;
    bool direct = VEC == 8u && HD == HDP && wrow0 + NSG * SROWS <= pc.rows
                  && (pc.Lq % TM == 0u || heads_follow);
    MAT_A qf[RB * NQ];
    if (direct) {
        [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
            [[unroll]] for (uint d = 0u; d < NQ; ++d) {
                coopMatLoad(qf[rb * NQ + d], qh, (q_row(b, kvh, srow0 + rb * TM) + d * TK) / 4u,
                            pc.q_ss / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
    } else {
        for (uint turn = 0u; turn < NSG; ++turn) {
            bool mine = turn == sg && has_rows;
            if (mine) {
                for (uint t = 0u; t < (SROWS * CPR + SG - 1u) / SG; ++t) {  // once: not unrolled
                    uint i = t * SG + lane;
                    uint r = i / CPR;
                    uint c = i % CPR;
                    if (r < SROWS) {
                        bool inside = srow0 + r < pc.rows && c < HDC;
                        stage(0u, inside, q_row(b, kvh, srow0 + r) / VEC + c,
                              r * KSTR + c * SUB4);
                    }
                }
            }
            subgroup_sync();
            if (mine) {
                [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                    [[unroll]] for (uint d = 0u; d < NQ; ++d) {
                        coopMatLoad(qf[rb * NQ + d], sKV, rb * TM * KSTR + d * (TK / 4u), KSTR,
                                    gl_CooperativeMatrixLayoutRowMajor);
                    }
                }
            }
            barrier();
        }
    }

    MAT_C of[RB * NO];
    [[unroll]] for (uint i = 0u; i < RB * NO; ++i) {
        of[i] = MAT_C(0.0);
    }
    float row_max[RPL];
    float row_sum[RPL];
    [[unroll]] for (uint i = 0u; i < RPL; ++i) {
        row_max[i] = neg_inf;
        row_sum[i] = 0.0;
    }
    uint lane_row = lane / LPR;  // first local row of this lane
    uint lane_col = lane % LPR;  // its place among the row's lanes
    uint s_base = sg * SROWS * SSTR;
    uint p_base = sg * SROWS * PSTR;
    uint a_base = sg * SROWS * (TN / 4u);

    for (uint j0 = 0u; j0 < wg_end; j0 += BC) {
        barrier();  // every subgroup is done with sKV (Q fragments, or the last tile)
        [[unroll]] for (uint t = 0u; t < (BC * CPR + NSG * SG - 1u) / (NSG * SG); ++t) {
            uint i = t * NSG * SG + lid;
            uint r = i / CPR;
            uint c = i % CPR;
            if (r < BC) {
                uint j = j0 + r;
                bool inside = j < wg_end && c < HDC;
                uint src = (kv_base + j * pc.kv_ss) / VEC + c;
                stage(1u, inside, src, r * KSTR + c * SUB4);
                stage(2u, inside, src, (BC + r) * KSTR + c * SUB4);
            }
        }
        barrier();
        bool busy = j0 < sg_end;  // else none of this subgroup's rows sees these keys

        // 2. S = Q K^T.
        if (busy) {
            MAT_C sf[RB * NS];
            [[unroll]] for (uint i = 0u; i < RB * NS; ++i) {
                sf[i] = MAT_C(0.0);
            }
            [[unroll]] for (uint n = 0u; n < NS; ++n) {
                [[unroll]] for (uint d = 0u; d < NQ; ++d) {
                    MAT_B kb;
                    coopMatLoad(kb, sKV, n * TN * KSTR + d * (TK / 4u), KSTR,
                                gl_CooperativeMatrixLayoutColumnMajor);
                    [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                        sf[rb * NS + n] = coopMatMulAdd(qf[rb * NQ + d], kb, sf[rb * NS + n]);
                    }
                }
            }
            [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                [[unroll]] for (uint n = 0u; n < NS; ++n) {
                    coopMatStore(sf[rb * NS + n], sS, s_base + rb * TM * SSTR + n * (TN / 4u),
                                 SSTR, gl_CooperativeMatrixLayoutRowMajor);
                }
            }
        }
        subgroup_sync();

        // 3. Online softmax: the lanes of a row read its chunks lane_col, lane_col + LPR, ...
        bool rescale = false;
        if (busy) {
            bool edge = has_mask || j0 + BC > sg_full;
            [[unroll]] for (uint i = 0u; i < RPL; ++i) {
                uint r = lane_row + i * ROW_STEP;
                uint rr = min(srow0 + r, pc.rows - 1u);
                int qi = int(rr % pc.Lq);
                uint head = kvh * pc.group + rr / pc.Lq;
                uint mask_row = b * pc.mask_sb + head * pc.mask_sh + uint(qi) * pc.mask_si;
                int last_key = causal ? qi + pc.causal_offset : int(key_lim) - 1;  // visible
                vec4 x[CPL];
                float top = neg_inf;
                [[unroll]] for (uint t = 0u; t < CPL; ++t) {
                    uint chunk = lane_col + t * LPR;
                    x[t] = sS[s_base + r * SSTR + chunk] * pc.scale_log2;
                    if (edge) {
                        ivec4 j = ivec4(j0 + 4u * chunk) + ivec4(0, 1, 2, 3);
                        if (has_mask) {
                            uvec4 at = mask_row + uvec4(min(j, ivec4(key_lim - 1u))) * pc.mask_sj;
                            x[t] += vec4(mask[at.x], mask[at.y], mask[at.z], mask[at.w])
                                    * ATTN_LOG2E;
                        }
                        bvec4 hidden = greaterThan(j, ivec4(min(last_key, int(key_lim) - 1)));
                        x[t] = mix(x[t], vec4(neg_inf), hidden);
                    }
                    top = max(top, max(max(x[t].x, x[t].y), max(x[t].z, x[t].w)));
                }
                [[unroll]] for (uint s = 1u; s < LPR; s <<= 1u) {
                    top = max(top, subgroupShuffleXor(top, s));
                }
                float new_max = max(row_max[i], top);
                // A row with no visible key yet keeps max -inf; subtracting 0 then gives p = 0.
                float ref = new_max == neg_inf ? 0.0 : new_max;
                float alpha = exp2(row_max[i] - ref);
                row_max[i] = new_max;
                float total = 0.0;
                [[unroll]] for (uint t = 0u; t < CPL; ++t) {
                    f16vec4 p = f16vec4(exp2(x[t] - ref));
                    // Sum what P V multiplies, so that the weights are normalised exactly.
                    total += dot(vec4(p), vec4(1.0));
                    sP[p_base + r * PSTR + lane_col + t * LPR] = p;
                }
                [[unroll]] for (uint s = 1u; s < LPR; s <<= 1u) {
                    total += subgroupShuffleXor(total, s);
                }
                row_sum[i] = row_sum[i] * alpha + total;
                // The row-broadcast tile O is multiplied by (row r: TN copies of alpha).
                [[unroll]] for (uint u = lane_col; u < TN / 4u; u += LPR) {
                    sA[a_base + r * (TN / 4u) + u] = vec4(alpha);
                }
                rescale = rescale || alpha != 1.0;
            }
            rescale = subgroupAny(rescale);
        }
        subgroup_sync();

        // 4. O = O * alpha + P V.
        if (busy) {
            if (rescale) {  // else every alpha is 1
                [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                    MAT_C scale_tile;
                    coopMatLoad(scale_tile, sA, a_base + rb * TM * (TN / 4u), TN / 4u,
                                gl_CooperativeMatrixLayoutRowMajor);
                    [[unroll]] for (uint n = 0u; n < NO; ++n) {
                        of[rb * NO + n] = of[rb * NO + n] * scale_tile;
                    }
                }
            }
            [[unroll]] for (uint k = 0u; k < NP; ++k) {
                MAT_A pa[RB];
                [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                    coopMatLoad(pa[rb], sP, p_base + rb * TM * PSTR + k * (TK / 4u), PSTR,
                                gl_CooperativeMatrixLayoutRowMajor);
                }
                [[unroll]] for (uint n = 0u; n < NO; ++n) {
                    MAT_B vb;
                    coopMatLoad(vb, sKV, (BC + k * TK) * KSTR + n * (TN / 4u), KSTR,
                                gl_CooperativeMatrixLayoutRowMajor);
                    [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                        of[rb * NO + n] = coopMatMulAdd(pa[rb], vb, of[rb * NO + n]);
                    }
                }
            }
        }
    }
    barrier();  // every subgroup is done with the last K and V tiles

    // O / sum (0 for a row that saw no key), as float16: straight to memory, or through rows
    // [0, SROWS) of sKV one subgroup after the other (as Q came in).
    if (has_rows) {
        [[unroll]] for (uint i = 0u; i < RPL; ++i) {
            uint r = lane_row + i * ROW_STEP;
            float inv = row_sum[i] > 0.0 ? 1.0 / row_sum[i] : 0.0;
            [[unroll]] for (uint u = lane_col; u < TN / 4u; u += LPR) {
                sA[a_base + r * (TN / 4u) + u] = vec4(inv);
            }
        }
    }
    subgroup_sync();
    if (has_rows) {
        [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
            MAT_C scale_tile;
            coopMatLoad(scale_tile, sA, a_base + rb * TM * (TN / 4u), TN / 4u,
                        gl_CooperativeMatrixLayoutRowMajor);
            [[unroll]] for (uint n = 0u; n < NO; ++n) {
                of[rb * NO + n] = of[rb * NO + n] * scale_tile;
            }
        }
    }
    if (direct) {
        [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
            [[unroll]] for (uint n = 0u; n < NO; ++n) {
                MAT_H oh = MAT_H(of[rb * NO + n]);
                coopMatStore(oh, oh4, (o_row(b, kvh, srow0 + rb * TM) + n * TN) / 4u,
                             pc.o_ss / 4u, gl_CooperativeMatrixLayoutRowMajor);
            }
        }
        return;
    }
    for (uint turn = 0u; turn < NSG; ++turn) {
        bool mine = turn == sg && has_rows;
        if (mine) {
            [[unroll]] for (uint rb = 0u; rb < RB; ++rb) {
                [[unroll]] for (uint n = 0u; n < NO; ++n) {
                    MAT_H oh = MAT_H(of[rb * NO + n]);
                    coopMatStore(oh, sKV, rb * TM * KSTR + n * (TN / 4u), KSTR,
                                 gl_CooperativeMatrixLayoutRowMajor);
                }
            }
        }
        subgroup_sync();
        if (mine) {
            for (uint t = 0u; t < (SROWS * HDC + SG - 1u) / SG; ++t) {  // once: not unrolled
                uint i = t * SG + lane;
                uint r = i / HDC;
                uint c = i % HDC;
                if (r < SROWS && srow0 + r < pc.rows) {
                    uint src = r * KSTR + c * SUB4;
                    uint dst = o_row(b, kvh, srow0 + r) / VEC + c;
                    f16vec4 lo = sKV[src];
                    if (VEC == 8u) {
                        f16vec4 hi = sKV[src + 1u];
                        o8[dst] = uvec4(packFloat2x16(lo.xy), packFloat2x16(lo.zw),
                                        packFloat2x16(hi.xy), packFloat2x16(hi.zw));
                    } else {
                        o4[dst] = uvec2(packFloat2x16(lo.xy), packFloat2x16(lo.zw));
                    }
                }
            }
        }
        barrier();
    }
}
