// int64 without shaderInt64 (DeviceCaps.int64_arithmetic "emulated"): a value is a uvec2,
// x the low word and y the high one, two's complement -- the bits of a stored int64_t, so
// tensors are the same either way. Arithmetic wraps as int64_t does; only 32-bit integer
// instructions are used (carries with uaddCarry/usubBorrow, products with umulExtended).
#pragma once

uvec2 i64_add(uvec2 a, uvec2 b) {
    uint carry;
    uint low = uaddCarry(a.x, b.x, carry);
    return uvec2(low, a.y + b.y + carry);
}

uvec2 i64_sub(uvec2 a, uvec2 b) {
    uint borrow;
    uint low = usubBorrow(a.x, b.x, borrow);
    return uvec2(low, a.y - b.y - borrow);
}

uvec2 i64_neg(uvec2 a) {
    return i64_sub(uvec2(0u), a);
}

// The low 64 bits of the product (the cross terms' high halves fall past bit 63).
uvec2 i64_mul(uvec2 a, uvec2 b) {
    uint high;
    uint low;
    umulExtended(a.x, b.x, high, low);
    return uvec2(low, high + a.x * b.y + a.y * b.x);
}

bool i64_negative(uvec2 a) {
    return int(a.y) < 0;
}

bool i64_lt(uvec2 a, uvec2 b) {
    return int(a.y) < int(b.y) || (a.y == b.y && a.x < b.x);
}

bool i64_eq(uvec2 a, uvec2 b) {
    return a.x == b.x && a.y == b.y;
}

// Shifts by a count in [0, 64) (callers handle the rest as int64_t's kernel does).
uvec2 i64_shl(uvec2 a, uint n) {
    if (n == 0u) {
        return a;
    }
    if (n >= 32u) {
        return uvec2(0u, a.x << (n - 32u));
    }
    return uvec2(a.x << n, (a.y << n) | (a.x >> (32u - n)));
}

// Arithmetic: the sign fills from the left.
uvec2 i64_shr(uvec2 a, uint n) {
    if (n == 0u) {
        return a;
    }
    if (n >= 32u) {
        return uvec2(uint(int(a.y) >> (n - 32u)), uint(int(a.y) >> 31));
    }
    return uvec2((a.x >> n) | (a.y << (32u - n)), uint(int(a.y) >> n));
}

uvec2 i64_from_int(int v) {
    return uvec2(uint(v), v < 0 ? 0xFFFFFFFFu : 0u);
}

uvec2 i64_from_uint(uint v) {
    return uvec2(v, 0u);
}

// float32 -> int64, truncated toward zero (out of range undefined, as int64_t(v)). Past
// int32's range a float32 is a multiple of 2^8, so the low word t - high * 2^32 (in
// [0, 2^32), a multiple of t's ulp) has at most 24 significant bits: exact.
uvec2 i64_from_float(float v) {
    float t = trunc(v);
    if (abs(t) < 2147483648.0) {
        return i64_from_int(int(t));
    }
    float high = floor(t * (1.0 / 4294967296.0));
    return uvec2(uint(t - high * 4294967296.0), uint(int(high)));
}

// int64 -> float32, rounded once to nearest even as numpy's astype: the magnitude's top 32
// bits with a sticky bit for the rest (below float32's rounding bit), converted and scaled.
float i64_to_float(uvec2 a) {
    bool negative = i64_negative(a);
    uvec2 m = negative ? i64_neg(a) : a;  // INT64_MIN stays 2^63, read as unsigned
    float f;
    if (m.y == 0u) {
        f = float(m.x);
    } else {
        int bits = findMSB(m.y) + 1;  // 1 to 32
        uint top = bits == 32 ? m.y : (m.y << uint(32 - bits)) | (m.x >> uint(bits));
        uint rest = bits == 32 ? m.x : m.x << uint(32 - bits);
        f = ldexp(float(top | (rest != 0u ? 1u : 0u)), bits);
    }
    return negative ? -f : f;
}

#ifdef I64_DOUBLE
// float64 <-> int64 (a kernel defines I64_DOUBLE where it has shaderFloat64): the high word
// scaled by 2^32 plus the low one, rounded once; back, as i64_from_float (double holds the
// low word exactly).
double i64_to_double(uvec2 a) {
    return double(int(a.y)) * 4294967296.0LF + double(a.x);
}

uvec2 i64_from_double(double v) {
    // Toward zero through floor: lavapipe's double trunc() rounds negative values down.
    double t = v < 0.0LF ? -floor(-v) : floor(v);
    if (abs(t) < 2147483648.0LF) {
        return i64_from_int(int(t));
    }
    double high = floor(t / 4294967296.0LF);
    return uvec2(uint(t - high * 4294967296.0LF), uint(int(high)));
}
#endif
