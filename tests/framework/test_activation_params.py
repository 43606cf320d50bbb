"""The activations with parameters (clip, hard_sigmoid, leaky_relu, elu, selu, celu,
thresholded_relu, prelu) and the rest of the elementwise tail (softplus, softsign, mish, the
unary math set) beyond what test_generated_ops.py checks for every generated op: values
other than the defaults, every extreme (inf, NaN, huge, tiny) against float64, the accuracy
of each curve per element where a plain formula would lose it, fusion with neighbours.

Default parameters, every float dtype, odd shapes and poisoned outputs are
test_generated_ops.py's (it iterates the registry); the ONNX and torch frontends are
tests/frontends/test_onnx_activations.py's.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, sample, tensor

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import OPS, GraphBuilder, evaluate, run_passes

# Each op with parameters other than its defaults (clip's bounds also inverted and open).
PARAMETRIC = [
    ("clip", {"min": -0.75, "max": 1.25}), ("clip", {"min": 2.0, "max": -1.0}),
    ("clip", {"min": -math.inf, "max": 0.5}), ("clip", {"min": -0.5}),
    ("hard_sigmoid", {"alpha": 0.35, "beta": 0.4}), ("leaky_relu", {"alpha": -0.3}),
    ("leaky_relu", {"alpha": 2.5}), ("elu", {"alpha": 0.6}),
    ("selu", {"alpha": 1.3, "gamma": 0.7}), ("celu", {"alpha": 2.25}),
    ("celu", {"alpha": -2.5}), ("thresholded_relu", {"alpha": -0.4}),
    ("swish", {"alpha": 1.7}), ("swish", {"alpha": -0.5}), ("shrink", {"lambd": 0.8, "bias": 0.3}),
    ("shrink", {"lambd": 1.5, "bias": 1.5}),
]
EXTREMES = np.array([-np.inf, -1e30, -3e5, -100.0, -88.5, -20.0, -1.5, -1.0, -0.5, -1e-30,
                     -0.0, 0.0, 1e-30, 0.5, 0.9999999, 1.0, 1.0000001, 1.5, 20.0, 88.5, 100.0,
                     3e5, 1e30, np.inf, np.nan])
# The trigonometric functions are the driver's, exact in relative terms only on a period or
# so (Vulkan bounds them on [-pi, pi]): their extremes stay there, with inf and NaN.
TRIG = ("sin", "cos", "tan")
TRIG_EXTREMES = np.array([-np.inf, -3.0, -1.0, -1e-30, -0.0, 0.0, 1e-30, 0.5, 3.0, np.inf,
                          np.nan])
TAIL = sorted(name for name in ("abs", "neg", "ceil", "floor", "round", "sign", "reciprocal",
                                "log", "sin", "cos", "tan", "asin", "acos", "atan", "sinh",
                                "cosh", "asinh", "acosh", "atanh", "softplus", "softsign",
                                "mish", "clip", "hard_sigmoid", "leaky_relu", "elu", "selu",
                                "celu", "thresholded_relu", "shrink"))


def _reference(op: str, x: np.ndarray, attrs: dict | None = None) -> np.ndarray:
    return OPS[op].reference([x], OPS[op].full_attrs(attrs or {}), [x.shape])[0]


def test_every_op_is_declared() -> None:
    for name in (*TAIL, "prelu"):
        assert OPS[name].elementwise is not None and callable(getattr(vkumd.ops, name))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize(("op", "attrs"), PARAMETRIC, ids=str)
def test_parameters_other_than_the_defaults(ctx, op: str, attrs: dict, dtype: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, (5, 37), scale=3.0)
    out = poisoned(ctx, x.shape, dtype)
    got = getattr(ops, op)(tensor(ctx, x, dtype), **attrs, out=out)
    assert got is out
    assert_close(got.numpy().astype(np.float64), _reference(op, x, attrs), dtype, f"{op}")


@pytest.mark.parametrize("op", TAIL)
def test_extremes_match_float64(ctx, op: str) -> None:
    """inf, NaN, huge and tiny inputs give float64's answer rounded to float32: overflow only
    where the result overflows, NaN only where float64 has NaN, tiny results kept."""
    x = (TRIG_EXTREMES if op in TRIG else EXTREMES).astype(np.float32)
    got = getattr(ops, op)(ctx.tensor(x)).numpy()
    with np.errstate(over="ignore"):  # float64's cosh(3e5) is inf too; 1e30 ** 2 is not
        want = _reference(op, x.astype(np.float64)).astype(np.float32)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=f"{op}: NaN where")
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-37, err_msg=op)


# Ranges where a textbook formula cancels or overflows, and the per-element relative error
# each op keeps there (float32's own rounding is 6e-8).
CURVES = [
    ("log", 0.5, 2.0, 4e-7), ("log", 1e-6, 1e6, 4e-7), ("sinh", -2.0, 2.0, 4e-7),
    ("sinh", -89.4, 89.4, 4e-7), ("cosh", -89.4, 89.4, 4e-7), ("asinh", -1e6, 1e6, 4e-7),
    ("asinh", -2.0, 2.0, 4e-7), ("acosh", 1.0, 3.0, 4e-7), ("acosh", 1.0, 1e8, 4e-7),
    ("atanh", -1.0, 1.0, 4e-7), ("atan", -50.0, 50.0, 4e-7), ("asin", -1.0, 1.0, 4e-7),
    ("acos", -1.0, 1.0, 4e-7), ("softplus", -100.0, 40.0, 4e-7), ("mish", -80.0, 40.0, 1e-6),
    ("elu", -80.0, 5.0, 4e-7), ("selu", -80.0, 5.0, 4e-7), ("celu", -80.0, 5.0, 4e-7),
    ("softsign", -1e6, 1e6, 4e-7), ("sin", -3.2, 3.2, 4e-7), ("cos", -1.5, 1.5, 4e-7),
]


@pytest.mark.parametrize(("op", "low", "high", "rtol"), CURVES, ids=str)
def test_per_element_accuracy(ctx, op: str, low: float, high: float, rtol: float) -> None:
    # Every element within rtol of float64 (not a norm over the tensor): the small values
    # at the curves' ends included. The wide ranges are spaced logarithmically.
    if low > 0 and high / low > 100:
        x = np.geomspace(low, high, 4001)
    elif high - low > 200:
        x = np.sinh(np.linspace(np.arcsinh(low), np.arcsinh(high), 4001))
    else:
        x = np.linspace(low, high, 4001)
    x = x.astype(np.float32).astype(np.float64)
    got = getattr(ops, op)(ctx.tensor(x.astype(np.float32))).numpy().astype(np.float64)
    np.testing.assert_allclose(got, _reference(op, x), rtol=rtol, atol=1e-37, err_msg=op)


def test_round_is_half_to_even(ctx) -> None:
    x = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4999998, 3.5000002, 1e30, -7.5],
                 np.float32)
    np.testing.assert_array_equal(ops.round(ctx.tensor(x)).numpy(), np.round(x))


def test_clip_keeps_nan_and_inverted_bounds_give_max(ctx) -> None:
    x = np.array([np.nan, -np.inf, -3.0, 0.25, 3.0, np.inf], np.float32)
    got = ops.clip(ctx.tensor(x), min=-1.0, max=1.0).numpy()
    np.testing.assert_array_equal(got, [np.nan, -1.0, -1.0, 0.25, 1.0, 1.0])
    np.testing.assert_array_equal(ops.clip(ctx.tensor(x[1:]), min=2.0, max=-1.0).numpy(),
                                  np.full(5, -1.0, np.float32))


@pytest.mark.parametrize("dtype", FLOATS)
def test_prelu_per_channel_slope(ctx, dtype: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, (2, 5, 3, 7), scale=3.0)
    slope = sample(rng, dtype, (5, 1, 1))
    out = poisoned(ctx, x.shape, dtype)
    got = ops.prelu(tensor(ctx, x, dtype), tensor(ctx, slope, dtype), out=out)
    assert_close(got.numpy().astype(np.float64), np.where(x >= 0, x, slope * x), dtype, "prelu")


def test_a_chain_fuses_into_one_kernel(ctx) -> None:
    """leaky_relu, clip and prelu between other elementwise ops: one generated kernel, two
    clips with different bounds two different steps, the result float64's."""
    b = GraphBuilder("chain")
    x = b.input("x", (6, 23))
    s = b.input("s", (23,))
    y = b.op("leaky_relu", b.mul(x, 1.5), alpha=0.2)
    y = b.op("clip", b.op("prelu", y, s), min=-0.5, max=0.75)
    b.output(b.op("clip", b.add(y, 0.5), min=0.0))
    graph = b.build()
    fused = run_passes(graph)
    assert [n.op for n in fused.nodes] == ["fused_elementwise"]
    program = fused.nodes[0].attrs["program"]
    assert [s[2:] for s in program if s[0] == "clip"] == [(-0.5, 0.75), (0.0, math.inf)]
    rng = np.random.default_rng()
    data = {"x": rng.standard_normal((6, 23)).astype(np.float32),
            "s": rng.standard_normal(23).astype(np.float32)}
    got = CompiledGraph(graph, ctx)(**data)[0]
    assert_close(np.asarray(got, np.float64), evaluate(graph, data)[0], "float32", "chain")


def test_bad_parameters(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3), np.float32))
    program = (("leaky_relu", 0),)  # a numeric step without its parameter
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.leaky_relu(x, alpha="0.1")),
        (VkumdValueError, lambda: ops.leaky_relu(x, alpha=math.nan)),
        (VkumdValueError, lambda: ops.elu(x, alpha=math.inf)),
        (VkumdValueError, lambda: ops.selu(x, gamma=1e300)),
        (VkumdValueError, lambda: ops.celu(x, alpha=0.0)),
        (VkumdValueError, lambda: ops.clip(x, min=math.nan)),
        (VkumdValueError, lambda: ops.clip(x, max=-1e39)),
        (VkumdTypeError, lambda: ops.clip(ctx.tensor(np.ones(3, np.int32)), min=0.0)),
        (VkumdValueError, lambda: ops.prelu(x, ctx.tensor(np.ones((4, 3), np.float32)))),
        (VkumdValueError, lambda: ops.prelu(x, ctx.tensor(np.ones(2, np.float32)))),
        (VkumdTypeError, lambda: ops.prelu(x, ctx.tensor(np.ones(3, np.float16)))),
        (VkumdTypeError, lambda: ops.abs(ctx.tensor(np.ones(3, np.int32)))),
        (VkumdValueError, lambda: ops.fused_elementwise([x], program)),
        (VkumdTypeError, lambda: ops.fused_elementwise([x], (("elu", 0, "one"),))),
    ])


def test_tensor_methods_eager_and_traced(ctx) -> None:
    """``clamp``/``clip`` and the parameterless ops are methods of tensors and of traced
    values alike."""
    x = np.array([-3.0, -0.5, 0.2, 7.0, -0.0], np.float32)
    t = ctx.tensor(x)
    np.testing.assert_array_equal(t.clamp(0, 6).numpy(), np.clip(x, 0, 6))
    np.testing.assert_array_equal(t.clip(max=0.1).numpy(), np.minimum(x, 0.1))
    np.testing.assert_array_equal(t.abs().numpy(), np.abs(x))
    np.testing.assert_array_equal(t.floor().numpy(), np.floor(x))
    compiled = vkumd.compile(lambda v: v.clamp(-1.0, 1.0).abs().neg(), {"v": x}, ctx=ctx)
    assert compiled.executor == "compiled"
    np.testing.assert_array_equal(compiled(v=x).numpy(), -np.abs(np.clip(x, -1, 1)))
