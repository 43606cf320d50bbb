"""The grid-sampling kernel, ``shaders/grid_sample.comp`` (ONNX GridSample, torch's
``grid_sample``) and its planner: one launch over the output elements, 2-D as depth 1."""

from __future__ import annotations

import functools
import math

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import GRID_SAMPLE_MODES, GRID_SAMPLE_PADDINGS
from vkumd.compiler.kernels.resample import RESAMPLE_CODES, resample_variants
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

GRID_SAMPLE_PUSH = PushLayout("total:u32", "c:u32", "d:u32", "h:u32", "w:u32", "points:u32",
                              "rank:u32", "mode:u32", "padding:u32", "align:u32")
GRID_SAMPLE = register(Kernel(name="grid_sample", source="grid_sample.comp", buffers=3,
                              push=GRID_SAMPLE_PUSH,
                              defines={"DTYPE": tuple(RESAMPLE_CODES.values())},
                              spec_constants={WORKGROUP: 0}, variants=resample_variants))

# The kernel indexes with 32-bit unsigned integers.
_MAX_ELEMENTS = (1 << 32) - 1


@functools.lru_cache(maxsize=1024)
def grid_sample_plan(caps: DeviceCaps, code: str, x_shape: tuple[int, ...],
                     out_points: tuple[int, ...], mode: str, padding: str,
                     align_corners: bool) -> FixedLaunch:
    """Sample ``x`` of ``x_shape`` (``[N, C, H, W]`` or ``[N, C, D, H, W]``) at the
    ``out_points`` (the grid's spatial extents) in ``mode`` with ``padding``.
    Operands: x, grid, out.

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    n, c, *spatial = x_shape
    rank = len(spatial)
    points = math.prod(out_points)
    total = n * c * points
    for what, size in (("x", math.prod(x_shape)), ("grid", n * points * rank),
                       ("out", total)):
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"grid_sample: {what} has {size} elements; the kernel "
                                  f"indexes at most {_MAX_ELEMENTS} (split the batch)")
    d, h, w = ([1] + spatial) if rank == 2 else spatial
    program = GRID_SAMPLE.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = GRID_SAMPLE_PUSH.pack(total, c, d, h, w, points, rank,
                                 GRID_SAMPLE_MODES.index(mode),
                                 GRID_SAMPLE_PADDINGS.index(padding), int(align_corners))
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (2,))
