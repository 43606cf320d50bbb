"""The rotary-embedding kernel, ``shaders/rope.comp``, and its planner.

One invocation per (token row, pair) loops over the heads; the grid loops as the
elementwise kernels' does (:func:`~vkumd.compiler.kernels.elementwise_plan.looped_grid`).
The angles are reduced in fixed point on the device (see the shader), from two 64-bit
binary fractions the planner packs: ``theta ** (-2 / head_dim)`` and ``1 / (2 pi)``.
"""

from __future__ import annotations

import functools
from fractions import Fraction

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import ROPE_DTYPES, ROPE_PAIRS
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

ROPE_CODES = type_codes(ROPE_DTYPES)
ROPE_PUSH = PushLayout("rows:u32", "seq:u32", "heads:u32", "half_dim:u32", "halves:u32",
                       "r_hi:u32", "r_lo:u32", "c_hi:u32", "c_lo:u32")
# 1 / (2 pi) to 40 digits (pi = 3.14159265358979323846264338327950288419716939937510...),
# far past the 2^-64 the kernel keeps.
_INV_TWO_PI = Fraction("0.1591549430918953357688837633725143620344596457404564")


def _rope_variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in ROPE_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: ELEMENTWISE_WORKGROUP} for c in codes]


ROPE = register(Kernel(
    name="rope",
    source="rope.comp",
    buffers=3,
    push=ROPE_PUSH,
    defines={"DTYPE": tuple(ROPE_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_rope_variants,
))


def fraction_words(value: Fraction | float) -> tuple[int, int]:
    """``value`` in [0, 1) as a 0.64 binary fraction, truncated: ``(high, low)`` words."""
    bits = int(Fraction(value) * (1 << 64))
    return bits >> 32, bits & 0xFFFFFFFF


def rope_words(theta: float, head_dim: int) -> tuple[int, int, int, int]:
    """The push words of the angles (``include/rope_angle.glsl``): ``theta ** (-2 /
    head_dim)`` (float64; in (0, 1) for theta > 1) and ``1 / (2 pi)`` as 0.64 fractions."""
    return (*fraction_words(theta ** (-2.0 / head_dim)), *fraction_words(_INV_TWO_PI))


@functools.lru_cache(maxsize=4096)
def rope_plan(caps: DeviceCaps, code: str, batch: int, seq: int, heads: int, head_dim: int,
              theta: float, pairs: str) -> FixedLaunch:
    """Rotate ``x[batch, seq, heads, head_dim]`` (``head_dim`` even, ``theta`` > 1).
    Operands: x, positions (int32 [batch]), out (may be x)."""
    half = head_dim // 2
    r_hi, r_lo, c_hi, c_lo = rope_words(theta, head_dim)
    program = ROPE.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    rows = batch * seq
    push = ROPE_PUSH.pack(rows, seq, heads, half, ROPE_PAIRS.index(pairs), r_hi, r_lo,
                          c_hi, c_lo)
    groups = -(-(rows * half) // ELEMENTWISE_WORKGROUP)
    # The elementwise kernels' grid although a pair costs far more than an add: with fewer
    # pieces per workgroup (1 to 16) lavapipe ran rope and kv_write no faster at decode sizes
    # and up to 1.5x slower at a 128-token prefill (2 busy cores, per-workgroup cost).
    return FixedLaunch(program, push, looped_grid(caps, groups), (2,))
