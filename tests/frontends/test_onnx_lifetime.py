"""An ONNX model's device memory lives as long as the model: dropped, it gives back its
recording (compiled graph, weights, arena) to the context."""

from __future__ import annotations

import gc

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx_models import Net  # noqa: E402

import vkumd  # noqa: E402
import vkumd.onnx  # noqa: E402


def _matmul_add() -> onnx.ModelProto:
    n = Net(3)
    x = helper.make_tensor_value_info("x", T.FLOAT, ["batch", 4])
    return n.model([x], [n.op("Add", n.op("MatMul", "x", n.weight(4, 3)), n.weight(3))])


def test_a_dropped_model_gives_its_device_memory_back(ctx) -> None:
    data = _matmul_add().SerializeToString()
    x = np.ones((2, 4), np.float32)
    gc.collect()
    ctx.synchronize()
    before = ctx.memory.used_bytes()
    compiled_before = vkumd.live_objects().get("CompiledGraph", 0)
    for _ in range(3):
        model = vkumd.onnx.load(data, ctx=ctx)
        (first,) = model(x=x).values()
        (again,) = model(x=x).values()  # the second call replays the recording
        np.testing.assert_array_equal(again, first)
        del model
    gc.collect()
    ctx.synchronize()
    assert vkumd.live_objects().get("CompiledGraph", 0) == compiled_before
    assert ctx.memory.used_bytes() == before
