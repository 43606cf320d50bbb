"""The float64 kernels: ``shaders/unary_double.comp`` (the unary math set), computed in
double and built only where the device has ``shaderFloat64`` (no variant otherwise, so a
launch is refused by the registry, and the ops refuse earlier with the feature named).
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import DOUBLE_UNARY_OPS
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

UNARY_DOUBLE_PUSH = PushLayout("n:u32")
_WORKGROUP = 64

UNARY_DOUBLE = register(Kernel(
    name="unary_double",
    source="unary_double.comp",
    buffers=2,
    push=UNARY_DOUBLE_PUSH,
    spec_constants={WORKGROUP: 0, "OP": 1},
    variants=lambda caps: ([{WORKGROUP: _WORKGROUP, "OP": op}
                            for op in DOUBLE_UNARY_OPS.values()]
                           if caps.shader_float64 else []),
))


def unary_double_plan(caps: DeviceCaps, op: str, size: int) -> FixedLaunch:
    """Op ``op`` (a key of :data:`DOUBLE_UNARY_OPS`) over ``size`` contiguous float64
    elements. Operands: x, out.

    Raises:
        VkumdValueError: 2^32 elements or more (the kernel indexes in 32 bits).
    """
    if size >= 1 << 32:
        raise VkumdValueError(f"{op}: x has {size} elements; the float64 kernels index at "
                              "most 2^32 - 1; split the tensor")
    return _unary_double_plan(caps, op, size)


@functools.lru_cache(maxsize=1024)
def _unary_double_plan(caps: DeviceCaps, op: str, size: int) -> FixedLaunch:
    program = UNARY_DOUBLE.specialize({WORKGROUP: _WORKGROUP, "OP": DOUBLE_UNARY_OPS[op]})
    return FixedLaunch(program, UNARY_DOUBLE_PUSH.pack(size), grid(caps, size, _WORKGROUP),
                       (1,))
