"""The ONNX converters of LRN, Dropout (every opset form, as the inference identity) and the
variadic Sum and Mean, on single-node models against float64 numpy (and onnxruntime); the
forms vkumd refuses (training) refused with the node named; and a Gemm whose weight is past
Vulkan's 128 MiB binding floor split into column blocks."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.framework.frontends.onnx import ops_linalg  # noqa: E402


def model(nodes: list, inputs: dict[str, tuple[int, ...]], outputs: list[str], opset: int,
          inits: dict[str, np.ndarray] | None = None, types: dict[str, int] | None = None
          ) -> onnx.ModelProto:
    """A model of ``nodes``: float inputs, float outputs unless ``types`` says otherwise."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(k, T.FLOAT, list(v))
                     for k, v in inputs.items()],
        [helper.make_tensor_value_info(n, (types or {}).get(n, T.FLOAT), None)
         for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def lrn_float64(x: np.ndarray, size: int, alpha: float = 1e-4, beta: float = 0.75,
                bias: float = 1.0) -> np.ndarray:
    """ONNX's LRN over axis 1 in float64 (floor((size-1)/2) channels below, ceil above)."""
    x = x.astype(np.float64)
    squares = np.empty_like(x)
    for c in range(x.shape[1]):
        lo, hi = max(0, c - (size - 1) // 2), c + int(np.ceil((size - 1) / 2)) + 1
        squares[:, c] = (x[:, lo:hi] ** 2).sum(axis=1)
    return x / (bias + alpha / size * squares) ** beta


@pytest.mark.parametrize("shape,attrs", [
    ((2, 7, 11, 13), {"size": 5, "alpha": 1e-2, "beta": 0.75, "bias": 2.0}),
    ((1, 6, 9), {"size": 4}),
    ((3, 5, 4, 3, 2), {"size": 3, "alpha": 0.5, "beta": 1.5}),
], ids=str)
def test_lrn_matches_float64_and_onnxruntime(ctx, shape, attrs) -> None:
    m = model([helper.make_node("LRN", ["x"], ["y"], **attrs)], {"x": shape}, ["y"], 13)
    x = np.random.default_rng().standard_normal(shape).astype(np.float32) * 3
    got = vkumd.onnx.load(m, ctx=ctx)(x=x)["y"]
    want = lrn_float64(x, **attrs)
    assert got.shape == want.shape and rel_error(got, want) < 1e-6
    if len(shape) == 4:
        # Not ONNX's ReferenceEvaluator: its LRN loops over the batch, not the channels
        # (onnx 1.23), so it is right only where N == C, as in ONNX's own node tests.
        ort = pytest.importorskip("onnxruntime", reason="the 4-D case is also checked "
                                  "against onnxruntime")
        session = ort.InferenceSession(m.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        np.testing.assert_allclose(got, session.run(None, {"x": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 10, 12, 13, 22])
def test_dropout_is_the_identity_with_a_mask_of_ones(ctx, opset: int) -> None:
    inputs = ["x"]
    inits: dict[str, np.ndarray] = {}
    attrs = {"ratio": 0.3} if opset < 12 else {"seed": 5}
    if opset >= 12:
        inputs += ["ratio", "training_mode"]
        inits = {"ratio": np.array(0.3, np.float32), "training_mode": np.array(False)}
    m = model([helper.make_node("Dropout", inputs, ["y", "mask"], **attrs),
               helper.make_node("Relu", ["y"], ["z"])], {"x": (3, 5, 7)}, ["z", "mask"],
              opset, inits, {"mask": T.BOOL if opset >= 10 else T.FLOAT})
    x = np.random.default_rng().standard_normal((3, 5, 7)).astype(np.float32)
    out = vkumd.onnx.load(m, ctx=ctx)(x=x)
    np.testing.assert_array_equal(out["z"], np.maximum(x, 0))
    assert out["mask"].shape == x.shape and np.all(out["mask"] == 1)
    assert out["mask"].dtype == (np.bool_ if opset >= 10 else np.float32)


@pytest.mark.parametrize("training", ["constant", "input", "is_test"])
def test_dropout_training_is_refused_naming_the_node(ctx, training: str) -> None:
    if training == "is_test":  # before opset 7, is_test defaults to 0: training
        node = helper.make_node("Dropout", ["x"], ["y"], name="drop_node")
        m = model([node], {"x": (2, 3)}, ["y"], 6)
    else:
        node = helper.make_node("Dropout", ["x", "", "t"], ["y"], name="drop_node")
        inits = {"t": np.array(True)} if training == "constant" else {}
        m = model([node], {"x": (2, 3)}, ["y"], 13, inits)
        if training == "input":
            m.graph.input.append(helper.make_tensor_value_info("t", T.BOOL, []))
    with pytest.raises(VkumdError, match="drop_node.*(training|is_test)"):
        loaded = vkumd.onnx.load(m, ctx=ctx)
        # A run-time training_mode is imported per value: a true one refuses at the call.
        assert training == "input"
        loaded(x=np.ones((2, 3), np.float32), t=np.array(True))


@pytest.mark.parametrize("op", ["Sum", "Mean"])
@pytest.mark.parametrize("shapes", [
    [(3, 5, 7)],
    [(3, 5, 7), (5, 7)],
    [(3, 1, 7), (1, 5, 1), (7,), (3, 5, 7)],
], ids=str)
def test_sum_and_mean_broadcast(ctx, op: str, shapes: list[tuple[int, ...]]) -> None:
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([helper.make_node(op, names, ["y"])], dict(zip(names, shapes, strict=True)),
              ["y"], 13)
    rng = np.random.default_rng()
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes,
                                                                       strict=True)}
    want = sum(np.broadcast_arrays(*(v.astype(np.float64) for v in feed.values())))
    if op == "Mean":
        want = want / len(shapes)
    got = vkumd.onnx.load(m, ctx=ctx)(**feed)["y"]
    assert got.shape == want.shape and rel_error(got, want) < 1e-6


def test_sum_of_known_inputs_folds(ctx) -> None:
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), np.float32([1, 2, 3])
    m = model([helper.make_node("Sum", ["a", "b"], ["s"]),
               helper.make_node("Add", ["x", "s"], ["y"])], {"x": (2, 3)}, ["y"], 13,
              {"a": a, "b": b})
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(vkumd.onnx.load(m, ctx=ctx)(x=x)["y"], x + a + b)


@pytest.mark.parametrize("form", ["gemm_bias_trans_b", "gemm_no_bias", "matmul_3d"])
def test_weight_past_the_binding_floor_is_split(ctx, monkeypatch, form: str) -> None:
    # A small floor stands in for 128 MiB: 29 columns of 13 floats in blocks of 7 (3 of 7, 8).
    monkeypatch.setattr(ops_linalg, "BINDING_FLOOR", 7 * 13 * 4 + 4)
    rng = np.random.default_rng()
    w = rng.standard_normal((13, 29)).astype(np.float32)  # [K, N]
    bias = rng.standard_normal(29).astype(np.float32)
    x_shape = (2, 5, 13) if form == "matmul_3d" else (5, 13)
    if form == "gemm_bias_trans_b":
        node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
        inits = {"w": np.ascontiguousarray(w.T), "b": bias}
    elif form == "gemm_no_bias":
        node, inits = helper.make_node("Gemm", ["x", "w"], ["y"]), {"w": w}
    else:
        node, inits = helper.make_node("MatMul", ["x", "w"], ["y"]), {"w": w}
    m = model([node], {"x": x_shape}, ["y"], 13, inits)
    loaded = vkumd.onnx.load(m, ctx=ctx)
    assert sum(n.op == "matmul" for n in loaded.graph.nodes) == 5
    x = rng.standard_normal(x_shape).astype(np.float32)
    want = x.astype(np.float64) @ w.astype(np.float64)
    if form == "gemm_bias_trans_b":
        want = want + bias
    got = loaded(x=x)["y"]
    assert got.shape == want.shape and rel_error(got, want) < 1e-6


@pytest.mark.parametrize("op", ["Max", "Min"])
def test_max_and_min_broadcast_and_propagate_nan(ctx, op: str) -> None:
    shapes = [(3, 1, 7), (5, 1), (3, 5, 7)]
    names = [f"x{i}" for i in range(len(shapes))]
    m = model([helper.make_node(op, names, ["y"])], dict(zip(names, shapes, strict=True)),
              ["y"], 13)
    rng = np.random.default_rng()
    feed = {n: rng.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes,
                                                                       strict=True)}
    feed["x1"][2, 0] = np.nan  # a NaN in any input gives NaN, as numpy's maximum
    fn = np.maximum if op == "Max" else np.minimum
    want = fn(fn(feed["x0"], feed["x1"]), feed["x2"])
    got = vkumd.onnx.load(m, ctx=ctx)(**feed)["y"]
    assert np.isnan(want).sum() == 3 * 7
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("shape", [(2, 2), (3, 2, 2), (2, 5, 3, 3), (4, 1, 1)], ids=str)
def test_det_matches_float64(ctx, shape: tuple[int, ...]) -> None:
    m = model([helper.make_node("Det", ["x"], ["y"])], {"x": shape}, ["y"], 22)
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    got = vkumd.onnx.load(m, ctx=ctx)(x=x)["y"]
    want = np.linalg.det(x.astype(np.float64))
    assert got.shape == want.shape
    assert rel_error(got, want) < 1e-5


def test_det_of_a_large_matrix_is_refused() -> None:
    m = model([helper.make_node("Det", ["x"], ["y"])], {"x": (4, 4)}, ["y"], 22)
    with pytest.raises(VkumdError, match="composes them up to 3x3"):
        vkumd.onnx.load(m)
