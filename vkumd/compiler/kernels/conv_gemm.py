"""Convolution as implicit GEMM: ``shaders/gemm.comp`` built with ``CONV=1``.

The GEMM family's tiles and epilogue, with op(B) the im2col matrix of the NCHW input computed
by the B loads themselves (no column buffer): per group, ``out[cout_g, oh*ow] =
w[cout_g, cin_g*kh*kw] @ cols``. One launch covers every image and group (batch entry
``image * groups + group``). Variants: the lanes path (CPU drivers such as lavapipe: the taps
are walked by increments, each lane's output pixels fixed before the K loop), the shared-
memory path (GPUs) and the cooperative-matrix path (float16, where the driver lists shapes).
Which convolution takes this kernel is :mod:`vkumd.compiler.kernels.conv_route`'s choice.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from vkumd.compiler.kernels import gemm_choice
from vkumd.compiler.kernels.conv import CONV_CODES, Epilogue, check_indexing
from vkumd.compiler.kernels.gemm import (
    GEMM,
    GEMM_PUSH,
    WORD_ELEMENTS,
    lanes_tile_n,
    lanes_variant,
    shared_variant,
)
from vkumd.compiler.kernels.gemm_choice import GemmShape, coopmat_gemm_shapes, coopmat_plan
from vkumd.compiler.kernels.limits import RESIDUAL_BEFORE, RESIDUAL_NONE
from vkumd.compiler.launch import Launch, Operand
from vkumd.compiler.push import PushLayout
from vkumd.compiler.registry import Kernel, Variant, effective_caps, register
from vkumd.errors import VkumdValueError
from vkumd.vk.caps import DeviceCaps

# The GEMM's push constants, then the convolution's geometry (the CONV block of gemm.comp).
CONV_GEMM_PUSH = PushLayout(
    *(f"{m.name}:{m.type}" for m in GEMM_PUSH.members), "conv_h:u32", "conv_w:u32",
    "conv_ow:u32", "conv_kh:u32", "conv_kw:u32", "conv_sy:u32", "conv_sx:u32", "conv_dy:u32",
    "conv_dx:u32", "conv_pt:i32", "conv_pl:i32", "conv_groups:u32")
# The variants, as ``matmul`` names them (no packing: B is never stored).
CONV_GEMM_VARIANTS = ("lanes", "shared", "coopmat")
_FLAG_RESIDUAL, _FLAG_BIAS_ROW, _FLAG_RESIDUAL_FIRST = 2, 8, 16


def _coopmat_shape_listed(caps: DeviceCaps) -> bool:
    return bool(coopmat_gemm_shapes(caps)) and "coopmat" in effective_caps(caps)


def available_conv_gemm_variants(caps: DeviceCaps, dtype: str) -> list[str]:
    """The variants the implicit GEMM can run for ``dtype`` on ``caps`` (what tests iterate
    over); empty when the device's push-constant block is too small for the geometry."""
    if caps.max_push_constants_size < CONV_GEMM_PUSH.size:
        return []
    names = ["lanes", "shared"]
    if dtype == "float16" and caps.storage_16bit and _coopmat_shape_listed(caps) and \
            "coopmat" in gemm_choice.available_variants(caps, "float16"):
        names.append("coopmat")
    return names


def _variants(caps: DeviceCaps) -> list[Variant]:
    """Every variant the planner may build on ``caps`` (for ``vkumd compile --all``)."""
    out: list[Variant] = []
    for dtype, code in CONV_CODES.items():
        if code != "F32" and not caps.storage_16bit:
            continue
        for name in available_conv_gemm_variants(caps, dtype):
            if name == "lanes":
                out += [_conv(lanes_variant(caps, code, wide_a, 0)) for wide_a in (0, 1)]
            elif name == "shared":
                out.append(_conv(shared_variant(caps, code)))
            else:
                out.append(_conv(coopmat_plan(caps, None).variant))
    return out


def _conv(variant: Variant, nhwc: bool = False) -> Variant:
    return {**variant, "CONV": 2 if nhwc else 1}


CONV_GEMM = register(Kernel(
    name="conv_gemm",
    source="gemm.comp",
    buffers=5,
    push=CONV_GEMM_PUSH,
    defines={**GEMM.defines, "CONV": (1, 2)},
    spec_constants=GEMM.spec_constants,
    variants=_variants,
    one_subgroup=GEMM.one_subgroup,
))


@dataclass(frozen=True)
class ConvGemmProblem:
    """One convolution as the implicit GEMM sees it.

    Attributes:
        dtype: ``float32`` or ``float16``.
        x_shape: the input ``[n, c_in, h, w]``.
        w_shape: the weights ``[c_out, c_in / groups, kh, kw]``.
        out_hw: the output's height and width.
        stride, dilation: (vertical, horizontal).
        pads: (top, left); the bottom and right pads only shape ``out_hw``.
        groups: the channel groups.
        bias: whether a ``[c_out]`` bias is given.
        epilogue: activation code, its two parameters and the residual mode.
        aligned_w: whether the weights' address is 16-byte aligned (wide A loads).
        nhwc: the input is stored ``[n, h, w, c_in]`` and the weights
            ``[c_out, kh, kw, cin_g]`` (the layout measurement of docs/vision.md; the output
            stays NCHW). The shapes above are still given in NCHW order.
    """

    dtype: str
    x_shape: tuple[int, int, int, int]
    w_shape: tuple[int, int, int, int]
    out_hw: tuple[int, int]
    stride: tuple[int, int]
    dilation: tuple[int, int]
    pads: tuple[int, int]
    groups: int
    bias: bool
    epilogue: Epilogue
    aligned_w: bool = True
    nhwc: bool = False

    @property
    def gemm(self) -> GemmShape:
        """Each group's GEMM: ``cout_g x pixels x (cin_g * kh * kw)``, batched over the
        images and groups (B is never aligned: its loads are gathers)."""
        n, _, _, _ = self.x_shape
        c_out, cin_g, kh, kw = self.w_shape
        return GemmShape(c_out // self.groups, self.out_hw[0] * self.out_hw[1],
                         cin_g * kh * kw, aligned_a=self.aligned_w, aligned_b=False,
                         aligned16_a=self.aligned_w, aligned16_b=False,
                         batch=n * self.groups)


def choose_conv_gemm(caps: DeviceCaps, problem: ConvGemmProblem) -> str:
    """The variant for ``problem`` on ``caps``, as :func:`~vkumd.compiler.kernels.gemm_choice.
    choose_variant` picks the GEMM's: cooperative matrices for float16 on a GPU that lists
    them, shared-memory tiles on other GPUs, the lanes path on CPU drivers."""
    names = available_conv_gemm_variants(caps, problem.dtype)
    if "coopmat" in names and (caps.device_type != "cpu" or gemm_choice.COOPMAT_ON_CPU):
        return "coopmat"
    return "shared" if caps.device_type in ("discrete", "integrated") else "lanes"


@functools.lru_cache(maxsize=1024)
def conv_gemm_plan(caps: DeviceCaps, problem: ConvGemmProblem, force: str | None = None
                   ) -> ConvGemmLaunchPlan:
    """The implicit-GEMM launches of a convolution.

    Args:
        force: a name from :data:`CONV_GEMM_VARIANTS` instead of :func:`choose_conv_gemm`'s.

    Raises:
        VkumdValueError: ``force`` is not a variant this device and dtype have; a tensor past
            the kernel's 32-bit indexing; a grid past the device's limits.
    """
    n, c_in, h, w = problem.x_shape
    c_out = problem.w_shape[0]
    check_indexing("conv2d", x=n * c_in * h * w,
                   out=n * c_out * problem.out_hw[0] * problem.out_hw[1])
    available = available_conv_gemm_variants(caps, problem.dtype)
    name = force or choose_conv_gemm(caps, problem)
    if name not in available:
        have = ", ".join(available) or "none (its push-constant block is too small)"
        raise VkumdValueError(f"conv2d: implicit-GEMM variant {name!r} is not available for "
                              f"{problem.dtype} on {caps.name}; available: {have}")
    shape = problem.gemm
    code = CONV_CODES[problem.dtype]
    if name == "lanes":
        wide_a = int(shape.aligned_a and shape.k % WORD_ELEMENTS[code] == 0)
        variant = lanes_variant(caps, code, wide_a, 0)
        tile = (variant["TM"], lanes_tile_n(caps, variant))
    elif name == "shared":
        variant = shared_variant(caps, code)
        tile = (variant["TM"], variant["TN"])
    else:
        plan = coopmat_plan(caps, shape)
        variant = {**plan.variant, "B_T": 0, "B_VEC": 0}
        tile = (plan.tile_m, plan.tile_n)
    tiles = (-(-shape.m // tile[0]), -(-shape.n // tile[1]))
    limits = caps.max_workgroup_count
    if tiles[0] > limits[0] or tiles[1] > limits[1] or limits[2] < problem.groups:
        raise VkumdValueError(f"conv2d: a {shape.m}x{shape.n} output per group needs "
                              f"{tiles[0]}x{tiles[1]}x{problem.groups} workgroups, more than "
                              f"{caps.name} dispatches ({tuple(limits)}); split the image")
    program = CONV_GEMM.specialize(_conv(variant, problem.nhwc))
    return ConvGemmLaunchPlan(caps, problem, name, program, tiles)


@dataclass(frozen=True)
class ConvGemmLaunchPlan:
    """The launches of one implicit-GEMM convolution (a
    :class:`~vkumd.compiler.launch.LaunchPlan`).

    Operands, in order: x, w, bias, out ``[n, c_out, *out_hw]``, residual (of out's shape);
    None for an absent bias or residual.

    Attributes:
        caps: the device planned for.
        problem: the convolution.
        name: the variant (of :data:`CONV_GEMM_VARIANTS`).
        program: the kernel variant launched.
        tiles: workgroups along the output channels and pixels of one group.
        scratch: none.
    """

    caps: DeviceCaps
    problem: ConvGemmProblem
    name: str
    program: Any
    tiles: tuple[int, int]
    scratch: tuple[int, ...] = ()

    def launches(self, operands: Sequence[Operand | None],
                 scratch: Sequence[Operand] = ()) -> list[Launch]:
        """The launches for these operands (one per ``maxComputeWorkGroupCount[2]`` batch
        entries, each starting at a whole image)."""
        x, w, bias, out, residual = operands
        assert x is not None and w is not None and out is not None and out.binding is not None
        p = self.problem
        s = p.gemm
        n, c_in, h, wd = p.x_shape
        _, _, kh, kw = p.w_shape
        act, p0, p1, mode = p.epilogue
        flags = ((_FLAG_BIAS_ROW if bias is not None else 0)
                 | (_FLAG_RESIDUAL if mode != RESIDUAL_NONE else 0)
                 | (_FLAG_RESIDUAL_FIRST if mode == RESIDUAL_BEFORE else 0))
        esize = 4 if p.dtype == "float32" else 2
        # NCHW: one group of one image; NHWC: one image (the kernel adds the group's channels).
        b_batch = c_in * h * wd if p.nhwc else c_in // p.groups * h * wd
        b_entries = p.groups if p.nhwc else 1
        out_binding = out.binding
        buffers = tuple(t.binding if t is not None and t.binding is not None else out_binding
                        for t in (w, x, out, bias, residual))
        entries = n * p.groups
        step = self.caps.max_workgroup_count[2] // p.groups * p.groups
        launches = []
        for first in range(0, entries, step):
            push = CONV_GEMM_PUSH.pack(
                w.address, x.address + first // b_entries * b_batch * esize,
                out.address + first * s.m * s.n * esize,
                bias.address if bias is not None else 0,
                residual.address + first * s.m * s.n * esize if residual is not None else 0,
                s.m, s.n, s.k, s.k, 1, 0, 0, s.m * s.k, b_batch, s.m * s.n, 1.0, 0.0, act,
                flags, 0, s.n, p0, p1, s.m, h, wd, p.out_hw[1], kh, kw, *p.stride,
                *p.dilation, *p.pads, p.groups)
            launches.append(Launch(self.program, buffers, push,
                                   (*self.tiles, min(step, entries - first)), (2,)))
        return launches
