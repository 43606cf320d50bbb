"""The resampling kernels: ``shaders/resize2d.comp`` (nearest, bilinear and bicubic resize of
NCHW planes), ``shaders/pad.comp`` (constant, reflect and edge padding, negative pads
cropping) and ``shaders/conv_transpose2d.comp`` (transposed convolution as a gather). Their
planners, which turn each problem into push constants, are in :mod:`.resample_plan`.
"""

from __future__ import annotations

from vkumd.compiler.kernels.elementwise_plan import ELEMENTWISE_WORKGROUP
from vkumd.compiler.kernels.limits import PAD_DTYPES, PAD_MAX_RANK, RESAMPLE_DTYPES
from vkumd.compiler.kernels.type_codes import type_codes
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import WORKGROUP, Kernel, register
from vkumd.vk.caps import DeviceCaps

RESAMPLE_CODES = type_codes(RESAMPLE_DTYPES)
PAD_CODES = type_codes(PAD_DTYPES)
RESIZE_PUSH = PushLayout("total:u32", "h:u32", "w:u32", "oh:u32", "ow:u32", "mode:u32",
                         "rounding:u32", "ay:i32", "by:i32", "dy:i32", "ax:i32", "bx:i32",
                         "dx:i32", "cubic_a:f32", "exclude:u32", "extrapolate:u32",
                         "extrapolation:f32", "aa_y:f32", "aa_x:f32")
PAD_PUSH = PushLayout("total:u32", "mode:u32", "value:f32", f"dims:u32[{PAD_MAX_RANK}]",
                      f"sizes:u32[{PAD_MAX_RANK}]", f"lead:u32[{PAD_MAX_RANK}]",
                      f"start:u32[{PAD_MAX_RANK}]", f"len:u32[{PAD_MAX_RANK}]")
CONV_TRANSPOSE_PUSH = PushLayout("total:u32", "c_in:u32", "h:u32", "w:u32", "c_out:u32",
                                 "oh:u32", "ow:u32", "kh:u32", "kw:u32", "sy:u32", "sx:u32",
                                 "dy:u32", "dx:u32", "pt:i32", "pl:i32", "groups:u32",
                                 "has_bias:u32")


def resample_variants(caps: DeviceCaps) -> list[dict]:
    """Every resampling kernel's variants: float32, and float16 where 16-bit storage is."""
    codes = [c for c in RESAMPLE_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: ELEMENTWISE_WORKGROUP} for c in codes]


def _kernel(name: str, buffers: int, push: PushLayout) -> Kernel:
    return register(Kernel(name=name, source=f"{name}.comp", buffers=buffers, push=push,
                           defines={"DTYPE": tuple(RESAMPLE_CODES.values())},
                           spec_constants={WORKGROUP: 0}, variants=resample_variants))


RESIZE2D = _kernel("resize2d", 2, RESIZE_PUSH)


def _pad_variants(caps: DeviceCaps) -> list[dict]:
    """The pad kernel's variants: float32, and the 16-bit types where 16-bit storage is."""
    codes = [c for c in PAD_CODES.values() if caps.storage_16bit or c == "F32"]
    return [{"DTYPE": c, WORKGROUP: ELEMENTWISE_WORKGROUP} for c in codes]


PAD = register(Kernel(name="pad", source="pad.comp", buffers=2, push=PAD_PUSH,
                      defines={"DTYPE": tuple(PAD_CODES.values())},
                      spec_constants={WORKGROUP: 0}, variants=_pad_variants))
CONV_TRANSPOSE2D = _kernel("conv_transpose2d", 4, CONV_TRANSPOSE_PUSH)
