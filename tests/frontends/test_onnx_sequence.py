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


def _linear_attention(q, k, v, past, decay, beta, q_heads, kv_heads, scale):
    """The recurrence, token by token, in float64 (state ``[b, kv, d_k, d_v]``)."""
    b, steps, _ = q.shape
    d_k, d_v = q.shape[2] // q_heads, v.shape[2] // kv_heads
    group = q_heads // kv_heads
    q4 = q.reshape(b, steps, q_heads, d_k).astype(np.float64)
    k4 = k.reshape(b, steps, kv_heads, d_k).astype(np.float64)
    v4 = v.reshape(b, steps, kv_heads, d_v).astype(np.float64)
    state = np.zeros((b, kv_heads, d_k, d_v)) if past is None else past.astype(np.float64)
    out = np.zeros((b, steps, q_heads, d_v))
    for t in range(steps):
        if decay is not None:
            g = np.exp(decay[:, t].astype(np.float64)).reshape(b, kv_heads, -1)
            state = state * g[..., None]
        v_t = v4[:, t]
        if beta is not None:
            read = np.einsum("bhd,bhdm->bhm", k4[:, t], state)
            v_t = beta[:, t].astype(np.float64).reshape(b, -1, 1) * (v_t - read)
        state = state + k4[:, t][..., None] * v_t[..., None, :]
        for h in range(q_heads):
            out[:, t, h] = scale * np.einsum("bd,bdm->bm", q4[:, t, h], state[:, h // group])
    return out.reshape(b, steps, q_heads * d_v), state


@pytest.mark.parametrize(("rule", "q_heads", "kv_heads", "per_key_decay", "with_past"), [
    ("linear", 2, 2, False, False), ("gated", 4, 2, True, True),
    ("delta", 3, 3, False, True), ("gated_delta", 6, 2, False, False)])
def test_linear_attention_matches_float64(ctx, rule: str, q_heads: int, kv_heads: int,
                                          per_key_decay: bool, with_past: bool) -> None:
    rng = np.random.default_rng()
    b, steps, d_k, d_v = 2, 5, 6, 7
    feeds = {"q": rng.standard_normal((b, steps, q_heads * d_k)),
             "k": rng.standard_normal((b, steps, kv_heads * d_k)) * 0.3,
             "v": rng.standard_normal((b, steps, kv_heads * d_v))}
    names = ["q", "k", "v", "", "", ""]
    if with_past:
        feeds["past"] = rng.standard_normal((b, kv_heads, d_k, d_v))
        names[3] = "past"
    if rule in ("gated", "gated_delta"):
        width = kv_heads * d_k if per_key_decay else kv_heads
        feeds["decay"] = -rng.uniform(0.01, 0.5, (b, steps, width))
        names[4] = "decay"
    if rule in ("delta", "gated_delta"):
        feeds["beta"] = rng.uniform(0.1, 0.9, (b, steps, kv_heads))
        names[5] = "beta"
    feeds = {n: a.astype(np.float32) for n, a in feeds.items()}
    m = model("LinearAttention", feeds, ("y", "state"), names, q_num_heads=q_heads,
              kv_num_heads=kv_heads, update_rule=rule)
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)
    want_y, want_state = _linear_attention(
        feeds["q"], feeds["k"], feeds["v"], feeds.get("past"), feeds.get("decay"),
        feeds.get("beta"), q_heads, kv_heads, 1 / np.sqrt(d_k))
    assert rel_error(got["y"], want_y) < 1e-5
    assert rel_error(got["state"], want_state) < 1e-5


def test_linear_attention_without_its_decay_is_refused(ctx) -> None:
    feeds = {n: np.ones((1, 2, 4), np.float32) for n in "qkv"}
    with pytest.raises(UnsupportedModelError, match="gated rules need decay"):
        vkumd.onnx.load(model("LinearAttention", feeds, ("y", "state"), q_num_heads=1,
                              kv_num_heads=1, update_rule="gated"), ctx=ctx)
