"""The negative log-likelihood kernel, ``shaders/nll.comp``: each target element's weighted
``-x[n, target, d]`` and its weight, in float32, for ``nll_loss`` to reduce.

One invocation per target element (a gather, no reduction of its own).
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import FixedLaunch
from vkumd.compiler.kernels.limits import NLL_DTYPES
from vkumd.compiler.kernels.rows import grid
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

NLL_CODES = type_codes(NLL_DTYPES)
NLL_PUSH = PushLayout("count:u32", "classes:u32", "inner:u32", "has_weight:u32",
                      "has_ignore:u32", "ignore_index:i32")
# Lanes per workgroup: one target element each.
_WIDTH = 64

NLL = register(Kernel(
    name="nll",
    source="nll.comp",
    buffers=5,
    push=NLL_PUSH,
    defines={"DTYPE": tuple(NLL_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=lambda caps: [{"DTYPE": code, WORKGROUP: _WIDTH} for code in NLL_CODES.values()
                           if caps.storage_16bit or code == "F32"],
))


@functools.lru_cache(maxsize=1024)
def nll_plan(caps: DeviceCaps, code: str, count: int, classes: int, inner: int,
             has_weight: bool, ignore_index: int | None) -> FixedLaunch:
    """Operands: x, target (int32), weight (or None), loss (float32), weights (float32).

    Raises:
        VkumdValueError: more elements than the device's grid dispatches at once.
    """
    program = NLL.specialize({"DTYPE": code, WORKGROUP: _WIDTH})
    push = NLL_PUSH.pack(count, classes, inner, int(has_weight), int(ignore_index is not None),
                         0 if ignore_index is None else ignore_index)
    return FixedLaunch(program, push, grid(caps, count, _WIDTH), (3, 4))
