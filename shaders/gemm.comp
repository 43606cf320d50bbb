#version 460
// GEMM with a fused epilogue, one template for the whole family:
//
//     out = act(alpha * op(A) @ op(B) + bias) + residual + beta * out_before
// (bias per column, or per row for a convolution; the residual before act on request)
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
//   PATH_COOPMAT (GPUs with cooperative matrices): float16 inputs. A workgroup of
//     WG_M x WG_N subgroups owns a BM x BN block; each subgroup keeps a grid of CM_M x CM_N
//     accumulator matrices (a shape the driver lists) for the whole K loop, fed from
//     double-buffered shared-memory slices filled by 16-byte loads; see its section.
//   PATH_PACK: not a GEMM; copies op(B) into contiguous column panels for PATH_LANES.
//
// CONV = 1 makes the GEMM a convolution (implicit GEMM): op(B) is the im2col matrix of an
// NCHW input, never stored: B[k, n] with k = (c * kh + ky) * kw + kx and n = oy * ow + ox is
// x[c, oy*sy - pt + ky*dy, ox*sx - pl + kx*dx], zero outside the input, each load computing
// its address (see the CONV section). The batch runs over (image, group): entry z takes
// group z % groups's weights (A) and row bias, and its input channels and outputs are
// consecutive blocks, so B, C and the residual step by their plain batch strides.
// CONV = 2 reads the input in NHWC instead (a layout measurement, docs/vision.md): k =
// (ky * kw + kx) * cin_g + c, the weights [c_out, kh, kw, cin_g], B's batch stride one image
// (h * w * c_in) and group g's channels at offset g * cin_g. The output stays NCHW.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_buffer_reference2 : require
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_ballot : require
#extension GL_EXT_control_flow_attributes : require
#include "elementwise_types.glsl"
#include "activation.glsl"
#include "coopmat.glsl"

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
#ifndef CONV
#define CONV 0
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
layout(constant_id = 4) const uint TN = 32u;  // PATH_SHARED: columns per workgroup
layout(constant_id = 5) const uint TK = 8u;   // PATH_SHARED: K slice depth
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
    float act_p0;       // the activation's parameters (clip's bounds, leaky_relu's slope)
    float act_p1;
    uint bias_batch;    // row bias: elements between batch entries' biases (0: shared)
#if CONV
    uint conv_h;        // the input's height and width (B's batch stride is c_in/groups*h*w)
    uint conv_w;
    uint conv_ow;       // output width: column n is output pixel (n / ow, n % ow)
    uint conv_kh;       // kernel taps, strides, dilation, top and left pads
    uint conv_kw;
    uint conv_sy;
    uint conv_sx;
    uint conv_dy;
    uint conv_dx;
    int conv_pt;
    int conv_pl;
    uint conv_groups;   // batch entry z uses the weights and bias of group z % groups
#endif
} pc;

#define FLAG_BIAS 1u
#define FLAG_RESIDUAL 2u
#define FLAG_BETA 4u
// A bias per row (a convolution's per output channel) instead of per column.
#define FLAG_BIAS_ROW 8u
// The residual is added before the activation (ResNet's act(conv + bias + residual)).
#define FLAG_RESIDUAL_FIRST 16u

uint64_t elem_offset(uint64_t base, uint index) {
    return base + uint64_t(index) * uint64_t(ELEM_BYTES);
}

uint64_t out_offset(uint64_t base, uint index) {
    return base + uint64_t(index) * uint64_t(OUT_BYTES);
}

// Every access through a buffer reference takes a byte address computed here and element 0:
// lavapipe 25 at 16-wide subgroups (LP_NATIVE_VECTOR_WIDTH=512) miscompiles
// Elems(base).v[index] with a per-lane index inside loops (lanes 8-15 load or store the
// wrong element or nothing), where the same access through base + index * size is right.
ELEM load_elem(uint64_t base, uint index) {
    return Elems(elem_offset(base, index)).v[0];
}

ACC load_at(uint64_t base, uint index) {
    return LOAD(load_elem(base, index));
}

// The batch entry whose A (and row bias) this workgroup uses.
uint a_entry() {
#if CONV
    return gl_WorkGroupID.z % pc.conv_groups;
#else
    return gl_WorkGroupID.z;
#endif
}

#if CONV
// The implicit GEMM's B: the input element at (iy, ix) of the channel plane starting at
// element `plane` of the batch entry's input, or 0 in the padding. The load always reads in
// bounds (the plane's first element when outside) and the select drops it.
ACC conv_b(uint64_t b, int iy, int ix, uint plane) {
    bool inside = uint(iy) < pc.conv_h && uint(ix) < pc.conv_w;  // a negative is huge
#if CONV == 2
    // NHWC: `plane` is the channel; pixels are c_in elements apart.
    uint c_in = pc.K / (pc.conv_kh * pc.conv_kw) * pc.conv_groups;
    uint index = inside ? (uint(iy) * pc.conv_w + uint(ix)) * c_in + plane : plane;
#else
    uint index = inside ? plane + uint(iy) * pc.conv_w + uint(ix) : plane;
#endif
    ACC v = load_at(b, index);
    return inside ? v : ACC(0);
}

// op(B)[k, n] from scratch (k < K, n < N): the shared and cooperative-matrix paths' loader.
ACC conv_b_at(uint64_t b, uint k, uint n) {
    uint taps = pc.conv_kh * pc.conv_kw;
#if CONV == 2
    uint cin_g = pc.K / taps;
    uint t = k / cin_g;
    uint c = k - t * cin_g;
#else
    uint c = k / taps;
    uint t = k - c * taps;
#endif
    uint ky = t / pc.conv_kw;
    uint kx = t - ky * pc.conv_kw;
    uint oy = n / pc.conv_ow;
    uint ox = n - oy * pc.conv_ow;
#if CONV == 2
    uint plane = c;
#else
    uint plane = c * pc.conv_h * pc.conv_w;
#endif
    return conv_b(b, int(oy * pc.conv_sy + ky * pc.conv_dy) - pc.conv_pt,
                  int(ox * pc.conv_sx + kx * pc.conv_dx) - pc.conv_pl, plane);
}
#endif

// The epilogue: every path hands each finished accumulator to this, once, in range.
#if DTYPE == I8
void finish(uint64_t c, uint64_t residual, uint row, uint col, int acc) {
    // int8 products are exact in int32; the op refuses float epilogues for them.
    OutElems(out_offset(c, row * pc.N + col)).v[0] = acc;
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
    float v = pc.alpha * acc + bias_v;
    if ((pc.flags & FLAG_BIAS_ROW) != 0u) {
        v += load_at(pc.bias, a_entry() * pc.bias_batch + row);
    }
    uint index = row * pc.N + col;
    bool residual_first = (pc.flags & FLAG_RESIDUAL_FIRST) != 0u;
    if ((pc.flags & FLAG_RESIDUAL) != 0u && residual_first) {
        v += load_at(residual, index);
    }
    v = vkumd_activate_params(pc.act, v, pc.act_p0, pc.act_p1);
    if ((pc.flags & FLAG_RESIDUAL) != 0u && !residual_first) {
        v += load_at(residual, index);
    }
    if ((pc.flags & FLAG_BETA) != 0u) {
        v += pc.beta * LOAD(OutElems(out_offset(c, index)).v[0]);
    }
    OutElems(out_offset(c, index)).v[0] = STORE(v);
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
    p.a = elem_offset(pc.a, a_entry() * pc.a_batch);
#if CONV == 2
    uint cin_g = pc.K / (pc.conv_kh * pc.conv_kw);
    p.b = elem_offset(pc.b, batch / pc.conv_groups * pc.b_batch
                            + batch % pc.conv_groups * cin_g);
#else
    p.b = elem_offset(pc.b, batch * pc.b_batch);
#endif
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

// Accumulate K steps [k, k + STEPS) (STEPS a multiple of KSTEP). B's values for all STEPS are
// loaded first, then each accumulator takes all STEPS in turn (the same additions in the same
// order as step by step): the host's tiles keep more accumulators than there are registers
// (see LANES_TM in gemm.py), and this order loads and stores each once per iteration instead
// of once per step. Measured on lavapipe 25, one core, float32 1024^3: 28.7 -> 30.9 GFLOP/s
// (947 -> 229 stores in the hottest loop, bench/asm_mix.py); the old 8-row tile 15.8 -> 18.6.
#define LANES_STEP(STEPS)                                                                 \
    {                                                                                     \
        ACC av[RI * STEPS];                                                               \
        [[unroll]] for (uint i = 0u; i < RI; ++i) {                                       \
            LOAD_A_ROW(i, STEPS)                                                          \
        }                                                                                 \
        LOAD_B_K(STEPS)                                                                   \
        ACC bvs[STEPS * NC];                                                              \
        [[unroll]] for (uint kk = 0u; kk < STEPS; ++kk) {                                 \
            ACC bv[NC];                                                                   \
            LOAD_B_N(kk, STEPS)                                                           \
            [[unroll]] for (uint q = 0u; q < NC; ++q) {                                   \
                bvs[kk * NC + q] = bv[q];                                                 \
            }                                                                             \
        }                                                                                 \
        [[unroll]] for (uint r = 0u; r < TM; ++r) {                                       \
            ACC x[STEPS];                                                                 \
            [[unroll]] for (uint kk = 0u; kk < STEPS; ++kk) {                             \
                x[kk] = subgroupBroadcast(av[(r / S) * STEPS + kk], r % S);               \
            }                                                                             \
            [[unroll]] for (uint q = 0u; q < NC; ++q) {                                   \
                ACC sum = acc[r * NC + q];                                                \
                [[unroll]] for (uint kk = 0u; kk < STEPS; ++kk) {                         \
                    sum += x[kk] * bvs[kk * NC + q];                                      \
                }                                                                         \
                acc[r * NC + q] = sum;                                                    \
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
#if CONV
#define B_K_STRIDE 0u  // the convolution's loads walk the kernel taps instead
#elif WIDE_B == 2
#define B_K_STRIDE 1u
#else
#define B_K_STRIDE pc.sbk
#endif

#if CONV == 2
// NHWC: the channel moves fastest, then kx, then ky.
#define CONV_NEXT_TAP                                                                     \
    if (++tap_plane == tap_cin) {                                                         \
        tap_plane = 0u;                                                                   \
        tap_dx += int(pc.conv_dx);                                                        \
        if (++tap_kx == pc.conv_kw) {                                                     \
            tap_kx = 0u;                                                                  \
            tap_dx = 0;                                                                   \
            tap_dy += int(pc.conv_dy);                                                    \
        }                                                                                 \
    }
#else
#define CONV_NEXT_TAP                                                                     \
    tap_dx += int(pc.conv_dx);                                                            \
    if (++tap_kx == pc.conv_kw) {                                                         \
        tap_kx = 0u;                                                                      \
        tap_dx = 0;                                                                       \
        tap_dy += int(pc.conv_dy);                                                        \
        if (++tap_ky == pc.conv_kh) {                                                     \
            tap_ky = 0u;                                                                  \
            tap_dy = 0;                                                                   \
            tap_plane += pc.conv_h * pc.conv_w;                                           \
        }                                                                                 \
    }
#endif
#if CONV
// The implicit GEMM: K is walked tap by tap, (kx, ky, input channel) advanced by increments
// (uniform across the subgroup; no division in the loop), and each lane's columns keep their
// output pixel's top-left input corner (cy0, cx0) from before the loop.
#define LOAD_B_K(STEPS)
#define LOAD_B_N(kk, STEPS)                                                               \
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {                                           \
        bv[j] = conv_b(b, cy0[j] + tap_dy, cx0[j] + tap_dx, tap_plane);                   \
    }                                                                                     \
    CONV_NEXT_TAP
#elif WIDE_B == 2
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
#if CONV
    // Each column's output pixel (past N: the last one's, never stored) and the tap walk.
    int cy0[NJ];
    int cx0[NJ];
    [[unroll]] for (uint j = 0u; j < NJ; ++j) {
        uint col = min(lane_col(n0, lane, j, 0u), pc.N - 1u);
        uint oy = col / pc.conv_ow;
        cy0[j] = int(oy * pc.conv_sy) - pc.conv_pt;
        cx0[j] = int((col - oy * pc.conv_ow) * pc.conv_sx) - pc.conv_pl;
    }
    uint tap_kx = 0u;
    uint tap_ky = 0u;
    int tap_dx = 0;
    int tap_dy = 0;
    uint tap_plane = 0u;  // NCHW: the channel plane's first element; NHWC: the channel
#if CONV == 2
    uint tap_cin = pc.K / (pc.conv_kh * pc.conv_kw);
#endif
#endif
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

#if PATH == PATH_SHARED
// The shared-memory path stages TK-deep slices of op(A) (as [k][m]) and op(B) (as [k][n])
// through shared memory, with zeros outside the matrix: the same address arithmetic as the
// lanes path, and edge tiles need no other care.
#define SH_T ACC
#define BM TM
#define BN TN
#define BK TK
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
#if CONV
        sB[i] = (col < pc.N && k < pc.K) ? SH_T(conv_b_at(base.b, k, col)) : SH_T(0);
#else
        sB[i] = (col < pc.N && k < pc.K) ? SH_T(load_at(base.b, k * pc.sbk + col * pc.sbn))
                                         : SH_T(0);
#endif
    }
}

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
// Cooperative-matrix GEMM (float16 inputs, float32 accumulators) for GPUs with tensor cores.
//
// Every size is a define, literal in the SPIR-V: the validation layer checks matrix types,
// arrays and shared memory without applying specialization, and every loop over fragments
// has constant bounds for the driver to unroll. The host (vkumd/compiler/kernels/gemm.py)
// picks:
//   CM_M, CM_N, CM_K  a float16 x float16 + float32 subgroup shape the driver lists
//                     (each a multiple of 8)
//   BM, BN, BK        the block tile: BM x BN of C per workgroup, K taken BK at a time
//   WG_M, WG_N        subgroups per workgroup: subgroup s owns the warp tile at
//                     (s % WG_M, s / WG_M) of WM x WN = (BM / WG_M) x (BN / WG_N), held in
//                     FM x FN accumulator matrices for the whole K loop
//   SG                the subgroup size the host planned for and pins where the device
//                     lets it: the workgroup is WG_M * WG_N * SG invocations, so there is
//                     one subgroup (gl_SubgroupID) per warp tile
//   A_T, B_T          how slices of op(A) and op(B) sit in shared memory (below)
//   A_VEC, B_VEC      1: the operand is read 16 bytes (8 halves) at a time along its
//                     contiguous dimension, whose length is a multiple of 8 and whose rows
//                     are 16-byte aligned (the host checks); 0: element loads
//   GROUP_M           block rows per group of the launch order (below); 1: plain order
//
// Main loop, per BK slice: each invocation fetches its share of the next slice from global
// memory into registers, the subgroups multiply the current slice out of shared memory, and
// then the fetched words go into the other of two shared buffers. One barrier per slice, and
// the global loads are in flight during the MMAs. Per CM_K step a subgroup loads its FM A
// fragments and FN B fragments once each and issues FM * FN MMAs with them.
//
// Shared memory is one array of 16-byte words, so one declaration serves the float16 slices,
// the 16-byte copies into them and the float32 scratch of the epilogue; cooperative-matrix
// loads and stores count their offsets and strides in those words. A staged slice is ROWS x
// COLS halves, COLS contiguous, each row padded by 8 halves so that the rows one fragment
// load reads start in different banks:
//   A_T = 0: op(A) as [m][k] (A row-major: contiguous along K), fragments loaded row-major
//   A_T = 1: op(A) as [k][m] (A transposed: contiguous along M), loaded column-major
//   B_T = 0: op(B) as [k][n] (contiguous along N), loaded row-major
//   B_T = 1: op(B) as [n][k] (B transposed: contiguous along K), loaded column-major
// Staged words outside the matrix are zero, so edge blocks and the K tail need no other care.
//
// Epilogue: the staging memory becomes per-subgroup scratch of CM_M rows x WN floats. A
// subgroup stores one row of accumulator matrices there, and its lanes read the values back
// and hand each element inside the matrix to finish() (alpha, bias, activation, residual,
// beta, rounding), lanes along columns so that a row's writes are contiguous.
#ifndef GROUP_M
#define GROUP_M 1
#endif
#define WM (BM / WG_M)
#define WN (BN / WG_N)
#define FM (WM / CM_M)
#define FN (WN / CM_N)
#define THREADS (WG_M * WG_N * SG)
#define PAD 8u

#if A_T == 0
#define A_ROWS BM
#define A_COLS BK
#else
#define A_ROWS BK
#define A_COLS BM
#endif
#if B_T == 0
#define B_ROWS BK
#define B_COLS BN
#else
#define B_ROWS BN
#define B_COLS BK
#endif

const uint A_STRIDE = (A_COLS + PAD) / 8u;  // words between staged rows
const uint B_STRIDE = (B_COLS + PAD) / 8u;
const uint A_WORDS = A_ROWS * A_STRIDE;
const uint STAGE_WORDS = A_WORDS + B_ROWS * B_STRIDE;
// Scratch rows are padded by one word: a row of WN floats is often a multiple of the bank
// width, and unpadded every row of a fragment store would start in the same bank.
const uint SCRATCH_STRIDE = WN / 4u + 1u;
const uint SCRATCH_WORDS = CM_M * SCRATCH_STRIDE;
const uint SH_WORDS = max(2u * STAGE_WORDS, WG_M * WG_N * SCRATCH_WORDS);
shared uvec4 sh[SH_WORDS];

// 8-half words in a slice, and how many each invocation copies.
const uint A_VECS = A_ROWS * A_COLS / 8u;
const uint B_VECS = B_ROWS * B_COLS / 8u;
const uint A_LOADS = (A_VECS + THREADS - 1u) / THREADS;
const uint B_LOADS = (B_VECS + THREADS - 1u) / THREADS;

layout(buffer_reference, std430, buffer_reference_align = 16) readonly buffer Words16 {
    uvec4 v[];
};

// Eight consecutive elements of an operand along its contiguous dimension, as float16 bits:
// element c is at (outer, inner + c), where outer walks rows of stride s_outer and inner
// columns of stride s_inner; zero outside outer < outer_n, inner + c < inner_n.
uvec4 fetch(uint64_t base, uint outer, uint inner, uint outer_n, uint inner_n, uint s_outer,
            uint s_inner, bool words) {
    if (words) {
        // inner and inner_n are multiples of 8: the word is inside or outside as a whole.
        uvec4 w = uvec4(0u);
        if (outer < outer_n && inner < inner_n) {
            w = Words16(base + uint64_t(outer * s_outer + inner) * uint64_t(2)).v[0];
        }
        return w;
    }
    uint h[8];
    [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        h[c] = 0u;
        if (outer < outer_n && inner + c < inner_n) {
            h[c] = uint(float16BitsToUint16(load_elem(base, outer * s_outer
                                                              + (inner + c) * s_inner)));
        }
    }
    return uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16),
                 h[6] | (h[7] << 16));
}

#if CONV
// Eight consecutive columns n.. of the implicit GEMM's row k, as float16 bits (zero past the
// matrix).
uvec4 fetch_conv(uint64_t base, uint k, uint n) {
    uint h[8];
    [[unroll]] for (uint c = 0u; c < 8u; ++c) {
        h[c] = 0u;
        if (k < pc.K && n + c < pc.N) {
            h[c] = uint(float16BitsToUint16(float16_t(conv_b_at(base, k, n + c))));
        }
    }
    return uvec4(h[0] | (h[1] << 16), h[2] | (h[3] << 16), h[4] | (h[5] << 16),
                 h[6] | (h[7] << 16));
}
#endif

// This invocation's words of the op(A) slice at k0, into registers.
void fetch_a(Bases base, uint m0, uint k0, uint tid, out uvec4 regs[A_LOADS]) {
    [[unroll]] for (uint i = 0u; i < A_LOADS; ++i) {
        uint v = tid + i * THREADS;
        uint row = v / (A_COLS / 8u);
        uint col = (v % (A_COLS / 8u)) * 8u;
        regs[i] = uvec4(0u);
        if (A_VECS % THREADS == 0u || v < A_VECS) {
#if A_T == 0
            regs[i] = fetch(base.a, m0 + row, k0 + col, pc.M, pc.K, pc.sam, pc.sak, A_VEC != 0);
#else
            regs[i] = fetch(base.a, k0 + row, m0 + col, pc.K, pc.M, pc.sak, pc.sam, A_VEC != 0);
#endif
        }
    }
}

void fetch_b(Bases base, uint n0, uint k0, uint tid, out uvec4 regs[B_LOADS]) {
    [[unroll]] for (uint i = 0u; i < B_LOADS; ++i) {
        uint v = tid + i * THREADS;
        uint row = v / (B_COLS / 8u);
        uint col = (v % (B_COLS / 8u)) * 8u;
        regs[i] = uvec4(0u);
        if (B_VECS % THREADS == 0u || v < B_VECS) {
#if CONV
            regs[i] = fetch_conv(base.b, k0 + row, n0 + col);
#elif B_T == 0
            regs[i] = fetch(base.b, k0 + row, n0 + col, pc.K, pc.N, pc.sbk, pc.sbn, B_VEC != 0);
#else
            regs[i] = fetch(base.b, n0 + row, k0 + col, pc.N, pc.K, pc.sbn, pc.sbk, B_VEC != 0);
#endif
        }
    }
}

// The fetched words into the staging buffer starting at word buf.
void store_slices(uint buf, uint tid, uvec4 ra[A_LOADS], uvec4 rb[B_LOADS]) {
    [[unroll]] for (uint i = 0u; i < A_LOADS; ++i) {
        uint v = tid + i * THREADS;
        if (A_VECS % THREADS == 0u || v < A_VECS) {
            sh[buf + (v / (A_COLS / 8u)) * A_STRIDE + v % (A_COLS / 8u)] = ra[i];
        }
    }
    [[unroll]] for (uint i = 0u; i < B_LOADS; ++i) {
        uint v = tid + i * THREADS;
        if (B_VECS % THREADS == 0u || v < B_VECS) {
            sh[buf + A_WORDS + (v / (B_COLS / 8u)) * B_STRIDE + v % (B_COLS / 8u)] = rb[i];
        }
    }
}

// The block this workgroup computes. With GROUP_M > 1, consecutive workgroups (in launch
// order, x fastest) walk GROUP_M block rows before moving one block column on, so the
// workgroups resident together share a few panels of A and B in the L2 cache instead of
// sweeping all of A for every column of blocks.
uvec2 block_coords() {
    if (GROUP_M <= 1) {
        return gl_WorkGroupID.xy;
    }
    uint tiles_m = gl_NumWorkGroups.x;
    uint tiles_n = gl_NumWorkGroups.y;
    uint id = gl_WorkGroupID.y * tiles_m + gl_WorkGroupID.x;
    uint per_group = uint(GROUP_M) * tiles_n;
    uint first = (id / per_group) * uint(GROUP_M);
    uint rows = min(tiles_m - first, uint(GROUP_M));
    uint in_group = id % per_group;
    return uvec2(first + in_group % rows, in_group / rows);
}

void main() {
    uint tid = gl_LocalInvocationID.x;
    uint sg = gl_SubgroupID;
    uint wm = sg % WG_M;
    uint wn = sg / WG_M;
    uvec2 block = block_coords();
    uint m0 = block.x * BM;
    uint n0 = block.y * BN;
    Bases base = batch_bases();

    COOPMAT_ACC(CM_M, CM_N) acc[FM * FN];
    [[unroll]] for (uint f = 0u; f < FM * FN; ++f) {
        acc[f] = COOPMAT_ACC(CM_M, CM_N)(0.0);
    }

    uint slices = (pc.K + BK - 1u) / BK;
    uvec4 ra[A_LOADS];
    uvec4 rb[B_LOADS];
    if (slices > 0u) {
        fetch_a(base, m0, 0u, tid, ra);
        fetch_b(base, n0, 0u, tid, rb);
        store_slices(0u, tid, ra, rb);
    }
    barrier();
    for (uint s = 0u; s < slices; ++s) {
        uint cur = (s & 1u) * STAGE_WORDS;
        bool more = s + 1u < slices;
        if (more) {
            // Issued before the MMAs, consumed after them: the loads overlap the math.
            fetch_a(base, m0, (s + 1u) * BK, tid, ra);
            fetch_b(base, n0, (s + 1u) * BK, tid, rb);
        }
        [[unroll]] for (uint kk = 0u; kk < BK; kk += CM_K) {
            COOPMAT_A(CM_M, CM_K) fa[FM];
            [[unroll]] for (uint i = 0u; i < FM; ++i) {
                uint m = wm * WM + i * CM_M;
#if A_T == 0
                coopMatLoad(fa[i], sh, cur + m * A_STRIDE + kk / 8u, A_STRIDE,
                            gl_CooperativeMatrixLayoutRowMajor);
#else
                coopMatLoad(fa[i], sh, cur + kk * A_STRIDE + m / 8u, A_STRIDE,
                            gl_CooperativeMatrixLayoutColumnMajor);
#endif
            }
            // One B fragment live at a time, each used by all FM A fragments.
            [[unroll]] for (uint j = 0u; j < FN; ++j) {
                uint n = wn * WN + j * CM_N;
                COOPMAT_B(CM_K, CM_N) fb;
#if B_T == 0
                coopMatLoad(fb, sh, cur + A_WORDS + kk * B_STRIDE + n / 8u, B_STRIDE,
                            gl_CooperativeMatrixLayoutRowMajor);
#else
                coopMatLoad(fb, sh, cur + A_WORDS + n * B_STRIDE + kk / 8u, B_STRIDE,
                            gl_CooperativeMatrixLayoutColumnMajor);
#endif
                [[unroll]] for (uint i = 0u; i < FM; ++i) {
                    acc[i * FN + j] = coopMatMulAdd(fa[i], fb, acc[i * FN + j]);
                }
            }
        }
        if (more) {
            store_slices(((s + 1u) & 1u) * STAGE_WORDS, tid, ra, rb);
        }
        // Publishes the next slice and retires this one: its buffer is refilled next time.
        barrier();
    }

    // The barrier that ended the loop (or preceded it) leaves no reader of the staging
    // buffers, which now hold each subgroup's scratch.
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    uint scratch = sg * SCRATCH_WORDS;
    uint col0 = n0 + wn * WN;
    // Every subgroup runs the same stores and barriers, also where its warp tile lies past
    // the matrix: lavapipe 26 miscomputed when only some subgroups of a workgroup reached a
    // subgroupBarrier (subgroup-uniform control flow, which the spec allows).
    [[unroll]] for (uint i = 0u; i < FM; ++i) {
        uint row0 = m0 + wm * WM + i * CM_M;
        [[unroll]] for (uint j = 0u; j < FN; ++j) {
            coopMatStore(acc[i * FN + j], sh, scratch + j * (CM_N / 4u), SCRATCH_STRIDE,
                         gl_CooperativeMatrixLayoutRowMajor);
        }
        subgroupBarrier();
        if (row0 < pc.M && col0 < pc.N) {
            for (uint e = lane; e < CM_M * WN; e += lanes) {
                uint r = e / WN;
                uint c = e % WN;
                if (row0 + r < pc.M && col0 + c < pc.N) {
                    float v = uintBitsToFloat(sh[scratch + r * SCRATCH_STRIDE + c / 4u][c % 4u]);
                    finish(base.c, base.residual, row0 + r, col0 + c, v);
                }
            }
        }
        subgroupBarrier();  // read before the next row of matrices overwrites it
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
        v = load_elem(src, k * pc.sbk + col * pc.sbn);
    }
    PackedElems(elem_offset(dst, index)).v[0] = v;
}
#endif
