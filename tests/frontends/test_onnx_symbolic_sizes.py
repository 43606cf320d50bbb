"""An ONNX conv net imported once with symbolic image sizes (``dynamic={"x": {2: "32*h"}}``)
runs pages of several sizes against onnxruntime, its memory poisoned before each call; sizes
the declaration does not take are refused; the OCR pipelines' vkumd backend imports a
network once for every padded page size, and falls back to one import per shape, saying
why, when an op refuses the symbolic size."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")
ort = pytest.importorskip("onnxruntime", reason="the symbolic imports are checked against "
                          "onnxruntime")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdValueError  # noqa: E402
from vkumd.framework.frontends.onnx.run import recording  # noqa: E402
from vkumd.framework.graph import sym  # noqa: E402
from vkumd.framework.models.vision_backend import (  # noqa: E402
    OnnxruntimeBackend,
    VkumdBackend,
    symbolic_signature,
)
from vkumd.testing.numerics import rel_error  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "framework" / "graph"))
from execute_checks import poison  # noqa: E402

TOL = 1e-5


def strided_net(rng: np.random.Generator, last_pool_stride: int = 2) -> onnx.ModelProto:
    """Conv (stride 2, bias) -> Relu -> depthwise Conv (SAME_UPPER, stride 2) -> MaxPool
    (stride 2, ceil mode) -> 1x1 Conv -> AveragePool (``last_pool_stride``) over
    ``x: [1, 3, H, W]``."""
    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.4).astype(np.float32)

    k = last_pool_stride
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], strides=[2, 2], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], strides=[2, 2], group=6,
                         auto_pad="SAME_UPPER"),
        helper.make_node("MaxPool", ["c2"], ["p1"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 0, 1, 0], ceil_mode=1),
        helper.make_node("Conv", ["p1", "w3"], ["c3"]),
        helper.make_node("AveragePool", ["c3"], ["y"], kernel_shape=[k, k], strides=[k, k]),
    ]
    weights = {"w1": w(6, 3, 3, 3), "b1": w(6), "w2": w(6, 1, 5, 3), "w3": w(5, 6, 1, 1)}
    graph = helper.make_graph(
        nodes, "strided", [helper.make_tensor_value_info("x", T.FLOAT, [1, 3, "H", "W"])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [numpy_helper.from_array(v, k) for k, v in weights.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def test_one_import_runs_three_page_sizes_against_onnxruntime(ctx) -> None:
    rng = np.random.default_rng()
    model = strided_net(rng)
    loaded = vkumd.onnx.load(model, ctx=ctx, dynamic={"x": {2: "32*h", 3: 32 * sym("w")}})
    graph = loaded.graph
    assert [str(d) for d in graph.outputs[0].shape[2:]] == ["2*h", "2*w"]
    for h, w in ((1, 2), (3, 1), (2, 5)):
        x = rng.standard_normal((1, 3, 32 * h, 32 * w)).astype(np.float32)
        if recording(graph) is not None:
            poison(recording(graph))
        got = loaded(x=x)["y"]
        want = onnxruntime(model, x)
        assert got.shape == want.shape == (1, 5, 2 * h, 2 * w)
        assert rel_error(got, want) < TOL, (h, w)
    assert loaded.graph is graph  # one import, one compiled graph
    assert recording(graph).recorded == 3
    with pytest.raises(VkumdValueError, match=r"axis 2 .*is 100, which is not 32\*h for any "
                       r"whole h; pad it to a multiple of 32"):
        loaded(x=np.zeros((1, 3, 100, 64), np.float32))
    x = rng.standard_normal((1, 3, 64, 64)).astype(np.float32)
    assert rel_error(loaded(x=x)["y"], onnxruntime(model, x)) < TOL  # still usable


def test_a_bare_symbol_at_stride_two_is_refused_with_how_to_declare_it() -> None:
    model = strided_net(np.random.default_rng())
    with pytest.raises(vkumd.onnx.UnsupportedModelError,
                       match="declare the size a multiple of the stride"):
        vkumd.onnx.load(model)  # H and W are the file's own dim_params
    for bad in ("h*h", 2.5, sym("h") * sym("w")):
        with pytest.raises(VkumdValueError, match=r"dynamic\['x'\]\[2\]"):
            vkumd.onnx.load(model, dynamic={"x": {2: bad, 3: "32*w"}})
    with pytest.raises(vkumd.onnx.UnsupportedModelError, match="stride 2 does not divide"):
        vkumd.onnx.load(model, dynamic={"x": {2: "8*h", 3: "32*w"}})  # 4 halvings: 8*h ends odd


def test_the_vision_backend_imports_once_for_every_padded_size(ctx, tmp_path: Path) -> None:
    rng = np.random.default_rng()
    path = tmp_path / "net.onnx"
    onnx.save(strided_net(rng), str(path))
    backend = VkumdBackend(ctx=ctx)
    run = backend.load(path)
    reference = OnnxruntimeBackend().load(path)
    for shape in ((1, 3, 64, 96), (1, 3, 160, 32)):
        x = rng.standard_normal(shape).astype(np.float32)
        assert rel_error(run(x), reference(x)) < TOL, shape
    assert list(backend.imports.values()) == ["symbolic (1, 3, '32*h', '32*w')"]
    assert symbolic_signature((1, 3, 48, 320)) == (1, 3, 48, "32*w")


def test_the_vision_backend_falls_back_per_shape_saying_why(ctx, tmp_path: Path) -> None:
    rng = np.random.default_rng()
    path = tmp_path / "net3.onnx"
    onnx.save(strided_net(rng, last_pool_stride=3), str(path))  # 32*h at stride 3
    backend = VkumdBackend(ctx=ctx)
    run = backend.load(path)
    reference = OnnxruntimeBackend().load(path)
    for shape in ((1, 3, 96, 96), (1, 3, 96, 192)):
        x = rng.standard_normal(shape).astype(np.float32)
        assert rel_error(run(x), reference(x)) < TOL, shape
    how, = backend.imports.values()
    assert how.startswith("per shape: ") and "stride 3 does not divide" in how
