"""The ONNX Resize, Upsample, ConvTranspose and Pad converters on single-node models against
ONNX's reference evaluator (onnxruntime where the evaluator lacks a case), bad attributes
refused with the node named, and the OCR detectors' nodes of these types importing."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402


def node_model(op: str, x_shape: tuple[int, ...], inputs: list[np.ndarray | None],
               opset: int = 19, **attrs: object) -> onnx.ModelProto:
    """One ``op`` node reading ``x`` then ``inputs`` as initializers (None: absent)."""
    names = ["x"] + [f"in{i}" if v is not None else "" for i, v in enumerate(inputs)]
    node = helper.make_node(op, names, ["y"], name="the_node", **attrs)
    inits = [numpy_helper.from_array(v, f"in{i}") for i, v in enumerate(inputs)
             if v is not None]
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", T.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(ctx, model: onnx.ModelProto, x: np.ndarray, runtime: bool = False) -> None:
    if runtime:
        ort = pytest.importorskip("onnxruntime", reason="this case is checked against "
                                  "onnxruntime (ONNX's reference evaluator lacks it)")
        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        want = session.run(None, {"x": x})[0]
    else:
        want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


F = np.float32
NO_ROI = np.zeros(0, F)
# (x shape, opset, inputs after x, attributes)
RESIZES = [
    ((1, 3, 5, 7), 12, [NO_ROI, np.array([1, 1, 2, 2], F)],
     {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
      "nearest_mode": "floor", "cubic_coeff_a": -0.75}),          # PP-OCR's and ddddocr's
    ((2, 3, 7, 9), 13, [None, np.array([1, 1, 0.6, 1.7], F)],
     {"mode": "linear"}),
    ((2, 3, 7, 9), 13, [None, None, np.array([2, 3, 11, 4], np.int64)],
     {"mode": "linear", "coordinate_transformation_mode": "align_corners"}),
    ((2, 3, 7, 9), 13, [None, None, np.array([2, 3, 3, 20], np.int64)],
     {"mode": "nearest", "coordinate_transformation_mode": "pytorch_half_pixel",
      "nearest_mode": "round_prefer_ceil"}),
    ((1, 2, 6, 5), 18, [None, None, np.array([9, 3], np.int64)],
     {"mode": "nearest", "axes": [3, 2], "nearest_mode": "ceil"}),
    ((1, 2, 6, 5), 10, [np.array([1, 1, 2, 3], F)], {"mode": "nearest"}),
    ((2, 3, 7, 9), 19, [None, np.array([1, 1, 0.6, 1.7], F)],
     {"mode": "cubic", "cubic_coeff_a": -0.5, "exclude_outside": 1}),
    ((1, 2, 5, 6), 19, [None, None, np.array([8, 3], np.int64)],
     {"mode": "cubic", "axes": [2, 3], "coordinate_transformation_mode": "align_corners"}),
    ((2, 3, 7, 9), 19, [np.array([0.1, -0.3, 0.9, 1.4], F), None,
                        np.array([5, 4], np.int64)],
     {"mode": "linear", "axes": [3, 2], "coordinate_transformation_mode": "tf_crop_and_resize",
      "extrapolation_value": -2.0}),
    ((1, 2, 5, 7), 19, [np.array([0, 0, 0.2, 0.1, 1, 1, 0.7, 0.95], F), None,
                        np.array([1, 2, 6, 3], np.int64)],
     {"mode": "cubic", "coordinate_transformation_mode": "tf_crop_and_resize"}),
    ((1, 2, 5, 7), 19, [None, None, np.array([9, 11], np.int64)],
     {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}),
    ((2, 3, 13, 11), 19, [None, np.array([1, 1, 0.45, 0.3], F)],
     {"mode": "cubic", "antialias": 1, "exclude_outside": 1}),
    ((2, 3, 13, 11), 19, [None, None, np.array([2, 3, 4, 14], np.int64)],
     {"mode": "linear", "antialias": 1, "coordinate_transformation_mode": "align_corners"}),
    ((1, 2, 5, 7), 19, [None, None, np.array([3, 4], np.int64)],
     {"mode": "nearest", "axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"}),
    ((1, 2, 6, 5), 9, [np.array([1, 1, 2, 3], F)], {"mode": "nearest"}),
]


@pytest.mark.parametrize("case", RESIZES, ids=str)
def test_resize_matches_reference(ctx, case) -> None:
    shape, opset, inputs, attrs = case
    op = "Upsample" if opset < 10 else "Resize"
    x = np.random.default_rng().standard_normal(shape).astype(F)
    # onnx's reference evaluator reads opset 10's Resize with opset 11's defaults
    # (half_pixel); onnxruntime keeps opset 10's asymmetric nearest.
    check(ctx, node_model(op, shape, inputs, opset, **attrs), x, runtime=opset == 10)


# (x shape, w shape, has bias, attributes)
CONV_TRANSPOSES = [
    ((1, 6, 5, 7), (6, 4, 2, 2), True, {"strides": [2, 2], "kernel_shape": [2, 2],
                                        "pads": [0, 0, 0, 0], "group": 1,
                                        "dilations": [1, 1]}),           # PP-OCR's
    ((2, 4, 5, 6), (4, 3, 3, 3), False, {"strides": [2, 3], "auto_pad": "SAME_UPPER"}),
    ((2, 4, 5, 6), (4, 1, 3, 2), True, {"strides": [2, 2], "group": 2,
                                        "output_shape": [12, 12]}),
    ((2, 4, 5, 6), (4, 2, 3, 3), True, {"pads": [1, 0, 2, 1], "dilations": [2, 1],
                                        "output_padding": [1, 0], "strides": [2, 1]}),
    ((3, 4, 9), (4, 5, 3), True, {"strides": [2], "pads": [1, 0]}),
]


@pytest.mark.parametrize("case", CONV_TRANSPOSES, ids=str)
def test_conv_transpose_matches_reference(ctx, case) -> None:
    x_shape, w_shape, has_bias, attrs = case
    rng = np.random.default_rng()
    inputs = [rng.standard_normal(w_shape).astype(F)]
    if has_bias:
        inputs.append(rng.standard_normal(w_shape[1] * attrs.get("group", 1)).astype(F))
    x = rng.standard_normal(x_shape).astype(F)
    # onnx 1.23's reference evaluator reshapes a grouped weight wrongly (ValueError).
    check(ctx, node_model("ConvTranspose", x_shape, inputs, 17, **attrs), x,
          runtime=attrs.get("group", 1) > 1)


# (x shape, opset, inputs after x, attributes, checked against onnxruntime)
PADS = [
    ((2, 3, 5, 7), 13, [np.array([0, 0, 1, 2, 0, 0, 3, 1], np.int64), np.array(1.5, F)],
     {"mode": "constant"}, False),
    ((2, 3, 5, 7), 13, [np.array([0, 1, 2, 3, 0, 0, 1, 4], np.int64)], {"mode": "reflect"},
     False),
    ((2, 3, 5, 7), 18, [np.array([2, 1, 3, 4], np.int64), None, np.array([2, -1], np.int64)],
     {"mode": "edge"}, False),
    ((2, 3, 5, 7), 2, [], {"mode": "constant", "pads": [0, 0, 2, 1, 0, 1, 0, 2],
                           "value": -3.0}, False),
    ((2, 3, 5, 7), 13, [np.array([0, 0, -1, 2, 0, 0, 3, -2], np.int64)],
     {"mode": "constant"}, True),                                  # negative pads crop
]


@pytest.mark.parametrize("case", PADS, ids=str)
def test_pad_matches_reference(ctx, case) -> None:
    shape, opset, inputs, attrs, runtime = case
    x = np.random.default_rng().standard_normal(shape).astype(F)
    check(ctx, node_model("Pad", shape, inputs, opset, **attrs), x, runtime)


SCALES = [NO_ROI, np.array([1, 1, 2, 2], F)]
BAD = [
    ("Resize", SCALES, {"mode": "bicubic"}, "bicubic"),
    ("Resize", SCALES, {"keep_aspect_ratio_policy": "fit"}, "keep_aspect_ratio_policy"),
    ("Resize", [np.array([0, 0.5, 0, 0, 1, 1, 1, 1], F), np.array([1, 1, 2, 2], F)],
     {"coordinate_transformation_mode": "tf_crop_and_resize"}, "channel"),
    ("Resize", SCALES, {"antialias": 1}, "antialias"),
    ("Resize", SCALES, {"coordinate_transformation_mode": "tf_crop_and_resize"},
     "coordinate_transformation_mode"),
    ("Resize", SCALES, {"nearest_mode": "even"}, "nearest_mode"),
    ("Resize", [NO_ROI, np.array([1, 2, 2, 2], F)], {}, "channel"),
    ("Resize", [NO_ROI], {}, "neither scales nor sizes"),
    ("ConvTranspose", [np.ones((4, 2, 3, 3), F)], {"auto_pad": "SAME"}, "auto_pad"),
    ("ConvTranspose", [np.ones((4, 2, 3, 3), F)], {"group": 3}, "groups"),
    ("ConvTranspose", [np.ones((4, 2, 3, 3), F)], {"kernel_shape": [2, 2]}, "kernel_shape"),
    ("ConvTranspose", [np.ones((4, 2, 3, 3), F)], {"output_padding": [3, 0]},
     "output_padding"),
    ("Pad", [np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64)], {"mode": "wrap"}, "wrap"),
    ("Pad", [np.array([0, 0, 1, 1], np.int64)], {}, "pads"),
    ("Pad", [np.array([0, 0, 8, 0, 0, 0, 0, 0], np.int64)], {"mode": "reflect"}, "reflect"),
]


@pytest.mark.parametrize("op, inputs, attrs, word", BAD, ids=[str(b[2]) for b in BAD])
def test_bad_attributes_name_the_node(ctx, op: str, inputs, attrs: dict, word: str) -> None:
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(node_model(op, (1, 4, 6, 6), inputs, 19, **attrs), ctx=ctx)
    assert "the_node" in str(info.value) and word in str(info.value)


def _package_file(package: str, *parts: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed (ci/setup.sh installs it with --no-deps)")
    return Path(spec.origin).parent.joinpath(*parts)


@pytest.mark.parametrize("package, parts", [
    ("rapidocr_onnxruntime", ("models", "ch_PP-OCRv4_det_infer.onnx")),
    ("ddddocr", ("common_det.onnx",)),
], ids=["pp_ocrv4_det", "ddddocr_det"])
def test_detector_nodes_import(package: str, parts: tuple[str, ...]) -> None:
    path = _package_file(package, *parts)
    model = onnx.load(str(path))
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for dim, size in zip(dims, (1, 3, 64, 64), strict=True):  # the sizes bound
        dim.ClearField("dim_param")
        dim.dim_value = size
    ops = {n.op_type for n in model.graph.node}
    assert "Resize" in ops
    try:
        vkumd.onnx.import_model(model)
    except UnsupportedModelError as exc:
        refused = {r.op_type for r in exc.refusals}
        assert not refused & {"Resize", "ConvTranspose", "Pad", "Upsample"}, str(exc)


@pytest.mark.parametrize("size", [(2, 3, 5, 7), (3, 1, 1, 6), (2, 2, 3, 4, 5)], ids=str)
@pytest.mark.parametrize("align", [0, 1])
def test_affine_grid(ctx, size: tuple[int, ...], align: int) -> None:
    rank = len(size) - 2
    node = helper.make_node("AffineGrid", ["x", "size"], ["y"], align_corners=align)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("x", T.FLOAT, [size[0], rank, rank + 1])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(np.array(size, np.int64), "size")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    theta = np.random.default_rng().standard_normal((size[0], rank, rank + 1)).astype(F)
    check(ctx, model, theta)


@pytest.mark.parametrize("shape, axes", [((9, 4, 3), None), ((4, 11), [0, 1]),
                                          ((5, 2), [-3, -2])], ids=str)
def test_center_crop_pad(ctx, shape: tuple[int, ...], axes: list[int] | None) -> None:
    attrs = {} if axes is None else {"axes": axes}
    model = node_model("CenterCropPad", (8, 7, 3), [np.array(shape, np.int64)], 18, **attrs)
    check(ctx, model, np.random.default_rng().standard_normal((8, 7, 3)).astype(F))
