"""The kernels vkumd ships, registered with their defines, constants and variants."""

from __future__ import annotations

from vkumd.compiler.registry import Kernel, register
from vkumd.vk.caps import DeviceCaps

WORKGROUP = "WORKGROUP_SIZE"
ELEMENTWISE_OPS = {"add": 0, "sub": 1, "mul": 2, "div": 3}


def _elementwise_variants(caps: DeviceCaps) -> list[dict]:
    elems = ["float"] + (["float16_t"] if caps.storage_16bit else [])
    return [{"ELEM": elem, "OP": op, WORKGROUP: 64} for elem in elems
            for op in ELEMENTWISE_OPS.values()]


ELEMENTWISE_BINARY = register(Kernel(
    name="elementwise_binary",
    source="elementwise_binary.comp",
    buffers=3,
    push_bytes=4 * 20,
    defines={"ELEM": ("float", "float16_t", "int")},
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=_elementwise_variants,
))
