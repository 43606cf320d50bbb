"""The pooling kernel, ``shaders/pool2d.comp`` (max, average and Lp), the channel-window LRN
kernel ``shaders/lrn.comp``, and their planners.

One invocation per output element over NCHW planes; the window geometry (kernel, strides,
dilations, the four pads) arrives resolved, ceil mode included, from the op's rule.
"""

from __future__ import annotations

import functools

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP, FixedLaunch, looped_grid
from vkumd.compiler.kernels.limits import POOL_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

POOL_CODES = type_codes(POOL_DTYPES)
POOL_PUSH = PushLayout("total:u32", "h:u32", "w:u32", "oh:u32", "ow:u32", "kh:u32", "kw:u32",
                       "sy:u32", "sx:u32", "dy:u32", "dx:u32", "pt:i32", "pl:i32", "pb:i32",
                       "pr:i32", "kind:u32", "count_pads:u32", "p:f32", "order:u32")
# The shader's kinds of pooling, by index.
POOL_KINDS = ("avg", "max", "lp")
_MAX_ELEMENTS = (1 << 32) - 1


def _pool_variants(caps: DeviceCaps) -> list[dict]:
    codes = [c for c in POOL_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: ELEMENTWISE_WORKGROUP} for c in codes]


def _pool2d_variants(caps: DeviceCaps) -> list[dict]:
    return [{**v, "INDICES": i} for v in _pool_variants(caps) for i in (0, 1)]


POOL2D = register(Kernel(
    name="pool2d",
    source="pool2d.comp",
    buffers=2,
    push=POOL_PUSH,
    defines={"DTYPE": tuple(POOL_CODES.values()), "INDICES": (0, 1)},
    spec_constants={WORKGROUP: 0},
    variants=_pool2d_variants,
))


@functools.lru_cache(maxsize=4096)
def pool2d_plan(caps: DeviceCaps, code: str, planes: int, hw: tuple[int, int],
                out_hw: tuple[int, int], kernel: tuple[int, int], stride: tuple[int, int],
                dilation: tuple[int, int], pads: tuple[int, int, int, int], kind: str,
                count_include_pad: bool, p: float = 2.0, indices: int | None = None
                ) -> FixedLaunch:
    """Pool ``planes`` (N * C) planes of ``hw`` to ``out_hw``; pads (top, left, bottom,
    right); ``kind`` one of :data:`POOL_KINDS` (``p``: Lp's exponent). ``indices`` (max
    only): write int32 flat indices of the maxima instead, 0 row-major, 1 column-major
    planes. Operands: x, out.

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    total = planes * out_hw[0] * out_hw[1]
    for what, size in (("x", planes * hw[0] * hw[1]), ("out", total)):
        if size > _MAX_ELEMENTS:
            raise VkumdValueError(f"pool2d: {what} has {size} elements; the kernel indexes at "
                                  f"most {_MAX_ELEMENTS} (split the batch)")
    if indices is not None and planes * hw[0] * hw[1] > (1 << 31) - 1:
        raise VkumdValueError(f"max_pool2d_indices: x has {planes * hw[0] * hw[1]} elements; "
                              "int32 indices reach 2**31 - 1 (split the batch)")
    program = POOL2D.specialize({"DTYPE": code, "INDICES": int(indices is not None),
                                 WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = POOL_PUSH.pack(total, *hw, *out_hw, *kernel, *stride, *dilation, *pads,
                          POOL_KINDS.index(kind), int(count_include_pad), p, indices or 0)
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (1,))


LRN_PUSH = PushLayout("total:u32", "channels:u32", "inner:u32", "lo:u32", "hi:u32",
                      "alpha_over_size:f32", "beta:f32", "bias:f32")
LRN = register(Kernel(
    name="lrn",
    source="lrn.comp",
    buffers=2,
    push=LRN_PUSH,
    defines={"DTYPE": tuple(POOL_CODES.values())},
    spec_constants={WORKGROUP: 0},
    variants=_pool_variants,
))


@functools.lru_cache(maxsize=4096)
def lrn_plan(caps: DeviceCaps, code: str, total: int, channels: int, inner: int, size: int,
             alpha: float, beta: float, bias: float) -> FixedLaunch:
    """Local response normalisation of ``x[N, channels, inner]`` (``total`` elements) over a
    window of ``size`` channels. Operands: x, out.

    Raises:
        VkumdValueError: a tensor past the kernel's 32-bit indexing.
    """
    if total > _MAX_ELEMENTS:
        raise VkumdValueError(f"lrn: x has {total} elements; the kernel indexes at most "
                              f"{_MAX_ELEMENTS} (split the batch)")
    program = LRN.specialize({"DTYPE": code, WORKGROUP: ELEMENTWISE_WORKGROUP})
    push = LRN_PUSH.pack(total, channels, inner, (size - 1) // 2, size // 2, alpha / size,
                         beta, bias)
    return FixedLaunch(program, push, looped_grid(caps, -(-total // ELEMENTWISE_WORKGROUP)),
                       (1,))
