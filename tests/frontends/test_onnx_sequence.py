"""ONNX's sequence-model operators (SwiGLU, TensorScatter, CausalConvWithState) on
single-node models against float64 numpy written here, fresh random data at odd sizes, and
refusals that name what is unsupported."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402

_TYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64,
          np.dtype(np.float16): T.FLOAT16}


def model(op: str, feeds: dict[str, np.ndarray], outs: tuple[str, ...] = ("y",),
          inputs: list[str] | None = None, opset: int = 28, **attrs: object
          ) -> onnx.ModelProto:
    """One ``op`` node reading ``inputs`` (default: the feeds in order; ``""`` skips one)."""
    node = helper.make_node(op, inputs if inputs is not None else list(feeds), list(outs),
                            **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, _TYPES[v.dtype], list(v.shape))
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def rel_error(got: np.ndarray, want: np.ndarray) -> float:
    assert got.shape == want.shape, (got.shape, want.shape)
    assert not np.isnan(got).any()
    return float(np.linalg.norm(got.astype(np.float64) - want) / max(np.linalg.norm(want),
                                                                       1e-30))


def _silu(x: np.ndarray, alpha: float = 1.0) -> np.ndarray:
    return x / (1.0 + np.exp(-alpha * x))


@pytest.mark.parametrize("alpha", [1.0, 0.37])
def test_swiglu_matches_float64(ctx, alpha: float) -> None:
    rng = np.random.default_rng()
    a, b = (rng.standard_normal((3, 7, 13)).astype(np.float32) * 3 for _ in range(2))
    attrs = {} if alpha == 1.0 else {"alpha": alpha}
    got = vkumd.onnx.load(model("SwiGLU", {"a": a, "b": b}, **attrs), ctx=ctx)(a=a, b=b)["y"]
    want = _silu(a.astype(np.float64), alpha) * b
    assert rel_error(got, want) < 1e-5


def test_swiglu_of_different_shapes_is_refused(ctx) -> None:
    a, b = np.ones((2, 4), np.float32), np.ones((1, 4), np.float32)
    with pytest.raises(UnsupportedModelError, match="does not broadcast"):
        vkumd.onnx.load(model("SwiGLU", {"a": a, "b": b}), ctx=ctx)


def _scatter(cache: np.ndarray, update: np.ndarray, starts: np.ndarray, axis: int,
             circular: bool) -> np.ndarray:
    out = cache.astype(np.float64)
    length = cache.shape[axis]
    for b in range(cache.shape[0]):
        for s in range(update.shape[axis]):
            at = int(starts[b]) + s
            if circular:
                at %= length
            dst = [b] + [slice(None)] * (cache.ndim - 1)
            src = [b] + [slice(None)] * (cache.ndim - 1)
            dst[axis], src[axis] = at, s
            out[tuple(dst)] = update[tuple(src)]
    return out


@pytest.mark.parametrize(("shape", "new", "axis", "mode"), [
    ((3, 2, 9, 5), 3, -2, "linear"), ((3, 9, 7), 4, 1, "linear"),
    ((2, 3, 7, 5), 5, 2, "circular"), ((2, 5, 3, 6), 2, 1, "circular")])
def test_tensor_scatter_matches_float64(ctx, shape: tuple[int, ...], new: int, axis: int,
                                        mode: str) -> None:
    rng = np.random.default_rng()
    cache = rng.standard_normal(shape).astype(np.float32)
    update_shape = list(shape)
    update_shape[axis] = new
    update = rng.standard_normal(update_shape).astype(np.float32)
    length = shape[axis]
    high = length if mode == "circular" else length - new + 1
    starts = rng.integers(0, high, shape[0]).astype(np.int64)
    feeds = {"past_cache": cache, "update": update, "write_indices": starts}
    m = model("TensorScatter", feeds, axis=axis, mode=mode)
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)["y"]
    want = _scatter(cache, update, starts, axis % len(shape), mode == "circular")
    assert rel_error(got, want) == 0.0  # values are moved, not computed


def test_tensor_scatter_without_indices_writes_at_zero(ctx) -> None:
    rng = np.random.default_rng()
    cache = rng.standard_normal((2, 6, 3)).astype(np.float32)
    update = rng.standard_normal((2, 2, 3)).astype(np.float32)
    feeds = {"past_cache": cache, "update": update}
    got = vkumd.onnx.load(model("TensorScatter", feeds), ctx=ctx)(**feeds)["y"]
    assert rel_error(got, _scatter(cache, update, np.zeros(2), 1, False)) == 0.0


def test_tensor_scatter_on_the_batch_axis_is_refused(ctx) -> None:
    feeds = {"past_cache": np.ones((4, 3), np.float32), "update": np.ones((1, 3), np.float32)}
    with pytest.raises(UnsupportedModelError, match="past the batch axis"):
        vkumd.onnx.load(model("TensorScatter", feeds, axis=0), ctx=ctx)


def _causal_conv(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None,
                 past: np.ndarray | None, silu: bool) -> tuple[np.ndarray, np.ndarray]:
    batch, channels, length = x.shape
    k = w.shape[2]
    if past is None:
        past = np.zeros((batch, channels, k - 1))
    padded = np.concatenate([past, x], axis=2).astype(np.float64)
    y = np.zeros((batch, channels, length))
    for t in range(length):
        y[:, :, t] = (padded[:, :, t:t + k] * w[:, 0, :]).sum(axis=2)
    if bias is not None:
        y += bias[None, :, None]
    return (_silu(y) if silu else y), padded[:, :, padded.shape[2] - (k - 1):]


@pytest.mark.parametrize(("k", "with_bias", "with_past", "activation"), [
    (4, True, True, "silu"), (3, False, False, "none"), (1, True, False, "swish"),
    (5, False, True, "none")])
def test_causal_conv_with_state_matches_float64(ctx, k: int, with_bias: bool, with_past: bool,
                                               activation: str) -> None:
    rng = np.random.default_rng()
    batch, channels, length = 3, 7, 11
    x = rng.standard_normal((batch, channels, length)).astype(np.float32)
    w = rng.standard_normal((channels, 1, k)).astype(np.float32)
    feeds = {"x": x, "w": w}
    names = ["x", "w", "", ""]
    bias = past = None
    if with_bias:
        bias = feeds["bias"] = rng.standard_normal(channels).astype(np.float32)
        names[2] = "bias"
    if with_past:
        past = feeds["past"] = rng.standard_normal((batch, channels, k - 1)).astype(np.float32)
        names[3] = "past"
    m = model("CausalConvWithState", feeds, ("y", "state"), names, activation=activation)
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)
    want_y, want_state = _causal_conv(x, w, bias, past, activation != "none")
    assert rel_error(got["y"], want_y) < 1e-5
    assert got["state"].shape == want_state.shape
    np.testing.assert_array_equal(got["state"], want_state.astype(np.float32))


def test_causal_conv_with_an_unknown_activation_is_refused(ctx) -> None:
    feeds = {"x": np.ones((1, 2, 5), np.float32), "w": np.ones((2, 1, 3), np.float32)}
    with pytest.raises(UnsupportedModelError, match="activation 'gelu'"):
        vkumd.onnx.load(model("CausalConvWithState", feeds, ("y", "state"),
                              activation="gelu"), ctx=ctx)
