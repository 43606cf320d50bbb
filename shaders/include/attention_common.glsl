// Shared by the attention kernels (attention_tiled.comp, attention_coopmat.comp): the push-
// constant block, the element-type macros and the masking rules, so every variant computes
// the same function.
//
// Rows: queries are processed per key/value head. For kv head `kvh` the "rows" are the
// (query head, query index) pairs of the kv head's group, head-major:
//   row r -> query head h = kvh * group + r / Lq, query index i = r % Lq.
// So grouped-query heads that share K and V read them once.
//
// Masking of score (i, j) for batch b and query head h, in this order:
//   j >= key_end            -> masked (key_end folds key_lengths[b], the split's end, Lk)
//   causal and j > i + causal_offset (= Lk - Lq: bottom-right alignment) -> masked
//   additive mask           -> score += mask[b * sb + h * sh + i * si + j * sj]
// Addressing: row (b, head, i) of a tensor starts at element b * sb + head * sh + i * ss with
// that tensor's strides (push constants: q_*, kv_* shared by K and V, o_*); its head_dim
// elements follow contiguously. The host sets [b, h, s, d] or [b, s, h, d] strides.
//
// Scores are kept in log2 units (scaled by scale * log2(e)) so that exp2 does the softmax.
// A row whose every key is masked has no maximum; it outputs zeros.
//
// The including kernel enables GL_EXT_shader_explicit_arithmetic_types and
// GL_EXT_shader_16bit_storage first and defines DTYPE as F32 or F16.
// ADDRESSES = 1 reads K and V through buffer_reference pointers (pc.k_addr, pc.v_addr), which
// lavapipe compiles to plain loads instead of a bounds-checked loop per lane; the buffers stay
// bound so that the hazard tracker sees them.
#pragma once

#define F32 1
#define F16 2

#ifndef DTYPE
#define DTYPE F32
#endif

#if DTYPE == F32
#define ELEM float
#define ELEM4 vec4
#elif DTYPE == F16
#define ELEM float16_t
#define ELEM4 f16vec4
#else
#error "DTYPE must be F32 or F16"
#endif

#define ATTN_CAUSAL 1u
#define ATTN_KEY_LENGTHS 2u
#define ATTN_MASK 4u

const float ATTN_LOG2E = 1.4426950408889634;

// attention_combine.comp has its own push constants and defines ATTN_NO_PARAMS.
#ifndef ATTN_NO_PARAMS
layout(push_constant) uniform AttentionParams {
    uvec2 k_addr;      // device addresses of K and V (read through them when ADDRESSES = 1)
    uvec2 v_addr;
    uint B;            // batch
    uint Hq;           // query heads
    uint Hkv;          // key/value heads (divides Hq)
    uint Lq;           // query length
    uint Lk;           // key length
    uint group;        // Hq / Hkv
    uint rows;         // group * Lq: rows per key/value head
    float scale_log2;  // softmax scale * log2(e)
    int causal_offset; // Lk - Lq
    uint flags;        // ATTN_CAUSAL | ATTN_KEY_LENGTHS | ATTN_MASK
    uint mask_sb;      // additive-mask element strides (0 where broadcast)
    uint mask_sh;
    uint mask_si;
    uint mask_sj;
    uint splits;       // key splits (flash-decoding); 1 otherwise
    uint split_keys;   // keys per split
    // Element strides over (batch, head, seq) of q, of k and v (which share a shape and a
    // layout) and of out; head_dim is contiguous. [b, h, s, d] and [b, s, h, d] are two
    // settings of the same kernel (attn_q_row and the others below). The mask keeps its own
    // strides above.
    uint q_sb;
    uint q_sh;
    uint q_ss;
    uint kv_sb;
    uint kv_sh;
    uint kv_ss;
    uint o_sb;
    uint o_sh;
    uint o_ss;
} pc;
#endif

#ifndef ATTN_NO_PARAMS
// First element of row (b, head, i) of q and of out; of key/value head kvh's rows of k and v.
uint attn_q_row(uint b, uint head, uint i) {
    return b * pc.q_sb + head * pc.q_sh + i * pc.q_ss;
}
uint attn_o_row(uint b, uint head, uint i) {
    return b * pc.o_sb + head * pc.o_sh + i * pc.o_ss;
}
uint attn_kv_head(uint b, uint kvh) {
    return b * pc.kv_sb + kvh * pc.kv_sh;
}
#endif

float attn_neg_inf() {
    return uintBitsToFloat(0xFF800000u);
}
