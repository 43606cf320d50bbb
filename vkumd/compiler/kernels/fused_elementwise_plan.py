"""Planning generated elementwise kernels: broadcast strides, push constants and the grid.

As :func:`~vkumd.compiler.kernels.elementwise_plan.binary_plan`, for ``k`` inputs: the
output's dimensions that every input steps through contiguously are merged
(:func:`~vkumd.compiler.kernels.elementwise_plan.shape_words`), ``ndim`` 0 marks inputs that
all have the output's shape, and the grid is a few looping workgroups on CPU drivers
(:func:`~vkumd.compiler.kernels.elementwise_plan.looped_grid`). Plans are cached on the
program, the types, the shapes and the device.

Where the layout allows, the plan picks the kernel's vectorised variant (``VEC`` 4, see
:func:`~vkumd.compiler.kernels.elementwise_vector.vector_layout`, shared with the eager binary
kernel): each invocation loads four consecutive elements of each input with one vector load
and stores four results with one vector store. lavapipe turns every per-lane
load into a gather, so this takes a 4M-float ``x * 1.5`` from 11-12 to 6-7 ms of CPU time
(``bench/fused_vec.py``). Each component runs the same program code as the scalar variant,
so the two give the same bits.
"""

from __future__ import annotations

import functools
import math
from typing import Any

from vkumd.compiler.kernels.elementwise_plan import (
    ELEMENTWISE_WORKGROUP,
    FixedLaunch,
    looped_grid,
    shape_words,
)
from vkumd.compiler.kernels.elementwise_vector import invocations, vector_layout
from vkumd.compiler.kernels.fused_elementwise import fused_kernel
from vkumd.compiler.registry import WORKGROUP
from vkumd.errors import CapabilityMissing
from vkumd.vk.caps import DeviceCaps

_PLANS = 4096


@functools.lru_cache(maxsize=_PLANS)
def fused_elementwise_plan(caps: DeviceCaps, program: tuple[tuple[Any, ...], ...],
                           in_codes: tuple[str, ...], out_code: str,
                           in_shapes: tuple[tuple[int, ...], ...],
                           out_shape: tuple[int, ...], vector: bool = True) -> FixedLaunch:
    """``out = program(inputs)`` with every input broadcast to ``out_shape``.

    Args:
        caps: the device.
        program: GLSL steps ``(template, *operands)`` (see :mod:`.fused_elementwise`).
        in_codes: each input's type code (``FUSED_INPUT_CODES`` values).
        out_code: the result's type code (``FUSED_OUTPUT_CODES`` values).
        in_shapes: each input's shape, broadcastable to ``out_shape``.
        out_shape: the result's shape.
        vector: whether the vectorised variant may be chosen (False: always the scalar
            one, which benchmarks compare against).

    Returns:
        The plan. Operands: the inputs, then the output.

    Raises:
        VkumdValueError: a step the generator does not know, too many inputs, or more than
            six dimensions left after merging.
        CapabilityMissing: the push block is larger than the device allows.
    """
    kernel = fused_kernel(program, len(in_codes))
    if kernel.push.size > caps.max_push_constants_size:
        raise CapabilityMissing(f"fused_elementwise: {len(in_codes)} inputs need "
                                f"{kernel.push.size} bytes of push constants; {caps.name} "
                                f"allows {caps.max_push_constants_size}. Fuse fewer inputs")
    words = shape_words(out_shape, *in_shapes)
    mask = vector_layout(caps, (*in_codes, out_code), words) if vector else None
    variant: dict[str, Any] = {f"T{i}": code for i, code in enumerate(in_codes)}
    variant.update({"TOUT": out_code, "VEC": 1 if mask is None else 4, "BCAST": mask or 0,
                    WORKGROUP: ELEMENTWISE_WORKGROUP})
    work = invocations(math.prod(out_shape), mask is not None)
    groups = looped_grid(caps, -(-work // ELEMENTWISE_WORKGROUP))
    return FixedLaunch(kernel.specialize(variant), kernel.push.pack(*words), groups,
                       (len(in_codes),))
