"""The key/value cache update kernel, ``shaders/kv_write.comp``, and its planner.

A grid-stride copy of the new tokens' rows into their slots' positions, converting to the
cache's type; rows whose position is outside the cache are dropped on the device. The
``ROPE`` variant rotates the keys on the way (rotary embedding at their positions). The grid
loops as the elementwise kernels' does
(:func:`~vkumd.compiler.kernels.elementwise_plan.looped_grid`).
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import FLOAT_DTYPES, KV_CACHE_DTYPES, ROPE_PAIRS
from vkumd.compiler.kernels.rope import rope_words
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

KV_CACHE_CODES = type_codes(KV_CACHE_DTYPES)
KV_NEW_CODES = type_codes(FLOAT_DTYPES)
KV_WRITE_PUSH = PushLayout("total:u32", "seq:u32", "row:u32", "max_len:u32", "half_dim:u32",
                           "halves:u32", "r_hi:u32", "r_lo:u32", "c_hi:u32", "c_lo:u32")


def _kv_variants(caps: DeviceCaps) -> list[dict]:
    def usable(code: str) -> bool:
        return caps.storage_16bit or code == "F32"
    return [{"CACHE": c, "NEW": n, "ROPE": rope, WORKGROUP: ELEMENTWISE_WORKGROUP}
            for c in KV_CACHE_CODES.values() if usable(c)
            for n in KV_NEW_CODES.values() if usable(n) for rope in (0, 1)]


KV_WRITE = register(Kernel(
    name="kv_write",
    source="kv_write.comp",
    buffers=3,
    push=KV_WRITE_PUSH,
    defines={"CACHE": tuple(KV_CACHE_CODES.values()), "NEW": tuple(KV_NEW_CODES.values()),
             "ROPE": (0, 1)},
    spec_constants={WORKGROUP: 0},
    variants=_kv_variants,
))


@functools.lru_cache(maxsize=4096)
def kv_write_plan(caps: DeviceCaps, cache_code: str, new_code: str, slots: int, max_len: int,
                  seq: int, heads: int, head_dim: int, rope: tuple[float, str] | None = None
                  ) -> FixedLaunch:
    """Write ``new[slots, seq, heads, head_dim]`` into ``cache[slots, max_len, heads,
    head_dim]`` at each slot's position, rotated first when ``rope`` is ``(theta, pairs)``
    (as :func:`~vkumd.compiler.kernels.rope.rope_plan`; head_dim even). Operands: cache
    (written), new, positions (int32 [slots])."""
    program = KV_WRITE.specialize({"CACHE": cache_code, "NEW": new_code,
                                   "ROPE": int(rope is not None),
                                   WORKGROUP: ELEMENTWISE_WORKGROUP})
    row = heads * head_dim
    total = slots * seq * row
    words = (0, 0, 0, 0, 0)
    if rope is not None:  # one invocation per (token, pair), looping over the heads
        total = slots * seq * (head_dim // 2)
        words = (ROPE_PAIRS.index(rope[1]), *rope_words(rope[0], head_dim))
    push = KV_WRITE_PUSH.pack(total, seq, row, max_len, head_dim // 2, *words)
    groups = -(-total // ELEMENTWISE_WORKGROUP)
    return FixedLaunch(program, push, looped_grid(caps, groups), (0,))
