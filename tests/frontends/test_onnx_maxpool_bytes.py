"""ONNX MaxPool of uint8 and int8 (pooled through float32, which holds each value exactly)
against numpy's window maxima on odd shapes, 1-D, 2-D and 3-D."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402


def _max_pool(x: np.ndarray, kernel: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    spatial = x.shape[2:]
    out = [(s - k) // st + 1 for s, k, st in zip(spatial, kernel, strides, strict=True)]
    y = np.empty(x.shape[:2] + tuple(out), x.dtype)
    for o in itertools.product(*(range(n) for n in out)):
        window = tuple(slice(i * st, i * st + k) for i, st, k in zip(o, strides, kernel,
                                                                      strict=True))
        y[(..., *o)] = x[(..., *window)].reshape(x.shape[:2] + (-1,)).max(axis=-1)
    return y


@pytest.mark.parametrize("dtype", ["uint8", "int8"])
@pytest.mark.parametrize("shape, kernel, strides", [((2, 3, 13), (3,), (2,)),
                                                    ((1, 5, 9, 11), (3, 2), (2, 3)),
                                                    ((1, 2, 5, 7, 6), (2, 3, 2), (1, 2, 2))])
def test_byte_max_pool_matches_numpy(ctx, dtype, shape, kernel, strides) -> None:
    if not ctx.caps.storage_8bit:
        pytest.skip("the device has no 8-bit storage")
    info = np.iinfo(dtype)
    x = np.random.default_rng().integers(info.min, info.max, shape, dtype=dtype,
                                         endpoint=True)
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph = helper.make_graph(
        [helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=list(kernel),
                          strides=list(strides))], "pool",
        [helper.make_tensor_value_info("x", elem, shape)],
        [helper.make_tensor_value_info("y", elem, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 12)])
    got = vkumd.onnx.load(model, ctx=ctx)(x=x)["y"]
    want = _max_pool(x, kernel, strides)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, want)
