"""The ONNX importer: a hand-built model against ONNX's reference evaluator and onnxruntime,
the one error that lists every unsupported node, and symbolic dimensions."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402
from onnx_models import Net, device_model, ir_only_model  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.graph import evaluate  # noqa: E402
from vkumd.framework.graph.dims import Dim  # noqa: E402
from vkumd.framework.graph.passes import FUSION  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5


def _feeds(batch: int = 2, seq: int = 3) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "ids": rng.integers(0, 16, (batch, seq)).astype(np.int64)}


def _check(got: dict[str, np.ndarray], want: list[np.ndarray], names: list[str]) -> None:
    for name, w in zip(names, want, strict=True):
        assert got[name].dtype == w.dtype, name
        np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=name)


def test_device_model_matches_reference_evaluator(ctx: object) -> None:
    model = device_model()
    feeds = _feeds()
    want = ReferenceEvaluator(model).run(None, feeds)
    loaded = vkumd.onnx.load(model, ctx=ctx)
    _check(loaded(**feeds), want, loaded.output_names)


def test_device_model_matches_onnxruntime(ctx: object) -> None:
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is optional")
    model = device_model()
    feeds = _feeds(batch=1, seq=5)
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, feeds)
    loaded = vkumd.onnx.load(model, ctx=ctx)
    _check(loaded(**feeds), want, loaded.output_names)


def test_shape_subgraphs_and_erf_gelu_fold_at_import(monkeypatch) -> None:
    # What the importer itself makes, before fusion folds gelu and layer_norm into others.
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", ",".join(FUSION))
    graph = vkumd.onnx.load(device_model()).graph
    ops = [n.op for n in graph.nodes]
    assert "gelu" in ops and "erf" not in ops  # the five-node erf GELU is one gelu
    assert "embedding" in ops and "layer_norm" in ops
    reshapes = [n for n in graph.nodes if n.op == "reshape"]
    # Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to a reshape to [batch, seq, 2, 4]
    assert any(tuple(str(d) for d in n.outputs[0].shape) == ("batch", "seq", "2", "4")
               for n in reshapes)


def test_ir_only_ops_import_and_evaluate_in_the_ir(monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", ",".join(FUSION))  # where would fuse
    model = ir_only_model()
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    graph = vkumd.onnx.load(model).graph
    ops = {n.op for n in graph.nodes}
    assert {"exp", "sqrt", "tanh", "sigmoid", "erf", "where"} <= ops
    got = evaluate(graph, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "one-node-each"])
def test_math_ops_and_where_run_on_the_device(ctx: object, fused: bool, monkeypatch) -> None:
    # Exp, Sqrt, Tanh, Sigmoid, Erf and Where: generated elementwise kernels, fused into one
    # program or (passes off) each its own one-step program.
    if not fused:
        monkeypatch.setenv("VKUMD_DISABLE_PASSES", ",".join(FUSION))
    model = ir_only_model()
    x = np.random.default_rng().standard_normal((3, 4)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"x": x})[0]
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)
    got = got[next(iter(got))] if isinstance(got, dict) else got
    np.testing.assert_allclose(np.asarray(got), want, rtol=RTOL, atol=ATOL)


def test_a_where_on_integers_is_exact_past_float32s_integers(ctx: object) -> None:
    n = Net()
    c = helper.make_tensor_value_info("c", T.BOOL, [4])
    a = helper.make_tensor_value_info("a", T.INT32, [4])
    b = helper.make_tensor_value_info("b", T.INT32, [4])
    loaded = vkumd.onnx.load(n.model([c, a, b], [n.op("Where", "c", "a", "b")], [T.INT32]),
                             ctx=ctx)
    cond = np.array([1, 0, 1, 0], bool)
    x = np.array([2**24 + 1, -7, 2**31 - 1, 5], np.int32)
    y = np.array([3, -(2**31), 11, 2**24 + 3], np.int32)
    (got,) = loaded(c=cond, a=x, b=y).values()
    np.testing.assert_array_equal(got, np.where(cond, x, y))


def test_an_op_with_no_kernel_for_the_type_says_so_at_the_call(ctx: object) -> None:
    n = Net()
    a = helper.make_tensor_value_info("a", T.INT8, [4])
    loaded = vkumd.onnx.load(n.model([a], [n.op("Neg", "a")], [T.INT8]), ctx=ctx)
    with pytest.raises(vkumd.onnx.NoDeviceKernel, match="no device kernel for int8"):
        loaded(a=np.arange(4, dtype=np.int8))


def test_one_error_lists_every_unsupported_node() -> None:
    n = Net()
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", T.FLOAT, [2, 4])
    ints = helper.make_tensor_value_info("i", T.INT32, [2, 4])
    conv = n.op("Conv", "x", n.weight(4, 4))
    power = n.op("Pow", conv, "y")  # downstream of a refused node: not listed twice
    odd = n.op("Pow", "i", "y")  # an integer base with a float exponent
    cum = n.op("ReduceMean", "x", axes=[-1], keepdims=1, bogus=3)
    out = n.op("Add", n.op("Add", power, odd), cum)
    dbl = helper.make_tensor_value_info("d", T.STRING, [2])
    with pytest.raises(vkumd.onnx.UnsupportedModelError) as info:
        vkumd.onnx.load(n.model([x, y, ints, dbl], [out]))
    refused = {(r.op_type, r.name) for r in info.value.refusals}
    assert refused == {("graph input", "d"), ("Conv", "conv_2"), ("Pow", "pow_4"),
                       ("ReduceMean", "reducemean_5")}
    text = str(info.value)
    for word in ("4 node(s)", "Conv", "conv_2", "pow_4", "exponent", "bogus", "STRING"):
        assert word in text


def test_symbolic_dims_and_dynamic_override(ctx: object) -> None:
    model = device_model()
    loaded = vkumd.onnx.load(model, ctx=ctx)
    x = loaded.graph.inputs[0]
    assert [str(d) for d in x.shape] == ["batch", "seq", "8"]
    assert all(isinstance(d, Dim) for d in x.shape[:2])
    renamed = vkumd.onnx.load(model, ctx=ctx, dynamic={"x": {0: "b", 1: "s"},
                                                       "ids": {0: "b", 1: "s"}})
    assert [str(d) for d in renamed.graph.inputs[0].shape] == ["b", "s", "8"]
    for batch, seq in ((1, 2), (3, 4)):
        feeds = _feeds(batch, seq)
        want = ReferenceEvaluator(model).run(None, feeds)
        _check(renamed(**feeds), want, renamed.output_names)


def test_shape_inputs_specialize_the_model(ctx: object) -> None:
    n = Net()
    x = helper.make_tensor_value_info("x", T.FLOAT, [2, 6])
    shape = helper.make_tensor_value_info("shape", T.INT64, [2])
    model = n.model([x, shape], [n.op("Relu", n.op("Reshape", "x", "shape"))])
    loaded = vkumd.onnx.load(model, ctx=ctx)
    assert loaded.specialized_on == ["shape"] and loaded.graph is None
    data = np.arange(12, dtype=np.float32).reshape(2, 6) - 6
    for target in ((3, 4), (4, 3), (3, 4)):
        got = loaded(x=data, shape=np.array(target, np.int64))
        np.testing.assert_array_equal(got[loaded.output_names[0]],
                                      np.maximum(data.reshape(target), 0))
    assert len(loaded._cache) == 2
