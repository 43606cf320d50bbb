"""The activation kernel, ``shaders/activation.comp``, and the activation codes every kernel
that applies one shares (``shaders/include/activation.glsl``)."""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import ACTIVATIONS
from vkumd.compiler.kernels.rows import ROW_TYPES, grid, row_types
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

ACTIVATION_PUSH = PushLayout("units:u32")
ACTIVATION_WORKGROUP = 64


def _activation_variants(caps: DeviceCaps) -> list[dict]:
    # Every code but None's (the identity, which no op launches).
    return [{"DTYPE": t, "VEC": vec, "ACT": act, WORKGROUP: ACTIVATION_WORKGROUP}
            for t in row_types(caps) for vec in (1, 4)
            for act in ACTIVATIONS.values() if act]


ACTIVATION = register(Kernel(
    name="activation",
    source="activation.comp",
    buffers=2,
    push=ACTIVATION_PUSH,
    defines={"DTYPE": ROW_TYPES, "VEC": (1, 4)},
    spec_constants={WORKGROUP: 0, "ACT": 1},
    variants=_activation_variants,
))


@functools.lru_cache(maxsize=4096)
def activation_plan(caps: DeviceCaps, act: int, code: str, size: int) -> FixedLaunch:
    """An activation (code ``act`` of ``ACTIVATIONS``) over ``size`` elements. Operands: x,
    out."""
    vec = 4 if size % 4 == 0 else 1
    units = size // vec
    program = ACTIVATION.specialize({"DTYPE": code, "VEC": vec, "ACT": act,
                                     WORKGROUP: ACTIVATION_WORKGROUP})
    return FixedLaunch(program, ACTIVATION_PUSH.pack(units),
                       grid(caps, units, ACTIVATION_WORKGROUP), (1,))
