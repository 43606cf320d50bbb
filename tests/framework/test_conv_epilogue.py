"""``ops.conv2d``'s epilogue (bias, activation, residual) on every path the planner has
(the 1x1 GEMM, im2col + GEMM, the grouped batched GEMM, the blocked im2col, split-K, the
direct and the depthwise kernels), each forced, against the float64 pixelwise convolution of
test_conv.py followed by the epilogue written out here, on odd shapes with poisoned outputs;
and its bad inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest
from test_conv import force_direct, force_path, pixelwise
from transformer_checks import assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.compiler.kernels import conv as conv_kernels
from vkumd.compiler.kernels import gemm_plan as gemm_plan_module
from vkumd.compiler.kernels.conv_route import conv_route
from vkumd.compiler.kernels.limits import EPILOGUE_ACTIVATIONS
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.opset import conv as conv_op
from vkumd.vk.caps import DeviceCaps


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


# Each activation's float64 definition, with its parameters.
ACTS = {
    None: lambda v, p: v,
    "relu": lambda v, p: np.maximum(v, 0.0),
    "gelu": lambda v, p: v * 0.5 * (1.0 + np.vectorize(math.erf)(v / np.sqrt(2))),
    "gelu_tanh": lambda v, p: 0.5 * v * (1.0 + np.tanh(np.sqrt(2 / np.pi)
                                                       * (v + 0.044715 * v ** 3))),
    "silu": lambda v, p: v * _sigmoid(v),
    "sigmoid": lambda v, p: _sigmoid(v),
    "hardswish": lambda v, p: v * np.clip(v / 6.0 + 0.5, 0.0, 1.0),
    "clip": lambda v, p: np.minimum(np.maximum(v, p[0]), p[1]),
    "leaky_relu": lambda v, p: np.where(v >= 0, v, p[0] * v),
    "hard_sigmoid": lambda v, p: np.clip(p[0] * v + p[1], 0.0, 1.0),
}
PARAMS = {"clip": (-0.5, 0.75), "leaky_relu": (0.125,), "hard_sigmoid": (0.3, 0.4)}


def epilogue64(y: np.ndarray, residual: np.ndarray | None, act: str | None,
               params: tuple[float, ...], first: bool) -> np.ndarray:
    """``act(y + residual)`` or ``act(y) + residual``, in float64."""
    if residual is not None and first:
        y = y + residual
    y = ACTS[act](y, params)
    return y + residual if residual is not None and not first else y


def run_case(ctx, dtype: str, shape, c_out: int, kernel, stride, pads, groups: int,
             act: str | None, residual: str, has_bias: bool = True) -> None:
    """One convolution with its epilogue against the float64 reference; ``residual`` is
    "none", "after" or "before"."""
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    w = sample(rng, dtype, (c_out, shape[1] // groups, *kernel), scale=0.3)
    bias = sample(rng, dtype, (c_out,)) if has_bias else None
    plain = pixelwise(x, w, bias, stride, (1, 1), pads, groups)
    res = None if residual == "none" else sample(rng, dtype, plain.shape)
    params = PARAMS.get(act, ())
    want = epilogue64(plain, res, act, params, residual == "before")
    out = poisoned(ctx, want.shape, dtype)
    got = ops.conv2d(tensor(ctx, x, dtype), tensor(ctx, w, dtype),
                     None if bias is None else tensor(ctx, bias, dtype),
                     None if res is None else tensor(ctx, res, dtype), stride=stride,
                     pads=pads, groups=groups, activation=act, activation_params=params,
                     residual_first=residual == "before", out=out)
    assert got is out
    what = f"{dtype} {shape}->{c_out} {kernel} groups {groups} {act} residual {residual}"
    assert_close(got.numpy().astype(np.float64), want, dtype, what)
    record = conv_op.conv2d_reference(x, w, bias, stride, (1, 1), pads, groups, res, act,
                                      params, residual == "before")
    assert_close(record, want, "float32", f"the record's reference: {what}")


# (x shape, c_out, kernel, stride, pads, groups): one case per path the planner takes.
PATHS = {
    "gemm": ((2, 5, 7, 9), 7, (1, 1), (1, 1), (0, 0, 0, 0), 1),
    "im2col": ((2, 3, 9, 11), 5, (3, 3), (2, 1), (1, 0, 2, 1), 1),
    "grouped": ((2, 6, 7, 9), 16, (3, 3), (1, 1), (1, 1, 1, 1), 2),
    "grouped_pointwise": ((1, 9, 5, 7), 24, (1, 1), (1, 1), (0, 0, 0, 0), 3),
    "depthwise": ((2, 6, 9, 11), 6, (3, 3), (1, 1), (1, 1, 1, 1), 6),
    "depthwise_quads": ((1, 5, 9, 16), 5, (5, 5), (2, 1), (2, 2, 1, 2), 5),
    "direct": ((2, 4, 9, 7), 8, (3, 2), (1, 2), (0, 1, 1, 0), 2),
    "blocked": ((1, 7, 10, 9), 5, (3, 2), (1, 2), (1, 0, 2, 1), 1),
    "split_k": ((1, 16, 5, 3), 6, (3, 3), (1, 1), (1, 1, 1, 1), 1),
    "implicit": ((2, 6, 9, 11), 16, (3, 2), (2, 1), (1, 0, 2, 1), 2),
}
COMBOS = [("relu", "none"), ("clip", "after"), ("hardswish", "before"),
          ("leaky_relu", "after"), (None, "before"), ("silu", "none")]


def force(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    """Route the convolutions to ``path`` where the planner would not choose it."""
    if path == "direct":
        force_direct(monkeypatch)
    elif path in ("im2col", "grouped", "blocked", "split_k"):
        force_path(monkeypatch, "im2col")
    if path == "blocked":
        monkeypatch.setattr(conv_kernels, "IM2COL_MAX_BYTES", 3000)
    elif path == "split_k":
        monkeypatch.setattr(gemm_plan_module, "SPLIT_K_UNDERFILL", 0)
        monkeypatch.setattr(gemm_plan_module, "SPLIT_K_MIN_K", 64)
        monkeypatch.setattr(gemm_plan_module, "SPLIT_K_MIN_SLICE", 32)


def chosen_path(caps: DeviceCaps, path: str) -> None:
    """Check that the case reaches the path it is named for (on ``caps``)."""
    shape, c_out, kernel, stride, pads, groups = PATHS[path]
    w_shape = (c_out, shape[1] // groups, *kernel)
    out_hw = ((shape[2] + pads[0] + pads[2] - kernel[0]) // stride[0] + 1,
              (shape[3] + pads[1] + pads[3] - kernel[1]) // stride[1] + 1)
    gemm = conv_kernels.conv2d_is_gemm(kernel, stride, pads, groups, c_out)
    blocks = conv_kernels.im2col_blocks(shape, w_shape, out_hw, groups, 4)
    if path in ("gemm", "grouped_pointwise"):
        assert gemm
    elif path == "blocked":
        assert blocks is not None and len(blocks) > 1
    elif path in ("depthwise", "depthwise_quads"):
        assert not gemm and blocks is None
        assert conv_kernels.depthwise_fits(shape[1], w_shape, stride, (1, 1), groups)
    elif path in ("im2col", "grouped", "split_k"):
        assert not gemm and blocks is not None and len(blocks) == 1
    elif path == "implicit":
        route = conv_route(caps, "float32", shape, w_shape, out_hw, stride, (1, 1),
                           pads, groups)
        assert route.path == "implicit"


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_applies_the_epilogue(ctx, monkeypatch: pytest.MonkeyPatch,
                                         path: str) -> None:
    """Each path, forced where needed, with activations, parameters and both residual
    orders."""
    force(monkeypatch, path)
    chosen_path(ctx.caps, path)
    if path == "split_k":
        shape, c_out, kernel, stride, pads, groups = PATHS[path]
        problem = gemm_plan_module.GemmProblem(
            gemm_plan_module.GemmShape(c_out, 15, shape[1] * 9), "float32", 4, True,
            bias=True, row_bias=True)
        assert gemm_plan_module.gemm_plan(ctx.caps, problem).splits > 1
    for act, residual in COMBOS:
        run_case(ctx, "float32", *PATHS[path], act, residual)
    run_case(ctx, "float32", *PATHS[path], "relu", "before", has_bias=False)


@pytest.mark.parametrize("act", list(EPILOGUE_ACTIVATIONS))
@pytest.mark.parametrize("path", ["gemm", "direct", "implicit"])
def test_every_activation(ctx, monkeypatch: pytest.MonkeyPatch, act: str | None,
                          path: str) -> None:
    """Every activation of the table in the GEMM's store and in the direct kernel's (the
    depthwise kernel shares the direct kernel's epilogue code)."""
    force(monkeypatch, path)
    run_case(ctx, "float32", *PATHS[path], act, "after")


@pytest.mark.parametrize("path", ["gemm", "im2col", "depthwise", "depthwise_quads", "direct",
                                  "implicit"])
def test_float16(ctx, monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    force(monkeypatch, path)
    run_case(ctx, "float16", *PATHS[path], "hardswish", "after")
    run_case(ctx, "float16", *PATHS[path], "relu", "before")


def test_default_parameters(ctx) -> None:
    """Empty parameters are the activation op's defaults (leaky_relu's 0.01)."""
    rng = np.random.default_rng()
    x = rng.standard_normal((1, 3, 5, 6)).astype(np.float32)
    w = rng.standard_normal((4, 3, 1, 1)).astype(np.float32)
    got = ops.conv2d(ctx.tensor(x), ctx.tensor(w), activation="leaky_relu").numpy()
    want = pixelwise(x, w, None, (1, 1), (1, 1), (0, 0, 0, 0), 1)
    assert_close(got.astype(np.float64), np.where(want >= 0, want, 0.01 * want), "float32")


def test_bad_epilogues(ctx) -> None:
    x = ctx.tensor(np.ones((2, 4, 6, 6), np.float32))
    w = ctx.tensor(np.ones((4, 4, 3, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.conv2d(x, w, ctx.empty((2, 4, 6, 6)))),  # bias shape
        (VkumdValueError, lambda: ops.conv2d(x, w, None, ctx.empty((2, 4, 6, 6)))),
        (VkumdValueError, lambda: ops.conv2d(x, w, None, ctx.empty((4, 4, 4)))),
        (VkumdTypeError, lambda: ops.conv2d(x, w, None,
                                            ctx.empty((2, 4, 4, 4), dtype="float16"))),
        (VkumdTypeError, lambda: ops.conv2d(x, w, None, np.ones((2, 4, 4, 4)))),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation="tanh")),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation="softmax")),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation=3)),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation="clip",
                                             activation_params=(0.0,))),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation="relu",
                                             activation_params=(1.0,))),
        (VkumdValueError, lambda: ops.conv2d(x, w, activation="leaky_relu",
                                             activation_params=(float("nan"),))),
        (VkumdTypeError, lambda: ops.conv2d(x, w, activation="leaky_relu",
                                            activation_params=("0.1",))),
        (VkumdTypeError, lambda: ops.conv2d(x, w, activation="clip", activation_params=6.0)),
        (VkumdTypeError, lambda: ops.conv2d(x, w, residual_first="yes")),
    ], "conv2d")
