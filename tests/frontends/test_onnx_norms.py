"""ONNX's RMSNormalization, RotaryEmbedding, GroupNormalization, InstanceNormalization,
MeanVarianceNormalization and LpNormalization (p = 1) on single-node models against float64
numpy references written here, on odd shapes; and the forms the importer refuses, refused
with a reason."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.errors import VkumdError  # noqa: E402
from vkumd.testing.numerics import rel_error  # noqa: E402

_TYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.float16): T.FLOAT16,
          np.dtype(np.int64): T.INT64}


def run(ctx, op: str, inputs: dict[str, np.ndarray], opset: int = 23, **attrs) -> np.ndarray:
    """One ``op`` node over ``inputs`` (in order) on vkumd; its output ``y``."""
    graph = helper.make_graph(
        [helper.make_node(op, list(inputs), ["y"], **attrs)], "g",
        [helper.make_tensor_value_info(n, _TYPES[a.dtype], list(a.shape))
         for n, a in inputs.items()],
        [helper.make_tensor_value_info("y", T.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return vkumd.onnx.load(model, ctx=ctx)(**inputs)["y"]


def _random(rng, *shape) -> np.ndarray:
    return (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)


@pytest.mark.parametrize("shape,axis,scale_shape", [
    ((3, 5, 7), -1, (7,)), ((2, 3, 5, 7), 1, (3, 5, 7)), ((4, 9), 0, (4, 9)),
    ((2, 3, 5), 1, (1, 5)),  # a scale that broadcasts: multiplied after the kernel
], ids=str)
def test_rms_normalization(ctx, shape, axis, scale_shape) -> None:
    rng = np.random.default_rng()
    x, w = _random(rng, *shape), _random(rng, *scale_shape)
    got = run(ctx, "RMSNormalization", {"x": x, "w": w}, axis=axis, epsilon=0.01)
    axes = tuple(range(axis % len(shape), len(shape)))
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 ** 2).mean(axis=axes, keepdims=True) + 0.01) * w
    assert got.shape == want.shape and rel_error(got, want) < 1e-5


def rotary_float64(x, cos, sin, ids, interleaved, rot, heads=None):
    """ONNX's RotaryEmbedding in float64 (4-D x is [b, h, s, d]; 3-D [b, s, h * d])."""
    x = x.astype(np.float64)
    x4 = x.reshape(x.shape[0], x.shape[1], heads, -1) if x.ndim == 3 else x.transpose(0, 2, 1, 3)
    if ids is not None:
        cos, sin = cos[ids], sin[ids]
    c, s = cos[:, :, None, :], sin[:, :, None, :]
    part, rest = x4[..., :rot], x4[..., rot:]
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., :rot // 2], part[..., rot // 2:]
    real, imag = c * x1 - s * x2, s * x1 + c * x2
    if interleaved:
        rotated = np.stack([real, imag], -1).reshape(part.shape)
    else:
        rotated = np.concatenate([real, imag], -1)
    y = np.concatenate([rotated, rest], -1)
    return y.reshape(x.shape) if x.ndim == 3 else y.transpose(0, 2, 1, 3)


@pytest.mark.parametrize("rank,interleaved,rot,ids", [
    (4, 0, 0, True), (4, 1, 6, True), (3, 1, 0, False), (3, 0, 4, True)], ids=str)
def test_rotary_embedding(ctx, rank, interleaved, rot, ids) -> None:
    rng = np.random.default_rng()
    b, h, s, d = 2, 3, 5, 10
    x = _random(rng, b, h, s, d) if rank == 4 else _random(rng, b, s, h * d)
    half = (rot or d) // 2
    inputs = {"x": x}
    if ids:
        angles = rng.random((17, half)) * 6
        positions = rng.integers(0, 17, (b, s)).astype(np.int64)
    else:
        angles, positions = rng.random((b, s, half)) * 6, None
    inputs["cos"], inputs["sin"] = np.cos(angles).astype(np.float32), \
        np.sin(angles).astype(np.float32)
    if ids:
        inputs["ids"] = positions
    attrs = {"interleaved": interleaved, "rotary_embedding_dim": rot}
    if rank == 3:
        attrs["num_heads"] = h
    got = run(ctx, "RotaryEmbedding", inputs, **attrs)
    want = rotary_float64(x, inputs["cos"].astype(np.float64),
                          inputs["sin"].astype(np.float64), positions, interleaved,
                          rot or d, h)
    assert got.shape == want.shape and rel_error(got, want) < 1e-6


def _normalize(x: np.ndarray, axes: tuple[int, ...], eps: float) -> np.ndarray:
    mean = x.mean(axis=axes, keepdims=True)
    return (x - mean) / np.sqrt(((x - mean) ** 2).mean(axis=axes, keepdims=True) + eps)


@pytest.mark.parametrize("opset", [18, 21])
def test_group_normalization(ctx, opset: int) -> None:
    rng = np.random.default_rng()
    n, c, g = 3, 6, 3
    x = _random(rng, n, c, 5, 7)
    per = c if opset >= 21 else g
    scale, bias = _random(rng, per), _random(rng, per)
    got = run(ctx, "GroupNormalization", {"x": x, "s": scale, "b": bias}, opset,
              num_groups=g, epsilon=1e-3)
    grouped = _normalize(x.astype(np.float64).reshape(n, g, -1), (2,), 1e-3)
    if opset < 21:
        want = (grouped * scale[:, None] + bias[:, None]).reshape(x.shape)
    else:
        want = grouped.reshape(x.shape) * scale[:, None, None] + bias[:, None, None]
    assert rel_error(got, want) < 1e-5


def test_instance_normalization(ctx) -> None:
    rng = np.random.default_rng()
    x, scale, bias = _random(rng, 2, 5, 3, 11, 2), _random(rng, 5), _random(rng, 5)
    got = run(ctx, "InstanceNormalization", {"x": x, "s": scale, "b": bias}, 22, epsilon=0.02)
    want = _normalize(x.astype(np.float64), (2, 3, 4), 0.02) * scale[:, None, None, None] \
        + bias[:, None, None, None]
    assert rel_error(got, want) < 1e-5


@pytest.mark.parametrize("axes", [None, [1], [0, 3]], ids=str)
def test_mean_variance_normalization(ctx, axes) -> None:
    rng = np.random.default_rng()
    x = _random(rng, 3, 5, 4, 7)
    x[:, 2] = 1.5  # a constant channel: 0, not NaN, with the default axes
    got = run(ctx, "MeanVarianceNormalization", {"x": x}, 13,
              **({} if axes is None else {"axes": axes}))
    x64 = x.astype(np.float64)
    ax = (0, 2, 3) if axes is None else tuple(axes)
    mean = x64.mean(axis=ax, keepdims=True)
    want = (x64 - mean) / (np.sqrt(((x64 - mean) ** 2).mean(axis=ax, keepdims=True)) + 1e-9)
    assert np.all(np.isfinite(got)) and rel_error(got, want) < 1e-5


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_l1_normalization(ctx, axis: int) -> None:
    rng = np.random.default_rng()
    x = _random(rng, 4, 7, 5)
    x[1, 2, :] = 0.0  # a zero row along the last axis: zeros
    got = run(ctx, "LpNormalization", {"x": x}, 22, axis=axis, p=1)
    x64 = x.astype(np.float64)
    norm = np.abs(x64).sum(axis=axis, keepdims=True)
    want = np.where(norm == 0, 0.0, x64 / np.where(norm == 0, 1, norm))
    assert np.all(np.isfinite(got)) and rel_error(got, want) < 1e-6


@pytest.mark.parametrize("op,inputs,attrs,reason", [
    ("RMSNormalization", {"x": (2, 3), "w": (3,)}, {"stash_type": 0}, "stash_type=0"),
    ("RMSNormalization", {"x": (2, 3), "w": (4,)}, {}, "does not broadcast"),
    ("GroupNormalization", {"x": (2, 6, 3), "s": (6,), "b": (6,)}, {"num_groups": 4},
     "6 channels in 4 groups"),
    ("LpNormalization", {"x": (2, 3)}, {"p": 3}, "p=3"),
    ("RotaryEmbedding", {"x": (1, 2, 3, 8), "cos": (1, 3, 3), "sin": (1, 3, 3)}, {},
     "not rotary_embedding_dim / 2"),
    ("RotaryEmbedding", {"x": (1, 3, 8), "cos": (1, 3, 4), "sin": (1, 3, 4)}, {"num_heads": 3},
     "num_heads=3"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_refused_with_a_reason(ctx, op, inputs, attrs, reason) -> None:
    arrays = {n: np.ones(s, np.float32) for n, s in inputs.items()}
    opset = 21 if op == "GroupNormalization" else 23
    with pytest.raises(VkumdError, match=reason):
        run(ctx, op, arrays, opset, **attrs)
    x = np.arange(1, 7, dtype=np.float32).reshape(2, 3)  # the context still works
    got = run(ctx, "LpNormalization", {"x": x}, 22, p=1)
    assert rel_error(got, x / x.sum(1, keepdims=True)) < 1e-6
