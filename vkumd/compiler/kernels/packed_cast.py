"""The packed types' conversion kernel, ``shaders/packed_cast.comp``: the integer packed
types (int4, uint4, int2, uint2) to and from the float types, int32, int8 and uint8; float4_e2m1
and float8_e8m0 to and from the float types. Contiguous operands, one element (a packed
output: one byte) per invocation."""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import (
    FLOAT_DTYPES,
    PACKED_DTYPES,
    PACKED_INT_DTYPES,
    PACKED_INT_PARTNERS,
)
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.kernels.type_codes import ELEMENT_TYPES, type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

PACKED_CODES = type_codes(PACKED_DTYPES)
PACKED_CAST_PUSH = PushLayout("n:u32", "mode:u32")
_WORKGROUP = 64
_PARTNER_CODES = type_codes(PACKED_INT_PARTNERS)


def packed_partners(name: str) -> tuple[str, ...]:
    """The dtypes packed type ``name`` converts to and from."""
    return PACKED_INT_PARTNERS if name in PACKED_INT_DTYPES else FLOAT_DTYPES


def _variants(caps: DeviceCaps) -> list[dict]:
    if not caps.storage_8bit:
        return []
    pairs = []
    for name, code in PACKED_CODES.items():
        for partner in packed_partners(name):
            if ELEMENT_TYPES[partner].itemsize == 2 and not caps.storage_16bit:
                continue
            other = _PARTNER_CODES[partner]
            pairs += [(code, other), (other, code)]
    return [{"SRC": s, "DST": d, WORKGROUP: _WORKGROUP} for s, d in pairs]


PACKED_CAST = register(Kernel(
    name="packed_cast",
    source="packed_cast.comp",
    buffers=2,
    push=PACKED_CAST_PUSH,
    defines={"SRC": tuple(PACKED_CODES.values()) + tuple(_PARTNER_CODES.values()),
             "DST": tuple(PACKED_CODES.values()) + tuple(_PARTNER_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_variants,
))


@functools.lru_cache(maxsize=1024)
def packed_cast_plan(caps: DeviceCaps, source: str, target: str, count: int, mode: int
                     ) -> FixedLaunch:
    """One launch converting ``count`` contiguous elements of dtype ``source`` to
    ``target`` (one of them packed) with float_to_packed's ``mode``. Operands: src, out.

    Raises:
        VkumdValueError: more work items than the device's grid dispatches at once.
    """
    codes = {**PACKED_CODES, **_PARTNER_CODES}
    program = PACKED_CAST.specialize({"SRC": codes[source], "DST": codes[target],
                                      WORKGROUP: _WORKGROUP})
    return FixedLaunch(program, PACKED_CAST_PUSH.pack(count, mode),
                       grid(caps, count, _WORKGROUP), (1,))
