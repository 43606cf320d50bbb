"""The ONNX LSTM, GRU and RNN converters on single-node models against onnxruntime (the peer):
every direction, both layouts, initial states, peepholes, clip, input_forget, both
linear_before_reset, any subset of outputs; bad nodes refused with the node and attribute
named; and ddddocr's CNN + bidirectional LSTM captcha model against onnxruntime."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402

_INPUTS = {"LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
           "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
           "RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h")}


def recurrent_model(op: str, weights: dict[str, np.ndarray], x_shape: tuple[int, ...],
                    outputs: tuple[str, ...], **attrs: object) -> onnx.ModelProto:
    """One ``op`` node reading input X and the initializers ``weights`` (by ONNX name)."""
    names = [n if n == "X" or n in weights else "" for n in _INPUTS[op]]
    while names[-1] == "":
        names.pop()
    node = helper.make_node(op, names, list(outputs), name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", T.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outputs if o],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])


def _weights(rng, op: str, dirs: int, batch: int, inp: int, hid: int, full: bool
             ) -> dict[str, np.ndarray]:
    g = {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
    f = lambda *s: (rng.standard_normal(s) * 0.5).astype(np.float32)  # noqa: E731
    weights = {"W": f(dirs, g * hid, inp), "R": f(dirs, g * hid, hid)}
    if full:
        weights.update(B=f(dirs, 2 * g * hid), initial_h=f(dirs, batch, hid))
        if op == "LSTM":
            weights.update(initial_c=f(dirs, batch, hid), P=f(dirs, 3 * hid))
    return weights


# (op, direction, full, layout, extra attributes, outputs)
CASES = [
    ("LSTM", "forward", True, 0, {"clip": 0.8}, ("Y", "Y_h", "Y_c")),
    ("LSTM", "bidirectional", True, 0, {"input_forget": 1}, ("Y", "", "Y_c")),
    ("LSTM", "reverse", False, 1, {}, ("Y", "Y_h")),
    ("LSTM", "bidirectional", True, 1, {"clip": 1.5}, ("", "Y_h", "Y_c")),
    ("GRU", "forward", True, 0, {"clip": 0.7}, ("Y", "Y_h")),
    ("GRU", "bidirectional", True, 0, {"linear_before_reset": 1}, ("Y", "Y_h")),
    ("GRU", "reverse", True, 1, {}, ("Y",)),
    ("GRU", "bidirectional", False, 1, {"linear_before_reset": 1,
                                        "activations": ["Sigmoid", "Tanh"] * 2}, ("Y", "Y_h")),
    ("RNN", "forward", True, 0, {"activations": ["Relu"]}, ("Y", "Y_h")),
    ("RNN", "bidirectional", True, 1, {"activations": ["Sigmoid", "Tanh"], "clip": 1.2},
     ("Y", "Y_h")),
    ("RNN", "reverse", False, 0, {}, ("", "Y_h")),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_matches_onnxruntime(ctx, case) -> None:
    ort = pytest.importorskip("onnxruntime", reason="these cases are checked against "
                              "onnxruntime, which is not installed")
    op, direction, full, layout, attrs, outputs = case
    dirs = 2 if direction == "bidirectional" else 1
    seq, batch, inp, hid = 5, 3, 7, 9
    rng = np.random.default_rng()
    weights = _weights(rng, op, dirs, batch, inp, hid, full)
    x = rng.standard_normal((seq, batch, inp)).astype(np.float32)
    # onnxruntime refuses layout 1: the peer runs the layout-0 model on the same data.
    peer = recurrent_model(op, weights, x.shape, outputs, hidden_size=hid,
                           direction=direction, **attrs)
    session = ort.InferenceSession(peer.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, {"X": x})
    if layout == 1:
        x = np.ascontiguousarray(x.transpose(1, 0, 2))
        want = [w.transpose(2, 0, 1, 3) if w.ndim == 4 else w.transpose(1, 0, 2)
                for w in want]
        for k in ("initial_h", "initial_c"):
            if k in weights:
                weights[k] = np.ascontiguousarray(weights[k].transpose(1, 0, 2))
    model = recurrent_model(op, weights, x.shape, outputs, hidden_size=hid,
                            direction=direction, layout=layout, **attrs)
    got = vkumd.onnx.load(model, ctx=ctx)(X=x)
    named = [o for o in outputs if o]
    assert len(want) == len(named)
    for name, w in zip(named, want, strict=True):
        assert got[name].shape == w.shape, name
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("change,fragment", [
    ({"W": np.ones((1, 20, 3), np.float32)}, "w has shape"),
    ({"hidden_size": 6}, "hidden_size=6"),
    ({"activations": ["Relu", "Tanh", "Tanh"]}, "activations"),
    ({"activation_alpha": [0.5]}, "activation_alpha"),
    ({"layout": 2}, "layout"),
    ({"direction": "both"}, "direction='both'"),
    ({"sequence_lens": np.array([4, 2, 1], np.int32)}, "sequence_lens has shape"),
])
def test_bad_nodes_name_the_node(ctx, change: dict, fragment: str) -> None:
    weights = {"W": np.ones((1, 20, 4), np.float32), "R": np.ones((1, 20, 5), np.float32)}
    attrs = {"hidden_size": 5}
    for k, v in change.items():
        (weights if isinstance(v, np.ndarray) else attrs)[k] = v
    model = recurrent_model("LSTM", weights, (4, 2, 4), ("Y",), **attrs)
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(model, ctx=ctx)
    assert "the_node" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("change,fragment", [
    ({"activations": ["Elu"]}, "activations=['elu']"),
    ({"activations": ["Tanh", "Relu"]}, "per direction (1 here)"),
    ({"activation_alpha": [0.5]}, "activation_alpha"),
])
def test_bad_rnn_nodes_name_the_node(ctx, change: dict, fragment: str) -> None:
    weights = {"W": np.ones((1, 5, 4), np.float32), "R": np.ones((1, 5, 5), np.float32)}
    model = recurrent_model("RNN", weights, (4, 2, 4), ("Y",), hidden_size=5, **change)
    with pytest.raises(VkumdError) as info:
        vkumd.onnx.load(model, ctx=ctx)
    assert "the_node" in str(info.value)
    assert fragment in str(info.value)


@pytest.mark.parametrize("op,direction", [("LSTM", "bidirectional"), ("GRU", "reverse"),
                                          ("LSTM", "forward")])
def test_sequence_lens_matches_onnxruntime(ctx, op: str, direction: str) -> None:
    ort = pytest.importorskip("onnxruntime", reason="checked against onnxruntime, which is "
                              "not installed")
    rng = np.random.default_rng()
    dirs = 2 if direction == "bidirectional" else 1
    weights = _weights(rng, op, dirs, 3, 4, 5, True)
    weights["sequence_lens"] = np.array([5, 2, 4], np.int32)
    outputs = ("Y", "Y_h", "Y_c") if op == "LSTM" else ("Y", "Y_h")
    model = recurrent_model(op, weights, (5, 3, 4), outputs, hidden_size=5,
                            direction=direction)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = vkumd.onnx.load(model, ctx=ctx)(X=x)
    for name, w in zip(outputs, want, strict=True):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-5, err_msg=name)


def test_uniform_constant_sequence_lens_is_the_plain_layer(ctx) -> None:
    ort = pytest.importorskip("onnxruntime", reason="checked against onnxruntime, which is "
                              "not installed")
    rng = np.random.default_rng()
    weights = _weights(rng, "GRU", 1, 2, 3, 4, True)
    weights["sequence_lens"] = np.array([6, 6], np.int32)
    model = recurrent_model("GRU", weights, (6, 2, 3), ("Y", "Y_h"), hidden_size=4)
    x = rng.standard_normal((6, 2, 3)).astype(np.float32)
    want = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, {"X": x})
    got = vkumd.onnx.load(model, ctx=ctx)(X=x)
    np.testing.assert_allclose(got["Y"], want[0], rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["Y_h"], want[1], rtol=1e-4, atol=1e-5)


def _ddddocr_model() -> str:
    spec = importlib.util.find_spec("ddddocr")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("ddddocr is not installed (ci/setup.sh installs it with --no-deps)")
    path = os.path.join(list(spec.submodule_search_locations)[0], "common.onnx")
    if not os.path.exists(path):
        pytest.skip(f"ddddocr's common.onnx is not at {path}")
    return path


def test_ddddocr_matches_onnxruntime(ctx) -> None:
    ort = pytest.importorskip("onnxruntime", reason="checked against onnxruntime, which is "
                              "not installed")
    path = _ddddocr_model()
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    x = np.random.default_rng().random((1, 1, 64, 97), dtype=np.float32)
    want = session.run(None, {"input1": x})[0]
    # The width is symbolic (image_width) and the first convolution has stride 2, which
    # vkumd's symbolic sizes do not take: the width is fixed in the file, as a caller would.
    model = onnx.load(path)
    model.graph.input[0].type.tensor_type.shape.dim[3].dim_value = 97
    got = np.asarray(vkumd.onnx.load(model, ctx=ctx)(input1=x)["387"], np.float64)
    assert got.shape == want.shape == (13, 1, 8210)  # 13 steps of the bidirectional LSTM
    assert np.linalg.norm(got - want) / np.linalg.norm(want.astype(np.float64)) < 1e-4
    assert np.abs(got - want).max() < 1e-4 * np.abs(want).max()
