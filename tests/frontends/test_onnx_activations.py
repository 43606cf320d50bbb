"""The ONNX converters of the elementwise tail (Clip in both opset forms, HardSigmoid,
LeakyRelu, PRelu, Elu, Selu, Celu, ThresholdedRelu, Softplus, Softsign, Mish, the unary math
set, IsInf) against ONNX's reference evaluator, and their bad nodes refused with the node
named. ONNX's own node tests of these operators run in test_onnx_conformance.py."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.framework.graph import run_passes  # noqa: E402

SHAPE = (2, 5, 3, 7)


def _model(nodes: list, inputs: dict[str, tuple[int, ...]], weights: dict[str, np.ndarray],
           opset: int = 18, out_type: int = T.FLOAT) -> onnx.ModelProto:
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, T.FLOAT, list(s))
                     for k, s in inputs.items()],
        [helper.make_tensor_value_info("y", out_type, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return model


def _check(ctx, model: onnx.ModelProto, feed: dict[str, np.ndarray], rtol: float = 2e-6
           ) -> np.ndarray:
    want = ReferenceEvaluator(model).run(None, feed)[0]
    got = np.asarray(vkumd.onnx.load(model, ctx=ctx)(**feed)["y"])
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=rtol, atol=1e-6)
    return got


def test_a_mobilenet_style_chain(ctx) -> None:
    """Conv-free MobileNetV3/PP-OCR pieces: HardSigmoid gating, Clip as ReLU6 (opset 13 inputs,
    one absent), PRelu with a per-channel slope, LeakyRelu; one fused kernel on the device."""
    rng = np.random.default_rng()
    slope = rng.standard_normal((5, 1, 1)).astype(np.float32)
    nodes = [
        helper.make_node("HardSigmoid", ["x"], ["g"], alpha=0.25, beta=0.45),
        helper.make_node("Mul", ["x", "g"], ["m"]),
        helper.make_node("Clip", ["m", "lo", ""], ["c"]),
        helper.make_node("Clip", ["c", "", "hi"], ["c6"]),
        helper.make_node("PRelu", ["c6", "slope"], ["p"]),
        helper.make_node("LeakyRelu", ["p"], ["y"], alpha=0.3),
    ]
    model = _model(nodes, {"x": SHAPE}, {"slope": slope, "lo": np.array(-1.5, np.float32),
                                         "hi": np.array(6.0, np.float32)})
    x = (rng.standard_normal(SHAPE) * 5).astype(np.float32)
    _check(ctx, model, {"x": x})
    graph = vkumd.onnx.load(model, ctx=ctx).graph
    assert [n.op for n in run_passes(graph).nodes] == ["fused_elementwise"]


def test_clip_opset_6_attributes(ctx) -> None:
    model = _model([helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.25)],
                   {"x": (4, 9)}, {}, opset=6)
    _check(ctx, model, {"x": np.random.default_rng().standard_normal((4, 9)).astype(np.float32)})


def test_clip_run_time_bounds(ctx) -> None:
    """A bound fed at run time (not a constant) is a compare and a select."""
    model = _model([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
                   {"x": (3, 11), "lo": (), "hi": ()}, {})
    x = np.random.default_rng().standard_normal((3, 11)).astype(np.float32)
    for lo, hi in ((-0.5, 0.5), (0.75, -0.25)):  # inverted: every element is max
        _check(ctx, model, {"x": x, "lo": np.float32(lo), "hi": np.float32(hi)})


PARAMETRIC = [("Elu", {"alpha": 0.7}), ("Selu", {"alpha": 1.5, "gamma": 0.9}),
              ("Celu", {"alpha": 1.7}), ("ThresholdedRelu", {"alpha": 0.4}),
              ("HardSigmoid", {}), ("LeakyRelu", {}), ("Elu", {}), ("Selu", {})]
UNARY = ["Abs", "Ceil", "Floor", "Round", "Sign", "Log", "Sin", "Cos", "Tan", "Asin", "Acos",
         "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh", "Softplus", "Softsign", "Mish",
         "Reciprocal", "Neg"]


@pytest.mark.parametrize(("op", "attrs"), PARAMETRIC, ids=str)
def test_activation_attributes(ctx, op: str, attrs: dict) -> None:
    model = _model([helper.make_node(op, ["x"], ["y"], **attrs)], {"x": (6, 13)}, {})
    x = (np.random.default_rng().standard_normal((6, 13)) * 3).astype(np.float32)
    _check(ctx, model, {"x": x})


@pytest.mark.parametrize("op", UNARY)
def test_unary_math(ctx, op: str) -> None:
    model = _model([helper.make_node(op, ["x"], ["y"])], {"x": (5, 17)}, {})
    x = np.random.default_rng().uniform(-0.95, 0.95, (5, 17)).astype(np.float32)
    if op in ("Log", "Acosh"):
        x = np.abs(x) + (1.0 if op == "Acosh" else 0.05)
    _check(ctx, model, {"x": x})


@pytest.mark.parametrize(("positive", "negative"), [(1, 1), (1, 0), (0, 1), (0, 0)])
def test_is_inf(ctx, positive: int, negative: int) -> None:
    model = _model([helper.make_node("IsInf", ["x"], ["y"], detect_positive=positive,
                                     detect_negative=negative)], {"x": (7,)}, {},
                   out_type=T.BOOL)
    x = np.array([-np.inf, -1e38, -1.0, 0.0, np.nan, 3e38, np.inf], np.float32)
    _check(ctx, model, {"x": x})


def test_bad_nodes_are_refused_with_the_node_named(ctx) -> None:
    ints = helper.make_tensor_value_info("x", T.INT32, [4])
    cases = [
        _model([helper.make_node("Clip", ["x", "lo"], ["y"], name="the_node")],
               {"x": (4,), "lo": (2,)}, {}),
        _model([helper.make_node("PRelu", ["x", "s"], ["y"], name="the_node")], {"x": (4, 3)},
               {"s": np.ones((4, 1, 1), np.float32)}),
        _model([helper.make_node("Celu", ["x"], ["y"], name="the_node", alpha=0.0)],
               {"x": (4,)}, {}),
    ]
    model = helper.make_model(helper.make_graph(
        [helper.make_node("LeakyRelu", ["x"], ["y"], name="the_node")], "g", [ints],
        [helper.make_tensor_value_info("y", T.INT32, None)]),
        opset_imports=[helper.make_opsetid("", 17)])
    reasons = ["must hold a single number", "does not broadcast to x's shape",
               "nonzero alpha", "float tensors only"]
    for bad, reason in zip([*cases, model], reasons, strict=True):
        with pytest.raises(VkumdError, match="the_node") as info:
            vkumd.onnx.load(bad, ctx=ctx)
        assert reason in str(info.value)
