#version 450
// out = a OP b with numpy broadcasting: strides of 0 repeat a dimension.
// One pipeline serves every shape (shape and strides are push constants); OP is a
// specialization constant so each operator gets its own straight-line code.
// DTYPE (F32, F16, BF16, I32, I8, U8, I16, U16, U32, U64, F64; see elementwise_types.glsl)
// picks the element type. Floats are computed in float32 and rounded once to the storage
// type, float64 in double; integers wrap.
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#include "common.glsl"
#include "elementwise_types.glsl"
#include "activation.glsl"
#include "int64_emulated.glsl"

#ifndef DTYPE
#define DTYPE F32
#endif

#if DTYPE == F32
#define ELEM float
#define ELEM4 vec4
#define VALUE float
#define VALUE4 vec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#elif DTYPE == F16
#define ELEM float16_t
#define ELEM4 f16vec4
#define VALUE float
#define VALUE4 vec4
#define LOAD(x) float(x)
#define LOAD4(v) vec4(v)
#define STORE(v) float16_t(v)
#elif DTYPE == BF16
#define ELEM uint16_t
#define ELEM4 u16vec4
#define VALUE float
#define VALUE4 vec4
#define LOAD(x) bf16_to_float(uint(x))
#define LOAD4(v) bf16_to_float4(uvec4(v))
#define STORE(v) uint16_t(float_to_bf16(v))
#elif DTYPE == I32
#define ELEM int
#define ELEM4 ivec4
#define VALUE int
#define VALUE4 ivec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#elif DTYPE == I8 || DTYPE == U8
// 8-bit integers compute in int (exact: products of two fit) and wrap to 8 bits on the
// store, as numpy's int8 and uint8 arithmetic does.
#if DTYPE == I8
#define ELEM int8_t
#define ELEM4 i8vec4
#else
#define ELEM uint8_t
#define ELEM4 u8vec4
#endif
#define VALUE int
#define VALUE4 ivec4
#define LOAD(x) int(x)
#define LOAD4(v) ivec4(v)
#define STORE(v) ELEM(v)
#elif DTYPE == I16 || DTYPE == U16
// 16-bit integers as the 8-bit ones: computed in int, wrapped to 16 bits on the store.
#if DTYPE == I16
#define ELEM int16_t
#define ELEM4 i16vec4
#else
#define ELEM uint16_t
#define ELEM4 u16vec4
#endif
#define VALUE int
#define VALUE4 ivec4
#define LOAD(x) int(x)
#define LOAD4(v) ivec4(v)
#define STORE(v) ELEM(v)
#elif DTYPE == U32
#define ELEM uint
#define ELEM4 uvec4
#define VALUE uint
#define VALUE4 uvec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#elif DTYPE == U64
#define ELEM uint64_t
#define ELEM4 u64vec4
#define VALUE uint64_t
#define VALUE4 u64vec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#elif DTYPE == I64 && defined(EMU64) && EMU64 == 1
// int64 without shaderInt64: two 32-bit words (int64_emulated.glsl); scalar only (VEC 1),
// a subset of the ops (INT64_EMULATED_OPS in elementwise.py).
#define ELEM uvec2
#define ELEM4 uvec4
#define VALUE uvec2
#define VALUE4 uvec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#define I64_WORDS 1
#elif DTYPE == I64
// int64 with shaderInt64: int64_t, wrapping.
#define ELEM int64_t
#define ELEM4 i64vec4
#define VALUE int64_t
#define VALUE4 i64vec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#elif DTYPE == F64
// float64 computed in double (shaderFloat64), never through float32.
#define ELEM double
#define ELEM4 dvec4
#define VALUE double
#define VALUE4 dvec4
#define LOAD(x) (x)
#define LOAD4(v) (v)
#define STORE(v) (v)
#else
#error "DTYPE must be F32, F16, BF16, I32, I8, U8, I16, U16, U32, U64, I64 or F64"
#endif
#ifndef I64_WORDS
#define I64_WORDS 0
#endif
#if DTYPE == I32 || DTYPE == I8 || DTYPE == U8 || DTYPE == I16 || DTYPE == U16
#define INTEGER 1
#else
#define INTEGER 0
#endif
// Unsigned integers computed as unsigned (uint32 in uint, uint64 in uint64_t): their own
// division, remainder, power and logical shifts below.
#if DTYPE == U32 || DTYPE == U64
#define UNSIGNED 1
#else
#define UNSIGNED 0
#endif
#if DTYPE == U64
#define VALUE_BITS 64u
#else
#define VALUE_BITS 32u
#endif
#if DTYPE == F64
// NaN and infinity read from the bits (unpackDouble2x32 needs no Int64): a driver may assume
// floats are never NaN and fold isnan() and x != x away (see extremum.py).
bool nan64(double x) {
    uvec2 w = unpackDouble2x32(x);
    uint high = w.y & 0x7FFFFFFFu;
    return high > 0x7FF00000u || (high == 0x7FF00000u && w.x != 0u);
}

bool inf64(double x) {
    uvec2 w = unpackDouble2x32(x);
    return (w.y & 0x7FFFFFFFu) == 0x7FF00000u && w.x == 0u;
}

double nan_double() {
    return packDouble2x32(uvec2(0u, 0x7FF80000u));
}
#endif

// OUT U8 (comparisons only): the 1/0 result stored as uint8, a graph's bool mask; any other
// OUT is DTYPE's own storage.
#if defined(OUT) && OUT == U8 && I64_WORDS
#define ELEM_OUT uint8_t
#define ELEM_OUT4 u8vec4
#define STORE_OUT(v) uint8_t(v.x)
#elif defined(OUT) && OUT == U8
#define ELEM_OUT uint8_t
#define ELEM_OUT4 u8vec4
#define STORE_OUT(v) uint8_t(uint(v))
#else
#define ELEM_OUT ELEM
#define ELEM_OUT4 ELEM4
#define STORE_OUT(v) STORE(v)
#endif

layout(local_size_x_id = 0) in;
// 0 add, 1 sub, 2 mul, 3 divide, 4 divide rounding down, 5 divide rounding toward zero.
// Integer division by zero gives 0 (as numpy's floor_divide); INT_MIN / -1 gives INT_MIN.
// 6 <, 7 <=, 8 >, 9 >=, 10 ==, 11 !=: 1 where true and 0 where false, in the operands' type
// (there is no bool storage type; a 0/1 mask of the same type multiplies straight into
// arithmetic). Comparisons with NaN are false except != (IEEE, as numpy). 16-bit floats
// compare exactly: their float32 widening is exact.
// 12 the floored remainder (y's sign), 13 the truncated one (C's fmod, x's sign): floats as
// activation.glsl's vkumd_mod and vkumd_fmod; integers exactly, 0 for a zero divisor.
// 15 max, 16 min (integers; floats take the generated kernels, which keep NaN).
// 17 and, 18 or, 19 xor, 20 x << y, 21 x >> y (integers only; >> is arithmetic, a count
// outside [0, 32) gives 0, or -1 shifting a negative x right).
// 14 x^y: floats as vkumd_pow; integers by squaring, wrapping, a negative y giving 0 but for
// a base of 1 or -1 (1 / x^-y truncated).
layout(constant_id = 1) const uint OP = 0u;
// VEC 4: each invocation computes four consecutive output elements, loading four of a and of
// b with one vector load each (lavapipe turns every per-lane load into a gather, so this
// halves an add's time); the planner (elementwise_vector.py) picks it only for ndim 0, ndim 1
// with strides 0 or 1, and ndim 2 with rows a multiple of 4 and vector-aligned row strides.
// BCAST (with VEC 4): bit 0 a, bit 1 b is one element per row (stride 0 along the last
// dimension), loaded once for all four. Each component goes through the same apply() as the
// scalar path, so both give the same bits.
layout(constant_id = 2) const uint VEC = 1u;
layout(constant_id = 3) const uint BCAST = 0u;

layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer Out { ELEM_OUT result[]; };
// The same bindings as arrays of 4-vectors (aliases), for VEC 4.
layout(std430, binding = 0) readonly buffer A4 { ELEM4 a4[]; };
layout(std430, binding = 1) readonly buffer B4 { ELEM4 b4[]; };
layout(std430, binding = 2) writeonly buffer Out4 { ELEM_OUT4 result4[]; };

layout(push_constant) uniform Shape {
    uint n;          // elements of the output
    uint ndim;       // dimensions used (<= 6), innermost last; 0: operands all contiguous
    uint shape[6];   // output shape
    uint a_stride[6];  // two's complement: a view's negative step wraps back
    uint b_stride[6];
    uint a_offset;     // a view read in place: its first element in the bound allocation
    uint b_offset;
} pc;

VALUE divide(VALUE x, VALUE y) {
#if UNSIGNED
    // Rounding down and toward zero agree; a zero divisor gives 0 (numpy's floor_divide).
    return y == VALUE(0) ? VALUE(0) : x / y;
#elif DTYPE == I64 && !I64_WORDS
    // As the 32-bit integers below, in int64_t.
    if (y == int64_t(0)) {
        return int64_t(0);
    }
    if (y == int64_t(-1)) {
        return int64_t(uint64_t(0) - uint64_t(x));  // wraps INT64_MIN to itself
    }
    int64_t q = x / y;
    if (OP == 4u && q * y != x && ((x < int64_t(0)) != (y < int64_t(0)))) {
        q -= int64_t(1);
    }
    return q;
#elif I64_WORDS
    return x;  // not a variant: the emulated int64 does not divide
#elif INTEGER
    if (y == 0) {
        return 0;
    }
    if (y == -1) {
        return int(0u - uint(x));  // wraps INT_MIN to itself instead of overflowing
    }
    int q = x / y;  // truncates toward zero
    if (OP == 4u && q * y != x && ((x < 0) != (y < 0))) {
        q -= 1;
    }
    return q;
#else
    VALUE q = x / y;
    if (OP == 4u) {
        q = floor(q);
    } else if (OP == 5u) {
        q = trunc(q);
    }
    return q;
#endif
}

VALUE remainder(VALUE x, VALUE y) {
#if UNSIGNED
    return y == VALUE(0) ? VALUE(0) : x % y;
#elif DTYPE == I64 && !I64_WORDS
    if (y == int64_t(0) || y == int64_t(-1)) {
        return int64_t(0);
    }
    int64_t r = x - (x / y) * y;
    if (OP == 12u && r != int64_t(0) && ((r < int64_t(0)) != (y < int64_t(0)))) {
        r += y;
    }
    return r;
#elif I64_WORDS
    return x;  // not a variant
#elif DTYPE == F64
    // double has no vkumd_mod. The truncated remainder exactly, as C's fmod: subtract |y|
    // scaled by powers of two from |x| (each step d <= r < 2d, so r - d is exact), at most
    // one step per binary order between them. NaN for an infinite x or a zero y; an infinite
    // y leaves x. Floored: then + y where the signs differ (numpy's divmod does the same).
    if (y == 0.0 || inf64(x) || nan64(x) || nan64(y)) {
        return nan_double();
    }
    double r = abs(x);
    double ay = abs(y);
    if (!inf64(y)) {
        int ey;
        frexp(ay, ey);
        while (r >= ay) {
            int er;
            frexp(r, er);
            double d = ldexp(ay, er - ey);
            if (d > r) {
                d *= 0.5;
            }
            r -= d;
        }
    }
    r = x < 0.0 ? -r : r;
    if (OP == 12u && r != 0.0 && ((r < 0.0) != (y < 0.0))) {
        r = inf64(y) ? y : r + y;
    }
    return r;
#elif INTEGER
    if (y == 0 || y == -1) {
        return 0;  // -1 too: INT_MIN % -1 would overflow
    }
    int r = x - (x / y) * y;  // x / y truncates toward zero
    if (OP == 12u && r != 0 && ((r < 0) != (y < 0))) {
        r += y;
    }
    return r;
#else
    return OP == 12u ? vkumd_mod(x, y) : vkumd_fmod(x, y);
#endif
}

VALUE power(VALUE x, VALUE y) {
#if UNSIGNED
    VALUE r = VALUE(1);
    VALUE base = x;
    VALUE e = y;
    while (e != VALUE(0)) {
        if ((e & VALUE(1)) != VALUE(0)) {
            r *= base;
        }
        base *= base;
        e >>= 1;
    }
    return r;
#elif DTYPE == I64 && !I64_WORDS
    if (y < int64_t(0)) {
        return x == int64_t(1) ? x : (x == int64_t(-1) ? ((y & int64_t(1)) != int64_t(0) ? x
                                                          : int64_t(1)) : int64_t(0));
    }
    int64_t r = int64_t(1);
    int64_t base = x;
    uint64_t e = uint64_t(y);
    while (e != uint64_t(0)) {
        if ((e & uint64_t(1)) != uint64_t(0)) {
            r *= base;
        }
        base *= base;
        e >>= 1;
    }
    return r;
#elif I64_WORDS
    return x;  // not a variant
#elif DTYPE == F64
    return x;  // not a variant: double has no pow() (see elementwise.py)
#elif INTEGER
    if (y < 0) {
        return x == 1 ? 1 : (x == -1 ? ((y & 1) != 0 ? -1 : 1) : 0);
    }
    int r = 1;
    int base = x;
    uint e = uint(y);
    while (e != 0u) {
        if ((e & 1u) != 0u) {
            r *= base;
        }
        base *= base;
        e >>= 1;
    }
    return r;
#else
    return vkumd_pow(x, y);
#endif
}

VALUE truth(bool c) {
    return c ? VALUE(1) : VALUE(0);
}

#if I64_WORDS
// The emulated int64's ops (INT64_EMULATED_OPS): the same results as int64_t's below.
uvec2 i64_truth(bool c) {
    return uvec2(c ? 1u : 0u, 0u);
}

VALUE apply(VALUE x, VALUE y) {
    bool past = i64_negative(y) || y.y != 0u || y.x >= 64u;
    switch (OP) {
    case 0u: return i64_add(x, y);
    case 1u: return i64_sub(x, y);
    case 2u: return i64_mul(x, y);
    case 6u: return i64_truth(i64_lt(x, y));
    case 7u: return i64_truth(!i64_lt(y, x));
    case 8u: return i64_truth(i64_lt(y, x));
    case 9u: return i64_truth(!i64_lt(x, y));
    case 10u: return i64_truth(i64_eq(x, y));
    case 11u: return i64_truth(!i64_eq(x, y));
    case 15u: return i64_lt(x, y) ? y : x;
    case 16u: return i64_lt(y, x) ? y : x;
    case 17u: return x & y;
    case 18u: return x | y;
    case 19u: return x ^ y;
    case 20u: return past ? uvec2(0u) : i64_shl(x, y.x);
    case 21u: return past ? (i64_negative(x) ? uvec2(0xFFFFFFFFu) : uvec2(0u)) : i64_shr(x, y.x);
    }
    return x;  // not a variant
}

void apply4(uint q, uint ia, uint ib) {
    // not a variant: the emulated int64 runs VEC 1 only
}
#else
VALUE apply(VALUE x, VALUE y) {
    if (OP == 6u) {
        return truth(x < y);
    } else if (OP == 7u) {
        return truth(x <= y);
    } else if (OP == 8u) {
        return truth(x > y);
    } else if (OP == 9u) {
        return truth(x >= y);
    } else if (OP == 10u) {
        return truth(x == y);
    } else if (OP == 11u) {
        return truth(!(x == y));  // unordered: NaN != anything
    }
    if (OP == 12u || OP == 13u) {
        return remainder(x, y);
    }
    if (OP == 14u) {
        return power(x, y);
    }
#if DTYPE == F64
    // NaN propagates (numpy's maximum and minimum).
    if (OP == 15u || OP == 16u) {
        if (nan64(x) || nan64(y)) {
            return nan_double();
        }
        return OP == 15u ? max(x, y) : min(x, y);
    }
#endif
    if (OP == 15u) {
        return max(x, y);
    }
#if UNSIGNED
    if (OP == 17u) {
        return x & y;
    } else if (OP == 18u) {
        return x | y;
    } else if (OP == 19u) {
        return x ^ y;
    } else if (OP == 20u) {
        return y >= VALUE(VALUE_BITS) ? VALUE(0) : x << y;
    } else if (OP == 21u) {
        return y >= VALUE(VALUE_BITS) ? VALUE(0) : x >> y;
    }
#endif
#if INTEGER
    if (OP == 17u) {
        return x & y;
    } else if (OP == 18u) {
        return x | y;
    } else if (OP == 19u) {
        return x ^ y;
    } else if (OP == 20u) {
        return y < 0 || y >= 32 ? 0 : x << y;
    } else if (OP == 21u) {
        return y < 0 || y >= 32 ? (x < 0 ? -1 : 0) : x >> y;
    }
#endif
#if DTYPE == I64
    // Shifts by a count outside [0, 64) as the 32-bit integers' outside [0, 32).
    if (OP == 17u) {
        return x & y;
    } else if (OP == 18u) {
        return x | y;
    } else if (OP == 19u) {
        return x ^ y;
    } else if (OP == 20u) {
        return y < int64_t(0) || y >= int64_t(64) ? int64_t(0) : x << y;
    } else if (OP == 21u) {
        return y < int64_t(0) || y >= int64_t(64) ? (x < int64_t(0) ? int64_t(-1) : int64_t(0))
                                                  : x >> y;
    }
#endif
    if (OP == 16u) {
        return min(x, y);
    }
    if (OP == 0u) {
        return x + y;
    } else if (OP == 1u) {
        return x - y;
    } else if (OP == 2u) {
        return x * y;
    }
    return divide(x, y);
}

// Four outputs from vector q of the result: ia (ib) is a's (b's) vector index, or its element
// index where BCAST marks it broadcast. LOAD4 widens each component as LOAD does one element.
void apply4(uint q, uint ia, uint ib) {
    VALUE4 x;
    VALUE4 y;
    if ((BCAST & 1u) != 0u) {
        x = VALUE4(LOAD(a[ia]));
    } else {
        x = LOAD4(a4[ia]);
    }
    if ((BCAST & 2u) != 0u) {
        y = VALUE4(LOAD(b[ib]));
    } else {
        y = LOAD4(b4[ib]);
    }
    result4[q] = ELEM_OUT4(STORE_OUT(apply(x.x, y.x)), STORE_OUT(apply(x.y, y.y)),
                           STORE_OUT(apply(x.z, y.z)), STORE_OUT(apply(x.w, y.w)));
}
#endif

void main() {
    uint step = VKUMD_THREAD_COUNT;
    if (VEC == 4u) {
        bool a_one = (BCAST & 1u) != 0u;
        bool b_one = (BCAST & 2u) != 0u;
        if (pc.ndim <= 1u) {
            uint quads = pc.n / 4u;
            for (uint q = VKUMD_FIRST_INDEX; q < quads; q += step) {
                apply4(q, a_one ? 0u : q, b_one ? 0u : q);
            }
            // Elements past the last full four (fewer than the invocations): one each.
            uint t = quads * 4u + VKUMD_FIRST_INDEX;
            if (t < pc.n) {
                result[t] = STORE_OUT(apply(LOAD(a[a_one ? 0u : t]), LOAD(b[b_one ? 0u : t])));
            }
            return;
        }
        // ndim 2, rows a multiple of 4: (row, vector column) carried as below.
        uint cols = pc.shape[1] / 4u;
        // A vector operand steps one vector a column and a quarter of its row stride a row;
        // a broadcast one stays on its row's element.
        uint ra = a_one ? pc.a_stride[0] : pc.a_stride[0] / 4u;
        uint rb = b_one ? pc.b_stride[0] : pc.b_stride[0] / 4u;
        uint ca = a_one ? 0u : 1u;
        uint cb = b_one ? 0u : 1u;
        uint first = VKUMD_FIRST_INDEX;
        uint row = first / cols;
        uint col = first - row * cols;
        uint step_rows = step / cols;
        uint step_cols = step - step_rows * cols;
        for (uint q = first; q < pc.n / 4u; q += step) {
            apply4(q, row * ra + col * ca, row * rb + col * cb);
            col += step_cols;
            row += step_rows;
            if (col >= cols) {
                col -= cols;
                row += 1u;
            }
        }
        return;
    }
    if (pc.ndim == 0u) {
        // Both operands have the output's shape: no index arithmetic at all.
        for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
            result[index] = STORE_OUT(apply(LOAD(a[index]), LOAD(b[index])));
        }
        return;
    }
    if (pc.ndim <= 2u) {
        // Up to two dimensions (most broadcasts after the host merged dimensions): split the
        // first index and the loop step into (row, column) once, then carry instead of
        // dividing -- CPU drivers have no vector integer division and scalarise it.
        uint cols = pc.shape[pc.ndim - 1u];
        uint as0 = pc.ndim == 2u ? pc.a_stride[0] : 0u;
        uint bs0 = pc.ndim == 2u ? pc.b_stride[0] : 0u;
        uint as1 = pc.a_stride[pc.ndim - 1u];
        uint bs1 = pc.b_stride[pc.ndim - 1u];
        uint first = VKUMD_FIRST_INDEX;
        uint row = first / cols;
        uint col = first - row * cols;
        uint step_rows = step / cols;
        uint step_cols = step - step_rows * cols;
        for (uint index = first; index < pc.n; index += step) {
            result[index] = STORE_OUT(apply(LOAD(a[pc.a_offset + row * as0 + col * as1]),
                                        LOAD(b[pc.b_offset + row * bs0 + col * bs1])));
            col += step_cols;
            row += step_rows;
            if (col >= cols) {
                col -= cols;
                row += 1u;
            }
        }
        return;
    }
    for (uint index = VKUMD_FIRST_INDEX; index < pc.n; index += step) {
        uint rest = index;
        uint ia = pc.a_offset;
        uint ib = pc.b_offset;
        for (int d = int(pc.ndim) - 1; d >= 0; --d) {
            uint coord = rest % pc.shape[d];
            rest /= pc.shape[d];
            ia += coord * pc.a_stride[d];
            ib += coord * pc.b_stride[d];
        }
        result[index] = STORE_OUT(apply(LOAD(a[ia]), LOAD(b[ib])));
    }
}
