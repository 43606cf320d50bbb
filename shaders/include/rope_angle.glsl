// Rotary-embedding angles reduced exactly (rope.comp, kv_write.comp with ROPE 1).
//
// A float32 p * inv_freq is off by up to p * 2^-24 radians (5e-4 at p = 8192), and sin/cos of
// a large argument lose more. The host passes r = theta^(-2/head_dim) and 1/(2 pi) as 64-bit
// binary fractions (0.64 fixed point, .x the high word); f_i = r^i / (2 pi) is formed here by
// squaring (each 64-bit product truncates at 2^-64), and frac(p * f_i), the angle in turns,
// is read from the low words of the 96-bit integer product. Only that fraction, in
// [-1/2, 1/2), goes through float32: the angle's error stays below 2e-7 radians at any
// position.
#pragma once

// The high 64 bits of the 128-bit product of two 0.64 fractions (truncated).
uvec2 rope_mul_fraction(uvec2 a, uvec2 b) {
    uint hh, hl, h1, l1, h2, l2, h0, l0;
    umulExtended(a.x, b.x, hh, hl);
    umulExtended(a.x, b.y, h1, l1);
    umulExtended(a.y, b.x, h2, l2);
    umulExtended(a.y, b.y, h0, l0);
    uint c1, c2;
    uint middle = uaddCarry(l1, l2, c1);
    middle = uaddCarry(middle, h0, c2);
    uint carry = c1 + c2;
    uint c3, c4, c5;
    uint low = uaddCarry(hl, h1, c3);
    low = uaddCarry(low, h2, c4);
    low = uaddCarry(low, carry, c5);
    return uvec2(hh + c3 + c4 + c5, low);
}

// The angle of pair i at position p, in radians, in [-pi, pi]; r and inv_two_pi as above.
float rope_angle(int p, uint i, uvec2 r, uvec2 inv_two_pi) {
    uvec2 f = inv_two_pi;
    uvec2 base = r;
    for (uint e = i; e != 0u; e >>= 1) {
        if ((e & 1u) != 0u) {
            f = rope_mul_fraction(f, base);
        }
        base = rope_mul_fraction(base, base);
    }
    // |p| * f = hi1 * 2^32 + (lo1 + hi0) + lo0 * 2^-32 in units of 2^-32 turns: the integer
    // turns (hi1 and the carry out of lo1 + hi0) drop out, the top fraction word remains.
    uint a = uint(abs(p));
    uint hi1, lo1, hi0, lo0;
    umulExtended(a, f.x, hi1, lo1);
    umulExtended(a, f.y, hi0, lo0);
    int turns = int(lo1 + hi0);  // the fraction as [-1/2, 1/2)
    float t = float(turns) * (1.0 / 4294967296.0);
    return (p < 0 ? -t : t) * 6.2831853071795865;
}
