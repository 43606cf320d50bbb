"""The key/value cache update kernel, ``shaders/kv_write.comp``, and its planner.

A grid-stride copy of the new tokens' rows into their slots' positions, converting to the
cache's type; rows whose position is outside the cache are dropped on the device. The grid
loops as the elementwise kernels' does
(:func:`~vkumd.compiler.kernels.elementwise_plan.looped_grid`).
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import FLOAT_DTYPES, KV_CACHE_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

KV_CACHE_CODES = type_codes(KV_CACHE_DTYPES)
KV_NEW_CODES = type_codes(FLOAT_DTYPES)
KV_WRITE_PUSH = PushLayout("total:u32", "seq:u32", "row:u32", "max_len:u32")


def _kv_variants(caps: DeviceCaps) -> list[dict]:
    def usable(code: str) -> bool:
        return caps.storage_16bit or code == "F32"
    return [{"CACHE": c, "NEW": n, WORKGROUP: ELEMENTWISE_WORKGROUP}
            for c in KV_CACHE_CODES.values() if usable(c)
            for n in KV_NEW_CODES.values() if usable(n)]


KV_WRITE = register(Kernel(
    name="kv_write",
    source="kv_write.comp",
    buffers=3,
    push=KV_WRITE_PUSH,
    defines={"CACHE": tuple(KV_CACHE_CODES.values()), "NEW": tuple(KV_NEW_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_kv_variants,
))


@functools.lru_cache(maxsize=4096)
def kv_write_plan(caps: DeviceCaps, cache_code: str, new_code: str, slots: int, max_len: int,
                  seq: int, row: int) -> FixedLaunch:
    """Write ``new[slots, seq, row]`` into ``cache[slots, max_len, row]`` at each slot's
    position. Operands: cache (written), new, positions (int32 [slots])."""
    program = KV_WRITE.specialize({"CACHE": cache_code, "NEW": new_code,
                                   WORKGROUP: ELEMENTWISE_WORKGROUP})
    total = slots * seq * row
    push = KV_WRITE_PUSH.pack(total, seq, row, max_len)
    groups = -(-total // ELEMENTWISE_WORKGROUP)
    return FixedLaunch(program, push, looped_grid(caps, groups), (0,))
