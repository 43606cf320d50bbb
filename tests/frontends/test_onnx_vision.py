"""The ONNX vision converters (Conv) on single-node models against ONNX's reference
evaluator: 1-D and 2-D, every auto_pad, strides, dilations, groups, asymmetric pads; and bad
attributes refused with the node named."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402


def single_node(op: str, x_shape: tuple[int, ...], weights: dict[str, np.ndarray],
                **attrs: object) -> onnx.ModelProto:
    """A model of one ``op`` node reading input ``x`` and the initializers ``weights``."""
    node = helper.make_node(op, ["x", *weights], ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def run_both(ctx, model: onnx.ModelProto, x: np.ndarray, runtime: bool = False
             ) -> tuple[np.ndarray, np.ndarray]:
    """vkumd's output and ONNX's reference evaluator's (onnxruntime's when ``runtime``)."""
    if runtime:
        ort = pytest.importorskip("onnxruntime", reason="this case is checked against "
                                  "onnxruntime (ONNX's reference evaluator is wrong there)")
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
    else:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)["y"]
    return got, want


# (x shape, w shape, has bias, attributes)
CONVS = [
    ((2, 3, 11, 13), (5, 3, 3, 3), True, {"pads": [1, 2, 0, 1]}),
    ((2, 3, 11, 13), (4, 3, 5, 5), False, {"auto_pad": "SAME_UPPER", "strides": [2, 2]}),
    ((2, 3, 11, 13), (4, 3, 4, 2), True, {"auto_pad": "SAME_LOWER", "strides": [2, 1]}),
    ((1, 4, 9, 10), (4, 2, 3, 3), True, {"auto_pad": "VALID", "group": 2,
                                         "dilations": [2, 1]}),
    ((2, 6, 11, 13), (6, 1, 3, 3), True, {"group": 6, "strides": [2, 1],
                                          "pads": [1, 1, 1, 1], "kernel_shape": [3, 3]}),
    ((3, 4, 17), (5, 4, 3), True, {"pads": [2, 1], "strides": [2]}),
    ((3, 4, 17), (6, 2, 4), False, {"auto_pad": "SAME_LOWER", "group": 2,
                                    "dilations": [2]}),
]


@pytest.mark.parametrize("case", CONVS, ids=str)
def test_conv_matches_reference(ctx, case) -> None:
    x_shape, w_shape, has_bias, attrs = case
    rng = np.random.default_rng()
    weights = {"w": rng.standard_normal(w_shape).astype(np.float32)}
    if has_bias:
        weights["b"] = rng.standard_normal(w_shape[0]).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    got, want = run_both(ctx, single_node("Conv", x_shape, weights, **attrs), x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("attrs", [
    {"group": 4},                       # does not divide 6 channels
    {"auto_pad": "SAME"},               # not an ONNX mode
    {"pads": [-1, 0, 0, 0]},
    {"kernel_shape": [5, 5]},           # the weight is 3x3
    {"strides": [1, 1, 1]},
])
def test_conv_bad_attributes_name_the_node(ctx, attrs: dict) -> None:
    w = np.ones((6, 3, 3, 3), np.float32) if "group" not in attrs else np.ones((4, 1, 3, 3),
                                                                                 np.float32)
    model = single_node("Conv", (1, 6, 8, 8), {"w": w}, **attrs)
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(model, ctx=ctx)
    assert "the_node" in str(info.value)


POOLS = [
    ("MaxPool", (2, 3, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                 "auto_pad": "SAME_LOWER"}),
    ("MaxPool", (2, 3, 11, 13), {"kernel_shape": [5, 5], "pads": [2, 2, 2, 2]}),
    ("MaxPool", (2, 3, 11, 13), {"kernel_shape": [3, 2], "strides": [2, 2], "ceil_mode": 1,
                                 "pads": [1, 0, 0, 1]}),
    ("AveragePool", (2, 3, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 1],
                                     "pads": [1, 0, 2, 1], "count_include_pad": 1}),
    ("AveragePool", (2, 3, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                     "pads": [1, 1, 1, 1], "ceil_mode": 1}),
    ("AveragePool", (3, 4, 17), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ("LpPool", (2, 3, 11, 13), {"kernel_shape": [3, 2], "strides": [2, 1], "p": 3,
                                "pads": [1, 0, 2, 1]}),
    ("LpPool", (3, 4, 17), {"kernel_shape": [4], "strides": [3], "auto_pad": "SAME_UPPER"}),
    ("LpPool", (2, 2, 5, 7, 6), {"kernel_shape": [2, 3, 2], "p": 1}),
    ("MaxPool", (2, 2, 7, 9, 6), {"kernel_shape": [3, 2, 3], "strides": [2, 2, 1],
                                  "pads": [1, 0, 1, 1, 1, 0], "dilations": [1, 2, 1]}),
    ("AveragePool", (1, 3, 6, 7, 9), {"kernel_shape": [3, 3, 2], "strides": [2, 1, 2],
                                      "pads": [1, 1, 0, 1, 0, 1], "count_include_pad": 1}),
    ("AveragePool", (1, 3, 6, 7, 9), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2],
                                      "pads": [0, 1, 1, 1, 0, 1]}),
    ("MaxPool", (1, 2, 7, 8, 9), {"kernel_shape": [2, 3, 2], "strides": [2, 2, 2],
                                  "ceil_mode": 1}),
    ("AveragePool", (1, 2, 7, 8, 9), {"kernel_shape": [3, 3, 2], "strides": [2, 2, 2],
                                      "pads": [1, 0, 1, 1, 1, 0], "ceil_mode": 1,
                                      "count_include_pad": 1}),
    ("GlobalAveragePool", (2, 5, 11, 13), {}),
    ("GlobalAveragePool", (2, 5, 9), {}),
    ("GlobalMaxPool", (2, 5, 11, 13), {}),
    ("GlobalMaxPool", (3, 4, 1, 7), {}),  # onnx 1.23's reference drops C of a 3-D input
]


@pytest.mark.parametrize("case", POOLS, ids=str)
def test_pool_matches_reference(ctx, case) -> None:
    op, x_shape, attrs = case
    x = np.random.default_rng().standard_normal(x_shape).astype(np.float32)
    # onnx 1.23's reference MaxPool gives SAME_LOWER at stride 2 one window too few per axis
    # (11 -> 5, not ceil(11 / 2) = 6 as the spec and onnxruntime say).
    runtime = op == "MaxPool" and attrs.get("auto_pad") == "SAME_LOWER"
    got, want = run_both(ctx, single_node(op, x_shape, {}, **attrs), x, runtime)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, attrs", [
    ("MaxPool", {"kernel_shape": [2, 2], "auto_pad": "SAME"}),
    ("MaxPool", {"strides": [2, 2]}),                              # no kernel_shape
    ("MaxPool", {"kernel_shape": [2, 2], "count_include_pad": 1}),
    ("AveragePool", {"kernel_shape": [2, 2], "pads": [2, 0, 0, 0]}),  # pad >= kernel
    ("AveragePool", {"kernel_shape": [9, 2]}),                     # larger than the input
    ("MaxPool", {"kernel_shape": [2, 2], "p": 2}),                   # LpPool's attribute
    ("LpPool", {"kernel_shape": [2, 2], "count_include_pad": 1}),
])
def test_pool_bad_attributes_name_the_node(ctx, op: str, attrs: dict) -> None:
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(single_node(op, (1, 2, 8, 8), {}, **attrs), ctx=ctx)
    assert "the_node" in str(info.value)


@pytest.mark.parametrize("x_shape", [(2, 3, 11, 13), (2, 5, 9)], ids=str)
def test_batch_normalization_matches_reference(ctx, x_shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    c = x_shape[1]
    weights = {name: rng.standard_normal(c).astype(np.float32)
               for name in ("scale", "bias", "mean")}
    weights["var"] = (rng.standard_normal(c) ** 2 + 0.1).astype(np.float32)
    x = rng.standard_normal(x_shape).astype(np.float32)
    got, want = run_both(ctx, single_node("BatchNormalization", x_shape, weights,
                                          epsilon=1e-3), x)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_batch_normalization_training_is_refused(ctx) -> None:
    weights = {name: np.ones(3, np.float32) for name in ("scale", "bias", "mean", "var")}
    model = single_node("BatchNormalization", (1, 3, 4, 4), weights, training_mode=1)
    with pytest.raises(VkumdError, match="the_node.*training_mode"):
        vkumd.onnx.load(model, ctx=ctx)


@pytest.mark.parametrize("x_shape,attrs", [
    ((2, 3, 11, 13), {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1]}),
    ((2, 3, 11, 13), {"kernel_shape": [3, 3], "strides": [2, 1], "ceil_mode": 1,
                      "storage_order": 1}),
    ((3, 2, 17), {"kernel_shape": [4], "strides": [3], "dilations": [2]}),
], ids=str)
def test_max_pool_indices_match_onnxruntime(ctx, x_shape, attrs: dict) -> None:
    ort = pytest.importorskip("onnxruntime", reason="MaxPool's Indices are checked against "
                              "onnxruntime, which is not installed")
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, None),
         helper.make_tensor_value_info("i", T.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    # Few distinct values, so windows hold ties that the first maximum must win.
    x = np.random.default_rng().integers(-3, 4, x_shape).astype(np.float32)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want_y, want_i = session.run(None, {"x": x})
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)
    np.testing.assert_array_equal(got["y"], want_y)
    np.testing.assert_array_equal(np.asarray(got["i"], np.int64), want_i)


def test_max_pool_indices_of_3d_pooling_are_refused(ctx) -> None:
    node = helper.make_node("MaxPool", ["x"], ["y", "i"], name="the_node",
                            kernel_shape=[2, 2, 2])
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [1, 2, 4, 4, 4])],
        [helper.make_tensor_value_info("y", T.FLOAT, None),
         helper.make_tensor_value_info("i", T.INT64, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(model, ctx=ctx)
    assert "the_node" in str(info.value) and "Indices" in str(info.value)


@pytest.mark.parametrize("attrs", [{}, {"strides": [2, 3]}, {"pads": [1, 0, 2, 1]},
                                   {"dilations": [2, 1], "strides": [1, 2]}], ids=str)
def test_col2im(ctx, attrs: dict) -> None:
    image, block = np.array([7, 9], np.int64), np.array([3, 2], np.int64)
    strides, dil = attrs.get("strides", [1, 1]), attrs.get("dilations", [1, 1])
    pads = attrs.get("pads", [0, 0, 0, 0])
    counts = [(image[i] + pads[i] + pads[2 + i] - dil[i] * (block[i] - 1) - 1) // strides[i]
              + 1 for i in (0, 1)]
    shape = (2, 2 * 6, int(counts[0] * counts[1]))
    model = single_node("Col2Im", shape, {"image": image, "block": block}, **attrs)
    model.opset_import[0].version = 18
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    got, want = run_both(ctx, model, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("output_shape", [None, [2, 3, 9, 10]], ids=str)
def test_max_unpool_of_max_pool_indices(ctx, output_shape: list[int] | None) -> None:
    pool = helper.make_node("MaxPool", ["x"], ["p", "i"], kernel_shape=[2, 3], strides=[2, 3])
    ins = ["p", "i"] + (["shape"] if output_shape is not None else [])
    unpool = helper.make_node("MaxUnpool", ins, ["y"], kernel_shape=[2, 3], strides=[2, 3])
    inits = ([] if output_shape is None else
             [numpy_helper.from_array(np.array(output_shape, np.int64), "shape")])
    graph = helper.make_graph(
        [pool, unpool], "g", [helper.make_tensor_value_info("x", T.FLOAT, [2, 3, 8, 9])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got, want = run_both(ctx, model, np.random.default_rng().standard_normal(
        (2, 3, 8, 9)).astype(np.float32))
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
