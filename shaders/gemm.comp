#version 460
// GEMM with a fused epilogue, one template for the whole family:
//
//     out = act(alpha * op(A) @ op(B) + bias) + residual + beta * out_before
//
// op(X) is X or its transpose: the host passes element strides (sam, sak) for op(A)[m, k]
// and (sbk, sbn) for op(B)[k, n], so transposes cost nothing in the element-wise loads.
// Batches run along gl_WorkGroupID.z; a batch stride of 0 repeats an operand (shared weights,
// a residual shared by the batch). Storage types: DTYPE = F32, F16 or BF16 (A, B, C, bias and
// residual alike), arithmetic in float32 and C rounded once, when written; or I8, int8
// inputs with an exact int32 product and no epilogue.
//
// Every operand is reached through a buffer_reference address in the push constants (the
// design measured this faster than descriptors on lavapipe); the host still binds the
// buffers so that hazard tracking sees them. Nothing here checks bounds: the host checks
// shapes, and the loops only read clamped or in-range indices.
//
// PATH selects the main loop; the batch addressing and the epilogue (finish()) are shared:
//   PATH_LANES (lavapipe, CPU drivers): no shared memory. The workgroup is one subgroup of
//     S lanes and owns TM rows x (NC*S) columns of C. Edge tiles clamp their loads onto
//     the matrix (never stored), so the loop has no branches. WIDE_A / WIDE_B pick 64-bit
//     word loads on aligned layouts and element loads otherwise; see the section below.
//   PATH_SHARED (GPUs): a workgroup of (TM/RM)*(TN/RN) invocations stages TK-deep slices of
//     op(A) and op(B) through shared memory (zeros outside the matrix); each invocation
//     accumulates an RM x RN block.
//   PATH_COOPMAT: the same staging feeding coopMatMulAdd at a shape the driver lists
//     (CM_M x CM_N x CM_K, one accumulator tile per subgroup), float16 inputs.
//   PATH_PACK: not a GEMM; copies op(B) into contiguous column panels for PATH_LANES.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#include "elementwise_types.glsl"
#include "activation.glsl"

#define PATH_LANES 0
#define PATH_SHARED 1
#define PATH_COOPMAT 2
#define PATH_PACK 3

#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef PATH
#define PATH PATH_LANES
#endif

#define I8 5  // int8 x int8 -> int32 (only this kernel takes it)
#if DTYPE == I8
#extension GL_EXT_shader_8bit_storage : require
#endif
#if PATH == PATH_COOPMAT
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif

#if DTYPE == F32
#define ELEM float
#define ELEM_BYTES 4
#define LOAD(x) (x)
#define STORE(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define ELEM_BYTES 2
#define LOAD(x) float(x)
#define STORE(v) float16_t(v)
#elif DTYPE == BF16
#define ELEM uint16_t
#define ELEM_BYTES 2
#define LOAD(x) bf16_to_float(uint(x))
#define STORE(v) uint16_t(float_to_bf16(v))
#elif DTYPE == I8
#define ELEM int8_t
#define ELEM_BYTES 1
#define LOAD(x) int(x)
#else
#error "DTYPE must be F32, F16, BF16 or I8"
#endif

// Accumulator and output types: float32 and the storage type, or int32 for int8 inputs.
#if DTYPE == I8
#define ACC int
#define OUT_ELEM int
#define OUT_BYTES 4
#else
#define ACC float
#define OUT_ELEM ELEM
#define OUT_BYTES ELEM_BYTES
#endif

layout(local_size_x_id = 0) in;
layout(constant_id = 1) const uint TM = 8u;   // rows of C per workgroup
layout(constant_id = 2) const uint NJ = 4u;   // PATH_LANES: column groups per lane
layout(constant_id = 3) const uint KU = 4u;   // PATH_LANES: K steps unrolled per iteration
layout(constant_id = 4) const uint TN = 32u;  // PATH_SHARED/COOPMAT: columns per workgroup
layout(constant_id = 5) const uint TK = 8u;   // PATH_SHARED/COOPMAT: K slice depth
layout(constant_id = 6) const uint RM = 4u;   // PATH_SHARED: rows per invocation
layout(constant_id = 7) const uint RN = 4u;   // PATH_SHARED: columns per invocation

layout(buffer_reference, std430, buffer_reference_align = ELEM_BYTES) readonly buffer Elems {
    ELEM v[];
};
layout(buffer_reference, std430, buffer_reference_align = ELEM_BYTES) buffer PackedElems {
    ELEM v[];
};
layout(buffer_reference, std430, buffer_reference_align = OUT_BYTES) buffer OutElems {
    OUT_ELEM v[];
};

layout(push_constant) uniform Params {
    uint64_t a;         // addresses of the first element of each operand
    uint64_t b;
    uint64_t c;
    uint64_t bias;      // 0 when absent (flags say which are present)
    uint64_t residual;
    uint M;
    uint N;
    uint K;
    uint sam;           // op(A)[m, k] = A[m * sam + k * sak]
    uint sak;
    uint sbk;           // op(B)[k, n] = B[k * sbk + n * sbn]
    uint sbn;
    uint a_batch;       // elements between batch entries; 0 repeats the operand
    uint b_batch;
    uint r_batch;       // residual (C's own batch stride is M * N)
    float alpha;
    float beta;
    uint act;           // activation code (activation.glsl)
    uint flags;         // bit 0: bias, bit 1: residual, bit 2: beta * out_before
    uint b_panel;       // lanes path: elements between packed B panels; 0: B is not packed
    uint b_cols;        // lanes path: columns B's loads may touch (N, or whole panels)
} pc;

#define FLAG_BIAS 1u
#define FLAG_RESIDUAL 2u
#define FLAG_BETA 4u

uint64_t elem_offset(uint64_t base, uint index) {
    return base + uint64_t(index) * uint64_t(ELEM_BYTES);
}

ACC load_at(uint64_t base, uint index) {
    return LOAD(Elems(base).v[index]);
}

// The epilogue: every path hands each finished accumulator to this, once, in range.
#if DTYPE == I8
void finish(uint64_t c, uint64_t residual, uint row, uint col, int acc) {
    // int8 products are exact in int32; the op refuses float epilogues for them.
    OutElems(c).v[row * pc.N + col] = acc;
}

int bias_at(uint col) {
    return 0;
}

void finish_biased(uint64_t c, uint64_t residual, uint row, uint col, int acc, int bias_v) {
    finish(c, residual, row, col, acc);
}
#else
// bias_v: the bias of column col (0 without one), loaded once per column by the caller.
void finish_biased(uint64_t c, uint64_t residual, uint row, uint col, float acc,
                   float bias_v) {
    float v = vkumd_activate(pc.act, pc.alpha * acc + bias_v);
    uint index = row * pc.N + col;
    if ((pc.flags & FLAG_RESIDUAL) != 0u) {
        v += load_at(residual, index);
    }
    if ((pc.flags & FLAG_BETA) != 0u) {
        v += pc.beta * LOAD(OutElems(c).v[index]);
    }
    OutElems(c).v[index] = STORE(v);
}

float bias_at(uint col) {
    // Clamped: lanes past the last column load a real value they never store.
    return (pc.flags & FLAG_BIAS) != 0u ? load_at(pc.bias, min(col, pc.N - 1u)) : 0.0;
}

void finish(uint64_t c, uint64_t residual, uint row, uint col, float acc) {
    finish_biased(c, residual, row, col, acc, bias_at(col));
}
#endif

// The batch entry's operand addresses (batch along gl_WorkGroupID.z).
struct Bases {
    uint64_t a;
    uint64_t b;
    uint64_t c;
    uint64_t residual;
};

Bases batch_bases() {
    uint batch = gl_WorkGroupID.z;
    Bases p;
    p.a = elem_offset(pc.a, batch * pc.a_batch);
    p.b = elem_offset(pc.b, batch * pc.b_batch);
    p.c = pc.c + uint64_t(batch * pc.M * pc.N) * uint64_t(OUT_BYTES);
    p.residual = elem_offset(pc.residual, batch * pc.r_batch);
    return p;
}

#if PATH == PATH_LANES
// One subgroup per workgroup (the host makes sure), S lanes wide.
const uint S = gl_WorkGroupSize.x;
const uint RI = (TM + S - 1u) / S;  // rows of A each lane loads per K step

// lavapipe 25 turns every load through an address into a gather over the subgroup (even a
// load all lanes share), splits fma into a multiply and an add, and its gathers are slow on
// the host measured (one 8-lane gather took as long as about 6 vector multiply-adds, and a
// 64-bit one less than a 32-bit one: per float loaded, words were 3x cheaper). So this loop
// keeps loads per FMA low:
//   - A values are loaded once per subgroup (lane l holds rows m0 + S*i + l) and handed to
//     every lane with subgroupBroadcast, a register shuffle;
//   - WIDE_A = 1 (op(A) rows contiguous along K, K % VW == 0): one 64-bit word per lane
//     carries VW consecutive K values;
//   - WIDE_B = 1 (op(B) rows contiguous along N, N % VW == 0): one word carries VW columns,
//     so lane l owns columns n0 + VW * (S*j + l) + c; WIDE_B = 2 (op(B) columns contiguous
//     along K, i.e. B transposed, K % VW == 0): one word carries VW K values of a column;
//   - WIDE_* = 0 loads one element at a time, for any shape and stride.
#ifndef WIDE_A
#define WIDE_A 0
#endif
#ifndef WIDE_B
#define WIDE_B 0
#endif
#if WIDE_A != 0 || WIDE_B != 0
#define VW (8 / ELEM_BYTES)  // elements per 64-bit word
#else
#define VW 1
#endif
#if WIDE_A != 0 || WIDE_B == 2
#define KSTEP VW  // K advances by whole words
#else
#define KSTEP 1
#endif
#if WIDE_B == 1
#define VC VW  // adjacent columns a lane owns per column group
#else
#define VC 1
#endif
#define NC (NJ * VC)  // columns per lane

layout(buffer_reference, std430, buffer_reference_align = 8) readonly buffer Words {
    uint64_t v[];
};

// Element c of a 64-bit word of VW storage elements, as the accumulator type.
ACC unpack_word(uint64_t w, uint c) {
#if DTYPE == F32
    return uintBitsToFloat(uint(w >> (32u * c)));
#elif DTYPE == F16
    return unpackHalf2x16(uint(w >> (32u * (c / 2u))))[c % 2u];
#elif DTYPE == BF16
    return uintBitsToFloat((uint(w >> (16u * c)) & 0xFFFFu) << 16);
#else
    return bitfieldExtract(int(uint(w >> (32u * (c / 4u)))), int(8u * (c % 4u)), 8);
#endif
}

uint lane_col(uint n0, uint lane, uint j, uint c) {
#if WIDE_B == 1
    return n0 + VW * (S * j + lane) + c;
#else
    return n0 + S * j + lane;
#endif
}

// Accumulate K steps [k, k + STEPS) (STEPS a multiple of KSTEP).
#define LANES_STEP(STEPS)                                                                 \
    {                                                                                     \
        ACC av[RI * STEPS];                                                               \
        [[unroll]] for (uint i = 0u; i < RI; ++i) {                                       \
            LOAD_A_ROW(i, STEPS)                                                          \
        }                                                                                 \
        LOAD_B_K(STEPS)                                                                   \
        [[unroll]] for (uint kk = 0u; kk < STEPS; ++kk) {                                 \
            ACC bv[NC];                                                                   \
            LOAD_B_N(kk, STEPS)                                                           \
            [[unroll]] for (uint r = 0u; r < TM; ++r) {                                   \
                ACC x = subgroupBroadcast(av[(r / S) * STEPS + kk], r % S);               \
                [[unroll]] for (uint q = 0u; q < NC; ++q) {                               \
                    acc[r * NC + q] += x * bv[q];                                         \
                }                                                                         \
            }                                                                             \
        }                                                                                 \
        [[unroll]] for (uint i = 0u; i < RI; ++i) {                                       \
            ap[i] += uint64_t(STEPS * ELEM_BYTES) * uint64_t(pc.sak);                       \
        }                                                                                 \
        [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                       \
            bp[j] += uint64_t(STEPS * ELEM_BYTES) * uint64_t(B_K_STRIDE);                 \
        }                                                                                 \
    }

#if WIDE_A
#define LOAD_A_ROW(i, STEPS)                                                              \
    [[unroll]] for (uint kw = 0u; kw < STEPS; kw += VW) {                                 \
        uint64_t w = Words(ap[i]).v[kw / VW];                                             \
        [[unroll]] for (uint c = 0u; c < VW; ++c) {                                       \
            av[i * STEPS + kw + c] = unpack_word(w, c);                                   \
        }                                                                                 \
    }
#else
#define LOAD_A_ROW(i, STEPS)                                                              \
    [[unroll]] for (uint kk = 0u; kk < STEPS; ++kk) {                                     \
        av[i * STEPS + kk] = load_at(ap[i], kk * pc.sak);                                 \
    }
#endif

// Elements between consecutive K of one column of op(B) as the B loads walk it.
#if WIDE_B == 2
#define B_K_STRIDE 1u
#else
#define B_K_STRIDE pc.sbk
#endif

#if WIDE_B == 2
// B transposed: each lane's column is contiguous along K; load STEPS K values per column.
#define LOAD_B_K(STEPS)                                                                   \
    ACC bk[NJ * STEPS];                                                                   \
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                           \
        [[unroll]] for (uint kw = 0u; kw < STEPS; kw += VW) {                             \
            uint64_t w = Words(bp[j]).v[kw / VW];                                         \
            [[unroll]] for (uint c = 0u; c < VW; ++c) {                                   \
                bk[j * STEPS + kw + c] = unpack_word(w, c);                               \
            }                                                                             \
        }                                                                                 \
    }
#define LOAD_B_N(kk, STEPS)                                                               \
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                           \
        bv[j] = bk[j * STEPS + kk];                                                       \
    }
#elif WIDE_B == 1
#define LOAD_B_K(STEPS)
#define LOAD_B_N(kk, STEPS)                                                               \
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                           \
        uint64_t w = Words(bp[j] + uint64_t(kk * ELEM_BYTES) * uint64_t(pc.sbk)).v[0];    \
        [[unroll]] for (uint c = 0u; c < VW; ++c) {                                       \
            bv[j * VW + c] = unpack_word(w, c);                                           \
        }                                                                                 \
    }
#else
#define LOAD_B_K(STEPS)
#define LOAD_B_N(kk, STEPS)                                                               \
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                           \
        bv[j] = load_at(bp[j], kk * pc.sbk);                                              \
    }
#endif

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint m0 = gl_WorkGroupID.x * TM;
    uint n0 = gl_WorkGroupID.y * (NC * S);
    Bases base = batch_bases();
    uint64_t a = base.a;
    uint64_t b = base.b;
    // A packed B (PATH_PACK) holds this workgroup's columns as one contiguous panel of
    // K rows x (NC * S) columns: no two of its rows share a cache set, which a row stride of
    // a power of two bytes would make them do.
    uint b_n0 = 0u;
    if (pc.b_panel != 0u) {
        b += uint64_t(gl_WorkGroupID.y) * uint64_t(pc.b_panel) * uint64_t(ELEM_BYTES);
        b_n0 = n0;
    }

    // Rows and columns past the matrix read its last row or column instead (for a wide B,
    // its last whole word): always in bounds, never stored, and no branch in the loop.
    uint arow[RI];
    [[unroll]] for (uint i = 0u; i < RI; ++i) {
        arow[i] = min(m0 + S * i + lane, pc.M - 1u) * pc.sam;
    }
    uint bcol[NJ];
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {
#if WIDE_B == 1
        bcol[j] = min(lane_col(n0, lane, j, 0u), pc.b_cols - VW) - b_n0;
#else
        bcol[j] = (min(lane_col(n0, lane, j, 0u), pc.b_cols - 1u) - b_n0) * pc.sbn;
#endif
    }
    // Each lane walks its rows of A and columns of B with 64-bit pointers advanced by a
    // constant per step: lavapipe computes every index as a vector, and an index rebuilt
    // from k each step costed a vector multiply, shift and widening per load.
    uint64_t ap[RI];
    [[unroll]] for (uint i = 0u; i < RI; ++i) {
        ap[i] = a + uint64_t(arow[i]) * uint64_t(ELEM_BYTES);
    }
    uint64_t bp[NJ];
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {
        bp[j] = b + uint64_t(bcol[j]) * uint64_t(ELEM_BYTES);
    }
    ACC acc[TM * NC];
    [[unroll]] for (uint i = 0u; i < TM * NC; ++i) {
        acc[i] = ACC(0);
    }

    uint k = 0u;
    uint k_main = pc.K - pc.K % KU;
    for (; k < k_main; k += KU) {
        LANES_STEP(KU)
    }
    // The tail, a word at a time where loads run along K (the host makes K % VW == 0).
    for (; k < pc.K; k += KSTEP) {
        LANES_STEP(KSTEP)
    }

    // The epilogue runs once per element: a loop over rows of a copy keeps few instances of
    // it in the code (fully unrolled it would inline the activations TM * NC times), the
    // copy lets acc itself stay in registers in the main loop, and each column's bias is
    // loaded once.
    ACC result[TM * NC];
    [[unroll]] for (uint i = 0u; i < TM * NC; ++i) {
        result[i] = acc[i];
    }
    [[unroll]] for (uint q = 0u; q < NC; ++q) {
        uint col = lane_col(n0, lane, q / VC, q % VC);
        ACC bias_v = bias_at(col);
        [[dont_unroll]] for (uint r = 0u; r < TM; ++r) {
            uint row = m0 + r;
            if (row < pc.M && col < pc.N) {
                finish_biased(base.c, base.residual, row, col, result[r * NC + q], bias_v);
            }
        }
    }
}
#endif

#if PATH == PATH_SHARED || PATH == PATH_COOPMAT
// Both shared-memory paths stage TK-deep slices of op(A) (as [k][m]) and op(B) (as [k][n])
// through shared memory, with zeros outside the matrix: the same address arithmetic as the
// lanes path, and edge tiles need no other care.
#if PATH == PATH_COOPMAT
// The cooperative-matrix shape arrives as defines (CM_M, CM_N, CM_K), picked by the host from
// the shapes the driver lists: the matrix types are then literal in the SPIR-V, which the
// validation layer checks against that list without applying specialization.
#define SH_T float16_t
#define BM CM_M
#define BN CM_N
#define BK CM_K
#else
#define SH_T ACC
#define BM TM
#define BN TN
#define BK TK
#endif
shared SH_T sA[BK * BM];
shared SH_T sB[BK * BN];

void stage(Bases base, uint m0, uint n0, uint k0, uint tid, uint threads) {
    for (uint i = tid; i < BK * BM; i += threads) {
        uint row = m0 + i % BM;
        uint k = k0 + i / BM;
        sA[i] = (row < pc.M && k < pc.K) ? SH_T(load_at(base.a, row * pc.sam + k * pc.sak))
                                         : SH_T(0);
    }
    for (uint i = tid; i < BK * BN; i += threads) {
        uint col = n0 + i % BN;
        uint k = k0 + i / BN;
        sB[i] = (col < pc.N && k < pc.K) ? SH_T(load_at(base.b, k * pc.sbk + col * pc.sbn))
                                         : SH_T(0);
    }
}
#endif

#if PATH == PATH_SHARED
void main() {
    uint tid = gl_LocalInvocationID.x;
    uint threads = gl_WorkGroupSize.x;  // (TM / RM) * (TN / RN), set by the host
    uint m0 = gl_WorkGroupID.x * TM;
    uint n0 = gl_WorkGroupID.y * TN;
    Bases base = batch_bases();
    // Invocation (tx, ty) owns rows ty + i * (TM / RM) and columns tx + j * (TN / RN):
    // neighbouring invocations read neighbouring shared-memory words.
    uint tx = tid % (TN / RN);
    uint ty = tid / (TN / RN);

    ACC acc[RM * RN];
    [[unroll]] for (uint i = 0u; i < RM * RN; ++i) {
        acc[i] = ACC(0);
    }
    for (uint k0 = 0u; k0 < pc.K; k0 += TK) {
        stage(base, m0, n0, k0, tid, threads);
        barrier();
        [[unroll]] for (uint kk = 0u; kk < TK; ++kk) {
            ACC av[RM];
            ACC bv[RN];
            [[unroll]] for (uint i = 0u; i < RM; ++i) {
                av[i] = sA[kk * TM + ty + i * (TM / RM)];
            }
            [[unroll]] for (uint j = 0u; j < RN; ++j) {
                bv[j] = sB[kk * TN + tx + j * (TN / RN)];
            }
            [[unroll]] for (uint i = 0u; i < RM; ++i) {
                [[unroll]] for (uint j = 0u; j < RN; ++j) {
                    acc[i * RN + j] += av[i] * bv[j];
                }
            }
        }
        barrier();  // the next slice overwrites sA and sB
    }
    [[unroll]] for (uint i = 0u; i < RM; ++i) {
        [[unroll]] for (uint j = 0u; j < RN; ++j) {
            uint row = m0 + ty + i * (TM / RM);
            uint col = n0 + tx + j * (TN / RN);
            if (row < pc.M && col < pc.N) {
                finish(base.c, base.residual, row, col, acc[i * RN + j]);
            }
        }
    }
}
#endif

#if PATH == PATH_COOPMAT
// One subgroup per workgroup owns one TM x TN cooperative-matrix tile (a shape the driver
// lists, passed as CM_M, CM_N, CM_K). The accumulator goes through shared memory to the shared
// epilogue, so bias, activation, residual and beta work as on the other paths.
shared float sC[BM * BN];

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint lanes = gl_WorkGroupSize.x;
    uint m0 = gl_WorkGroupID.x * BM;
    uint n0 = gl_WorkGroupID.y * BN;
    Bases base = batch_bases();

    coopmat<float, gl_ScopeSubgroup, BM, BN, gl_MatrixUseAccumulator> acc =
        coopmat<float, gl_ScopeSubgroup, BM, BN, gl_MatrixUseAccumulator>(0.0);
    coopmat<float16_t, gl_ScopeSubgroup, BM, BK, gl_MatrixUseA> ma;
    coopmat<float16_t, gl_ScopeSubgroup, BK, BN, gl_MatrixUseB> mb;
    for (uint k0 = 0u; k0 < pc.K; k0 += BK) {
        stage(base, m0, n0, k0, lane, lanes);
        barrier();
        // sA holds [k][m]: op(A)'s tile in column-major order.
        coopMatLoad(ma, sA, 0u, BM, gl_CooperativeMatrixLayoutColumnMajor);
        coopMatLoad(mb, sB, 0u, BN, gl_CooperativeMatrixLayoutRowMajor);
        acc = coopMatMulAdd(ma, mb, acc);
        barrier();
    }
    coopMatStore(acc, sC, 0u, BN, gl_CooperativeMatrixLayoutRowMajor);
    barrier();
    for (uint i = lane; i < BM * BN; i += lanes) {
        uint row = m0 + i / BN;
        uint col = n0 + i % BN;
        if (row < pc.M && col < pc.N) {
            finish(base.c, base.residual, row, col, sC[i]);
        }
    }
}
#endif

#if PATH == PATH_PACK
// Copies op(B) (through sbk, sbn, so a transposed B comes out untransposed) into panels of
// TN columns: panel t holds rows k = 0..K-1 of columns t*TN .. t*TN + TN - 1, contiguous,
// zero past N. One invocation per element of the packed buffer (2-D grid, batch along z).
// pc.c is the packed buffer, pc.b_panel its elements per panel (K * TN).
void main() {
    uint row_width = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint index = gl_GlobalInvocationID.y * row_width + gl_GlobalInvocationID.x;
    uint panels = (pc.N + TN - 1u) / TN;
    if (index >= panels * pc.b_panel) {
        return;
    }
    uint batch = gl_WorkGroupID.z;
    uint t = index / pc.b_panel;
    uint rest = index % pc.b_panel;
    uint k = rest / TN;
    uint col = t * TN + rest % TN;
    uint64_t src = elem_offset(pc.b, batch * pc.b_batch);
    uint64_t dst = elem_offset(pc.c, batch * panels * pc.b_panel);
    ELEM v = ELEM(0);
    if (col < pc.N) {
        v = Elems(src).v[k * pc.sbk + col * pc.sbn];
    }
    PackedElems(dst).v[index] = v;
}
#endif
