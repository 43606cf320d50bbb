#version 450
// Quantized matrix-vector product for decode: y[m, n] = sum_k x[m, k] * dequant(w)[n, k]
// (+ bias[n]) (+ residual[m, n]), for a few rows m of x (M up to MT per workgroup row).
//
// w holds each output row n as K/32 blocks of 32 values (QTYPE, the GGUF formats):
//   Q8_0: f16 d, 32 int8 q                       x = d * q           (34 bytes)
//   Q4_0: f16 d, 16 bytes of nibbles             x = d * (nib - 8)   (18 bytes)
//   Q4_1: f16 d, f16 m, 16 bytes of nibbles      x = d * nib + m     (20 bytes)
// where nibble byte j holds value j (low nibble) and value j + 16 (high nibble).
//
// A workgroup is one subgroup and owns pc.rows consecutive output rows (many on lavapipe,
// which pays per workgroup). Its lanes split a row's blocks
// (lane l takes blocks l, l + S, ...) and each lane keeps MT accumulators, one per row of x,
// so each weight block is dequantised once per MT rows and read from memory once per
// dispatch; a subgroup sum finishes each output. MT stays at 1 or 2: at 4 lavapipe spilled
// (4.9x one row's time against 2.1x at 2) and its compile time grew steeply.
// A block is dequantised in registers four values at a time from 32-bit words and folded
// per block: sum d * (nib - 8) * x = d * (dot(nib, x) - 8 * sum(x)), and likewise
// d * dot(nib, x) + m * sum(x) for Q4_1, so the per-value work is one multiply-add.
// Q4_1's 20-byte blocks keep 32-bit alignment and are read as 32-bit words; Q4_0's and
// Q8_0's are only 16-bit aligned and are read as the 32-bit words inside the block plus one
// 16-bit half (payload()), a word's bytes shifted into place when they straddle. XVEC 4 reads x four values a
// load (K a multiple of 4). The last block of a row may be partial (K not a multiple of 32):
// its x values past K load as zero, so whatever the block holds there adds nothing.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#include "elementwise_types.glsl"

#define Q8_0 1
#define Q4_0 2
#define Q4_1 3

#ifndef QTYPE
#define QTYPE Q4_1
#endif
#ifndef DTYPE
#define DTYPE F32
#endif
#ifndef XVEC
#define XVEC 1
#endif
#ifndef MT
#define MT 1
#endif
#ifndef XCACHE
#define XCACHE 0
#endif

layout(local_size_x_id = 0) in;

#if DTYPE == F32
#define ELEM float
#define ELEM4 vec4
#define STORE(v) (v)
#else
#define ELEM float16_t
#define ELEM4 f16vec4
#define STORE(v) float16_t(v)
#endif
#if XVEC == 4
#define XUNIT ELEM4
#else
#define XUNIT ELEM
#endif

#if QTYPE == Q4_1
#define WUNIT uint
#else
#define WUNIT uint16_t
#endif

layout(std430, binding = 0) readonly buffer X { XUNIT xs[]; };
layout(std430, binding = 1) readonly buffer W { WUNIT ws[]; };
#if QTYPE != Q4_1
// The same blocks as 32-bit words: a block's payload is read a word a load (half the loads
// of 16-bit reads; lavapipe turns each load into a per-lane loop, so the count is the cost).
layout(std430, binding = 1) readonly buffer W32 { uint ww[]; };
#endif
layout(std430, binding = 2) writeonly buffer Y { ELEM ys[]; };
layout(std430, binding = 3) readonly buffer Bias { ELEM bias[]; };
layout(std430, binding = 4) readonly buffer Residual { ELEM residual[]; };

layout(push_constant) uniform Problem {
    uint m;           // rows of x
    uint n;           // output features
    uint k;           // input features
    uint full;        // blocks per row wholly inside K
    uint blocks;      // blocks per row (full, or full + 1 with a partial last block)
    uint row_units;   // WUNITs per weight row
    uint flags;       // 1: bias, 2: residual
    uint rows;        // output rows per workgroup
} pc;

// The four x values k .. k + 3 of row `row` (k a multiple of 4, k + 3 < K).
vec4 x4(uint row, uint k) {
#if XVEC == 4
    return vec4(xs[(row * pc.k + k) >> 2]);
#else
    uint base = row * pc.k + k;
    return vec4(float(xs[base]), float(xs[base + 1u]), float(xs[base + 2u]),
                float(xs[base + 3u]));
#endif
}

// x[row, k], k < K, one value at a time (the partial last block).
float x1(uint row, uint k) {
#if XVEC == 4
    return float(xs[(row * pc.k + k) >> 2][k & 3u]);
#else
    return float(xs[row * pc.k + k]);
#endif
}

#if XCACHE > 0
// The lane's x values, loaded once per MT rows and reused for every output row: lane l
// takes blocks l + S * j, so its j-th block's values sit at xc[r][8 * j ..]. lavapipe keeps
// a private array as one vector per element, and the index j is the same on every lane, so
// a read here is a plain vector load where a read of xs is a per-lane gather (measured the
// larger part of the loads per block).
vec4 xc[MT][XCACHE * 8];
#define XAT(r, row, j, k) xc[r][(j) * 8u + ((k) & 31u) / 4u]
#else
#define XAT(r, row, j, k) x4(row, k)
#endif

// 32-bit word `i` of the block payload after the block's header, the block at unit `at`.
#if QTYPE == Q4_1
#define HEADER_UNITS 1
uint word(uint at, uint i) { return ws[at + HEADER_UNITS + i]; }
#else
#define HEADER_UNITS 1
uint word(uint at, uint i) {
    return uint(ws[at + HEADER_UNITS + 2 * i]) | (uint(ws[at + HEADER_UNITS + 2 * i + 1]) << 16);
}
#endif

#if QTYPE != Q4_1
// The NQ payload words of the 16-bit-aligned block at half `at`, and its scale d, in NQ
// 32-bit loads and one 16-bit load, every load inside the block: the words from half
// 2 * ((at + 1) / 2) on cover the block's halves but one, its last (block word-aligned:
// then the payload straddles words) or its first, d (block not word-aligned: then the
// payload words are whole).
#if QTYPE == Q8_0
#define NQ 8
#else
#define NQ 4
#endif
float payload(uint at, out uint q[NQ]) {
    bool odd = (at & 1u) != 0u;
    uint w0 = (at + 1u) >> 1;
    uint w[NQ + 1];
    [[unroll]] for (uint i = 0; i < NQ; ++i) {
        w[i] = ww[w0 + i];
    }
    w[NQ] = uint(ws[odd ? at : at + 2u * NQ]);
    [[unroll]] for (uint i = 0; i < NQ; ++i) {
        q[i] = odd ? w[i] : (w[i] >> 16) | (w[i + 1u] << 16);
    }
    return unpackHalf2x16(odd ? w[NQ] : w[0] & 0xFFFFu).x;
}
#endif

vec4 low_nibbles(uint w) {
    return vec4(w & 0xFu, (w >> 8) & 0xFu, (w >> 16) & 0xFu, (w >> 24) & 0xFu);
}

vec4 signed_bytes(uint w) {
    int s = int(w);
    return vec4(bitfieldExtract(s, 0, 8), bitfieldExtract(s, 8, 8), bitfieldExtract(s, 16, 8),
                bitfieldExtract(s, 24, 8));
}

// Adds block `b` of the weight row starting at unit `row_at` into acc, for rows m0.. of x.
void block(uint row_at, uint b, uint j, uint m0, inout float acc[MT]) {
#if QTYPE == Q4_1
    uint at = row_at + b * 5u;
    vec2 dm = unpackHalf2x16(ws[at]);
    float d = dm.x;
    float mn = dm.y;
#elif QTYPE == Q4_0
    uint qw[NQ];
    float d = payload(row_at + b * 9u, qw);
#else
    uint qw[NQ];
    float d = payload(row_at + b * 17u, qw);
#endif
    uint k0 = b * 32u;
#if QTYPE == Q8_0
    vec4 q[8];
    [[unroll]] for (uint i = 0; i < 8; ++i) {
        q[i] = signed_bytes(qw[i]);
    }
    [[unroll]] for (uint r = 0; r < MT; ++r) {
        uint row = min(m0 + r, pc.m - 1u);  // rows past M read row M-1; never stored
        float s = 0.0;
        [[unroll]] for (uint i = 0; i < 8; ++i) {
            s += dot(q[i], XAT(r, row, j, k0 + 4u * i));
        }
        acc[r] += d * s;
    }
#else
    vec4 lo[4];
    vec4 hi[4];
    [[unroll]] for (uint i = 0; i < 4; ++i) {
#if QTYPE == Q4_1
        uint w = word(at, i);
#else
        uint w = qw[i];
#endif
        lo[i] = low_nibbles(w);
        hi[i] = low_nibbles(w >> 4);
    }
    [[unroll]] for (uint r = 0; r < MT; ++r) {
        uint row = min(m0 + r, pc.m - 1u);
        float s = 0.0;
        vec4 sx = vec4(0.0);
        [[unroll]] for (uint i = 0; i < 4; ++i) {
            vec4 a = XAT(r, row, j, k0 + 4u * i);
            vec4 c = XAT(r, row, j, k0 + 16u + 4u * i);
            s += dot(lo[i], a) + dot(hi[i], c);
            sx += a + c;
        }
        float total = sx.x + sx.y + sx.z + sx.w;
#if QTYPE == Q4_1
        acc[r] += d * s + mn * total;
#else
        acc[r] += d * (s - 8.0 * total);
#endif
    }
#endif
}

// The partial last block, value by value (rare: K not a multiple of 32): values past K
// are never read, whatever the block holds there.
float tail_dot(uint row_at, uint b, uint row) {
#if QTYPE == Q4_1
    uint at = row_at + b * 5u;
    vec2 dm = unpackHalf2x16(ws[at]);
#elif QTYPE == Q4_0
    uint at = row_at + b * 9u;
    vec2 dm = vec2(unpackHalf2x16(uint(ws[at])).x, 0.0);
    dm.y = -8.0 * dm.x;
#else
    uint at = row_at + b * 17u;
    vec2 dm = vec2(unpackHalf2x16(uint(ws[at])).x, 0.0);
#endif
    float s = 0.0;
    for (uint k = b * 32u; k < pc.k; ++k) {
        uint j = k - b * 32u;
#if QTYPE == Q8_0
        uint byte_ = (word(at, j >> 2) >> (8u * (j & 3u))) & 0xFFu;
        float q = float(bitfieldExtract(int(byte_), 0, 8));
#else
        uint jj = j & 15u;
        uint byte_ = (word(at, jj >> 2) >> (8u * (jj & 3u))) & 0xFFu;
        float q = float(j < 16u ? byte_ & 0xFu : byte_ >> 4);
#endif
        s += (dm.x * q + dm.y) * x1(row, k);
    }
    return s;
}

void main() {
    uint lane = gl_SubgroupInvocationID;
    uint lanes = gl_SubgroupSize;
    uint first = (gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x) * pc.rows;
    // MT rows of x at a time: a second pass over a weight row's blocks finds them in the
    // cache, so the weights still come from memory once.
    for (uint m0 = 0; m0 < pc.m; m0 += MT) {
#if XCACHE > 0
        [[unroll]] for (uint r = 0; r < MT; ++r) {
            uint row = min(m0 + r, pc.m - 1u);  // rows past M read row M-1; never stored
            for (uint j = 0; j < XCACHE; ++j) {
                uint b = min(lane + j * lanes, max(pc.full, 1u) - 1u);  // stays inside K
                for (uint i = 0; i < 8; ++i) {
                    xc[r][j * 8u + i] = pc.full > 0 ? x4(row, b * 32u + 4u * i) : vec4(0.0);
                }
            }
        }
#endif
        for (uint t = 0; t < pc.rows; ++t) {
            uint n = first + t;
            if (n >= pc.n) {
                break;
            }
            uint row_at = n * pc.row_units;
            float acc[MT];
            [[unroll]] for (uint r = 0; r < MT; ++r) {
                acc[r] = 0.0;
            }
#if XCACHE > 0
            // A loop counter the same on every lane, so xc's index is uniform (a divergent
            // one made each read a per-lane gather).
            for (uint j = 0; j < XCACHE; ++j) {
                uint b = lane + j * lanes;
                if (b < pc.full) {
                    block(row_at, b, j, m0, acc);
                }
            }
#else
            for (uint b = lane; b < pc.full; b += lanes) {
                block(row_at, b, 0u, m0, acc);
            }
#endif
            if (pc.full < pc.blocks && lane == pc.full % lanes) {
                [[unroll]] for (uint r = 0; r < MT; ++r) {
                    acc[r] += tail_dot(row_at, pc.full, min(m0 + r, pc.m - 1u));
                }
            }
            [[unroll]] for (uint r = 0; r < MT; ++r) {
                float total = subgroupAdd(acc[r]);
                uint row = m0 + r;
                if (lane == 0 && row < pc.m) {
                    if ((pc.flags & 1u) != 0) {
                        total += float(bias[n]);
                    }
                    uint at = row * pc.n + n;
                    if ((pc.flags & 2u) != 0) {
                        total += float(residual[at]);
                    }
                    ys[at] = STORE(total);
                }
            }
        }
    }
}
