"""The implicit-GEMM convolution (``shaders/gemm.comp`` with ``CONV=1``): every variant the
lane runs (lanes, shared; coopmat on the cooperative-matrix lane) against the float64
pixelwise convolution of test_conv.py and the epilogue written out in test_conv_epilogue.py,
on odd shapes (odd channels, non-square kernels, strides that do not divide the input,
dilation, asymmetric pads, groups), outputs poisoned; the launches split along the batch;
and the planner's route between the convolution paths."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import require_coopmat
from test_conv import pixelwise
from test_conv_epilogue import PARAMS, epilogue64
from transformer_checks import assert_close, poisoned, sample, tensor

from vkumd.compiler.kernels import conv_route as route_module
from vkumd.compiler.kernels.conv_gemm import (
    CONV_GEMM_VARIANTS,
    ConvGemmProblem,
    available_conv_gemm_variants,
    conv_gemm_plan,
)
from vkumd.compiler.kernels.conv_route import conv_route
from vkumd.compiler.kernels.limits import (
    EPILOGUE_ACTIVATIONS,
    RESIDUAL_AFTER,
    RESIDUAL_BEFORE,
    RESIDUAL_NONE,
)
from vkumd.errors import VkumdValueError

# (x shape, c_out, kernel, stride, dilation, pads (top, left, bottom, right), groups)
CASES = [
    ((2, 3, 11, 13), 5, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),
    ((1, 7, 10, 9), 9, (3, 2), (2, 3), (1, 1), (0, 2, 1, 0), 1),      # strides cut the input
    ((2, 5, 13, 11), 3, (2, 3), (1, 2), (2, 3), (3, 0, 0, 2), 1),     # dilation, big pads
    ((1, 6, 9, 10), 10, (3, 3), (2, 1), (1, 1), (1, 0, 2, 1), 2),     # groups
    ((3, 9, 7, 8), 6, (1, 3), (1, 1), (1, 2), (0, 1, 0, 1), 3),       # 3 groups, 1 x 3
    ((2, 4, 6, 7), 4, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 4),       # depthwise as GEMMs
    ((1, 3, 1, 23), 7, (1, 5), (1, 3), (1, 2), (0, 2, 0, 1), 1),      # 1-D as height 1
    ((1, 40, 9, 11), 37, (3, 3), (1, 1), (1, 1), (1, 1, 1, 1), 1),    # K past the tiles
]
RESIDUAL_CODES = {"none": RESIDUAL_NONE, "after": RESIDUAL_AFTER, "before": RESIDUAL_BEFORE}
COMBOS = [(None, "none"), ("relu", "after"), ("hardswish", "before"), ("clip", "after"),
          ("leaky_relu", "none")]


def variant_or_skip(ctx, variant: str, dtype: str) -> None:
    """Skip a variant the lane cannot run, with the reason (coopmat: require_coopmat's)."""
    if variant == "coopmat":
        require_coopmat(ctx)
        if dtype != "float16":
            pytest.skip("the cooperative-matrix variant takes float16")
    if variant not in available_conv_gemm_variants(ctx.caps, dtype):
        pytest.skip(f"{ctx.caps.name} cannot run the {variant} implicit GEMM for {dtype}")


def run_plan(ctx, variant: str, dtype: str, case, act: str | None = None,
             residual: str = "none", has_bias: bool = True, caps=None,
             nhwc: bool = False) -> None:
    """One convolution through the implicit GEMM's ``variant`` against float64 (``nhwc``:
    the input and weights handed over channels-last)."""
    shape, c_out, kernel, stride, dilation, pads, groups = case
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    w = sample(rng, dtype, (c_out, shape[1] // groups, *kernel), scale=0.3)
    bias = sample(rng, dtype, (c_out,)) if has_bias else None
    plain = pixelwise(x, w, bias, stride, dilation, pads, groups)
    res = None if residual == "none" else sample(rng, dtype, plain.shape)
    params = PARAMS.get(act, ())
    want = epilogue64(plain, res, act, params, residual == "before")
    p = (*params, 0.0, 0.0)
    epilogue = (EPILOGUE_ACTIVATIONS[act][0], float(np.float32(p[0])), float(np.float32(p[1])),
                RESIDUAL_CODES[residual])
    problem = ConvGemmProblem(dtype, shape, w.shape, want.shape[2:], stride, dilation,
                              pads[:2], groups, has_bias, epilogue, nhwc=nhwc)
    plan = conv_gemm_plan(caps or ctx.caps, problem, force=variant)
    out = poisoned(ctx, want.shape, dtype)
    if nhwc:
        x = np.ascontiguousarray(x.transpose(0, 2, 3, 1))
        w = np.ascontiguousarray(w.transpose(0, 2, 3, 1))
    ctx.run(plan, (tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                   None if bias is None else tensor(ctx, bias, dtype), out,
                   None if res is None else tensor(ctx, res, dtype)))
    assert_close(out.numpy().astype(np.float64), want, dtype,
                 f"{variant} {dtype} {case} {act} residual {residual}")


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float16"])
@pytest.mark.parametrize("variant", ["lanes", "shared"])
def test_matches_float64(ctx, variant: str, dtype: str, case) -> None:
    variant_or_skip(ctx, variant, dtype)
    run_plan(ctx, variant, dtype, case)


@pytest.mark.parametrize("case", CASES, ids=str)
@pytest.mark.parametrize("variant", ["lanes", "shared"])
def test_channels_last_input(ctx, variant: str, case) -> None:
    """The NHWC reading (the layout measurement's kernel), groups included."""
    variant_or_skip(ctx, variant, "float32")
    run_plan(ctx, variant, "float32", case, "relu", "before", nhwc=True)


@pytest.mark.parametrize("combo", COMBOS, ids=str)
@pytest.mark.parametrize("variant", ["lanes", "shared"])
def test_epilogue(ctx, variant: str, combo) -> None:
    """Bias (or none), activations with parameters, the residual after and before."""
    variant_or_skip(ctx, variant, "float32")
    act, residual = combo
    run_plan(ctx, variant, "float32", CASES[3], act, residual)
    run_plan(ctx, variant, "float32", CASES[1], act, residual, has_bias=False)


@pytest.mark.coopmat
@pytest.mark.parametrize("case", CASES, ids=str)
def test_coopmat_matches_float64(ctx, case) -> None:
    variant_or_skip(ctx, "coopmat", "float16")
    run_plan(ctx, "coopmat", "float16", case)


@pytest.mark.coopmat
@pytest.mark.parametrize("combo", COMBOS, ids=str)
def test_coopmat_epilogue(ctx, combo) -> None:
    variant_or_skip(ctx, "coopmat", "float16")
    run_plan(ctx, "coopmat", "float16", CASES[3], *combo)


@pytest.mark.parametrize("variant", ["lanes", "shared"])
@pytest.mark.parametrize("nhwc", [False, True])
def test_batch_split_across_launches(ctx, variant: str, nhwc: bool) -> None:
    """With few workgroups allowed along z, (image, group) entries run in several launches,
    each starting at a whole image: 3 images x 2 groups in launches of 4 and 2 entries."""
    variant_or_skip(ctx, variant, "float32")
    limits = ctx.caps.max_workgroup_count
    caps = dataclasses.replace(ctx.caps, max_workgroup_count=(limits[0], limits[1], 5))
    case = ((3, 6, 7, 9), 10, (3, 2), (1, 2), (1, 1), (1, 0, 2, 1), 2)
    problem = ConvGemmProblem("float32", case[0], (10, 3, 3, 2), (7, 4), (1, 2), (1, 1),
                              (1, 0), 2, True, (0, 0.0, 0.0, 0))
    plan = conv_gemm_plan(caps, problem, force=variant)
    assert len(plan.launches(_fake_operands())) == 2
    run_plan(ctx, variant, "float32", case, "relu", "after", caps=caps, nhwc=nhwc)


class _FakeOperand:
    binding = (None, 0, 4)
    address = 0


def _fake_operands() -> tuple:
    return (_FakeOperand(), _FakeOperand(), None, _FakeOperand(), None)


def test_unknown_or_absent_variant_is_refused(ctx) -> None:
    problem = ConvGemmProblem("float32", (1, 3, 5, 5), (4, 3, 3, 3), (3, 3), (1, 1), (1, 1),
                              (0, 0), 1, False, (0, 0.0, 0.0, 0))
    with pytest.raises(VkumdValueError, match="implicit-GEMM variant 'tiles'"):
        conv_gemm_plan(ctx.caps, problem, force="tiles")
    with pytest.raises(VkumdValueError, match="coopmat"):
        conv_gemm_plan(ctx.caps, problem, force="coopmat")  # float32: never coopmat
    assert set(available_conv_gemm_variants(ctx.caps, "float32")) <= set(CONV_GEMM_VARIANTS)


def test_route(ctx, monkeypatch: pytest.MonkeyPatch) -> None:
    """The planner's choice on a CPU driver and on a GPU (stand-in caps)."""
    cpu = dataclasses.replace(ctx.caps, device_type="cpu")
    gpu = dataclasses.replace(ctx.caps, device_type="discrete")

    def path(caps, x, w, stride=(1, 1), pads=(1, 1, 1, 1), groups=1, dtype="float32"):
        oh = (x[2] + pads[0] + pads[2] - w[2]) // stride[0] + 1
        ow = (x[3] + pads[1] + pads[3] - w[3]) // stride[1] + 1
        return conv_route(caps, dtype, x, w, (oh, ow), stride, (1, 1), pads, groups).path

    assert path(cpu, (1, 64, 56, 56), (64, 64, 1, 1), pads=(0, 0, 0, 0)) == "gemm"
    assert path(cpu, (1, 64, 56, 56), (64, 64, 3, 3)) == "implicit"
    assert path(cpu, (1, 96, 160, 160), (24, 96, 3, 3)) == "implicit"
    assert path(cpu, (1, 256, 14, 14), (256, 256, 3, 3)) == "im2col"
    assert path(gpu, (1, 256, 14, 14), (256, 256, 3, 3)) == "implicit"
    assert path(cpu, (1, 8, 9, 9), (8, 1, 3, 3), groups=8) == "depthwise"
    # Horizontal stride 2: the depthwise kernel for 3x3 and 5x5; stride 3 the direct one.
    assert path(cpu, (1, 8, 9, 9), (8, 1, 3, 3), stride=(1, 2), groups=8) == "depthwise"
    assert path(cpu, (1, 8, 11, 11), (8, 1, 5, 5), stride=(1, 2), pads=(2, 2, 2, 2),
                groups=8) == "depthwise"
    assert path(cpu, (1, 8, 11, 11), (8, 1, 5, 5), stride=(1, 3), pads=(2, 2, 2, 2),
                groups=8) == "direct"
    # Columns past the limit: the implicit GEMM instead of im2col's blocks.
    monkeypatch.setattr(route_module, "im2col_blocks", lambda *a: [(0, 9), (9, 18)])
    assert path(cpu, (1, 256, 14, 14), (256, 256, 3, 3)) == "implicit"
    with pytest.raises(VkumdValueError, match="path 'winograd' is unknown"):
        conv_route(cpu, "float32", (1, 3, 5, 5), (4, 3, 3, 3), (3, 3), (1, 1), (1, 1),
                   (0, 0, 0, 0), 1, force="winograd")
    with pytest.raises(VkumdValueError, match="the gemm path cannot take"):
        conv_route(cpu, "float32", (1, 3, 5, 5), (4, 3, 3, 3), (3, 3), (1, 1), (1, 1),
                   (0, 0, 0, 0), 1, force="gemm")
