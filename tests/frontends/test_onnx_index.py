"""The ONNX index converters (GatherElements, Gather and GatherND with run-time indices,
ScatterElements and Scatter, ScatterND, Trilu, Tile, OneHot, DepthToSpace, SpaceToDepth) on
single-node models against ONNX's reference evaluator, int64 indices fed at run time, and
refusals that name what is unsupported."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.frontends.onnx.errors import UnsupportedModelError  # noqa: E402

_TYPES = {np.dtype(np.float32): T.FLOAT, np.dtype(np.int64): T.INT64,
          np.dtype(np.int32): T.INT32, np.dtype(np.float16): T.FLOAT16,
          np.dtype(np.bool_): T.BOOL}


def model(op: str, feeds: dict[str, np.ndarray], consts: dict[str, np.ndarray] | None = None,
          order: list[str] | None = None, opset: int = 18, out: int = T.FLOAT,
          **attrs: object) -> onnx.ModelProto:
    """One ``op`` node reading ``order`` (the feeds, then the constants, by default): the
    feeds are graph inputs, the constants initializers."""
    consts = consts or {}
    names = order or [*feeds, *consts]
    node = helper.make_node(op, names, ["y"], name="the_node", **attrs)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, _TYPES[v.dtype], list(v.shape))
                      for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", out, None)],
        [numpy_helper.from_array(v, n) for n, v in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def check(ctx, m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> None:
    want = ReferenceEvaluator(m).run(None, feeds)[0]
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)["y"]
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)


def test_gather_elements_with_run_time_int64_indices(ctx) -> None:
    rng = np.random.default_rng()
    data = rng.standard_normal((4, 7, 5)).astype(np.float32)
    for axis in (0, 1, 2):  # ONNX's evaluator misreads a negative axis
        size = data.shape[axis]
        shape = list(data.shape)
        shape[axis] = 9  # ONNX's evaluator takes data's other dimensions only
        ids = rng.integers(-size, size, shape).astype(np.int64)
        check(ctx, model("GatherElements", {"x": data, "i": ids}, axis=axis), {"x": data, "i": ids})


def test_gather_with_run_time_indices(ctx) -> None:
    """Gather on any axis with ids fed at run time (negative ones count from the end): the
    axis moved first, a gather_nd, the picked dimensions moved back."""
    rng = np.random.default_rng()
    data = rng.standard_normal((4, 7, 5)).astype(np.float32)
    for axis, shape in ((0, (2, 3)), (1, (6,)), (2, ()), (-1, (3, 2)), (1, (2, 2, 2))):
        size = data.shape[axis]
        ids = np.asarray(rng.integers(-size, size, shape), np.int64)
        feeds = {"x": data, "i": ids}
        check(ctx, model("Gather", feeds, axis=axis), feeds)


def test_gather_of_bool_data_is_refused_at_import(ctx) -> None:
    """The gathers move 32- and 16-bit elements: a bool table with ids fed at run time is
    refused when the model is loaded, naming the type (not when it runs)."""
    feeds = {"x": np.ones((3, 4, 5), np.bool_), "i": np.array([3, -1, 0], np.int64)}
    with pytest.raises(UnsupportedModelError, match="gather_nd: data is bool"):
        vkumd.onnx.load(model("Gather", feeds, out=T.BOOL, axis=1), ctx=ctx)


def test_gather_nd_run_time_indices_and_batch_dims(ctx) -> None:
    rng = np.random.default_rng()
    data = rng.standard_normal((3, 4, 5, 6)).astype(np.float32)
    for batch, index_shape in ((0, (7, 2)), (1, (3, 2, 3)), (2, (3, 4, 1))):
        ids = np.zeros(index_shape, np.int64)
        for j in range(index_shape[-1]):
            ids[..., j] = rng.integers(0, data.shape[batch + j], index_shape[:-1])
        check(ctx, model("GatherND", {"x": data, "i": ids}, batch_dims=batch),
              {"x": data, "i": ids})


@pytest.mark.parametrize("reduction", ["none", "add", "mul", "max", "min"])
def test_scatters(ctx, reduction: str) -> None:
    rng = np.random.default_rng()
    data = rng.standard_normal((5, 6)).astype(np.float32)
    ids = rng.permutation(5)[:3].repeat(6).reshape(3, 6).astype(np.int64)  # distinct rows
    updates = rng.standard_normal((3, 6)).astype(np.float32)
    feeds = {"x": data, "i": ids, "u": updates}
    check(ctx, model("ScatterElements", feeds, reduction=reduction), feeds)
    tuples = np.array([[4], [0], [2]], np.int64)
    feeds = {"x": data, "i": tuples, "u": updates}
    check(ctx, model("ScatterND", feeds, reduction=reduction), feeds)


def test_scatter_before_opset_11(ctx) -> None:
    """Scatter (opsets 9 and 10) is ScatterElements without reductions; ONNX's evaluator has
    only the latter."""
    feeds = {"x": np.zeros((3, 3), np.float32), "i": np.array([[1, 0, 2]], np.int64),
             "u": np.array([[1, 2, 3]], np.float32)}
    want = ReferenceEvaluator(model("ScatterElements", feeds, axis=0)).run(None, feeds)[0]
    got = vkumd.onnx.load(model("Scatter", feeds, opset=10, axis=0), ctx=ctx)(**feeds)["y"]
    np.testing.assert_array_equal(got, want)


def test_trilu_with_constant_and_fed_k(ctx) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 5, 7)).astype(np.float32)
    for k in (-2, 0, 3):
        for upper in (0, 1):
            check(ctx, model("Trilu", {"x": x}, {"k": np.array(k, np.int64)}, upper=upper),
                  {"x": x})
    # A k fed at run time: the model is specialized on its value.
    m = model("Trilu", {"x": x, "k": np.array(1, np.int64)})
    check(ctx, m, {"x": x, "k": np.array(1, np.int64)})


def test_tile(ctx) -> None:
    x = np.random.default_rng().standard_normal((2, 3, 1)).astype(np.float32)
    for repeats in ([1, 1, 1], [3, 1, 5], [2, 7, 4]):
        check(ctx, model("Tile", {"x": x}, {"r": np.array(repeats, np.int64)}), {"x": x})


@pytest.mark.parametrize("axis", [-1, 0, 1, -3])
def test_one_hot(ctx, axis: int) -> None:
    ids = np.array([[0, 3, -1], [-4, 7, -5]], np.int64)  # negative and out of range
    values = np.array([-0.5, 2.0], np.float32)
    feeds = {"i": ids, "v": values}
    check(ctx, model("OneHot", feeds, {"d": np.array(4.0, np.float32)}, order=["i", "d", "v"],
                     axis=axis), feeds)


@pytest.mark.parametrize("op", ["DepthToSpace", "SpaceToDepth"])
@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_and_space(ctx, op: str, mode: str) -> None:
    shape = (2, 12, 3, 5) if op == "DepthToSpace" else (2, 3, 6, 4)
    block = 2
    x = np.random.default_rng().standard_normal(shape).astype(np.float32)
    # SpaceToDepth's mode is ONNX's since opset 28.
    check(ctx, model(op, {"x": x}, blocksize=block, mode=mode,
                     opset=28 if op == "SpaceToDepth" else 18), {"x": x})


def test_refusals(ctx) -> None:
    x = np.ones((2, 8, 3, 3), np.float32)
    for m, reason in [
        (model("DepthToSpace", {"x": x}, blocksize=3), "not a multiple of blocksize"),
        (model("DepthToSpace", {"x": x}, blocksize=2, mode="ABC"), "mode"),
        (model("SpaceToDepth", {"x": x}, blocksize=2), "not a multiple of blocksize"),
        (model("Tile", {"x": x}, {"r": np.array([1, 2], np.int64)}), "repeats"),
        (model("OneHot", {"i": np.zeros(3, np.int64), "v": np.ones(3, np.float32)},
               {"d": np.array(4.0, np.float32)}, order=["i", "d", "v"]), "values of shape"),
        (model("GatherElements", {"x": x, "i": np.zeros((2, 8, 3), np.int64)}), "rank"),
        (model("ScatterElements", {"x": x, "i": np.zeros((1, 1, 1, 1), np.int64),
                                   "u": np.ones((1, 1, 1, 1), np.float32)},
               reduction="mean"), "reduction"),
    ]:
        with pytest.raises(UnsupportedModelError, match=reason):
            vkumd.onnx.load(m, ctx=ctx)


def test_seven_dimensions(ctx) -> None:
    """A 7-d GatherElements runs (its dimensions merge), and so does a Neg after it (a scale
    of one shape, viewed as one dimension)."""
    rng = np.random.default_rng()
    data = rng.standard_normal((3, 5, 2, 2, 3, 2, 4)).astype(np.float32)
    ids = rng.integers(-5, 5, (3, 1, 2, 2, 3, 2, 4)).astype(np.int64)
    feeds = {"x": data, "i": ids}
    check(ctx, model("GatherElements", feeds, axis=1), feeds)
    gather = helper.make_node("GatherElements", ["x", "i"], ["g"], axis=1)
    neg = helper.make_node("Neg", ["g"], ["y"])
    graph = helper.make_graph(
        [gather, neg], "g", [helper.make_tensor_value_info(n, _TYPES[v.dtype], list(v.shape))
                             for n, v in feeds.items()],
        [helper.make_tensor_value_info("y", T.FLOAT, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    # Neg is a scale of one shape: its lowering views it as one dimension, so it runs.
    got = vkumd.onnx.load(m, ctx=ctx)(**feeds)["y"]
    want = -np.take_along_axis(data, np.where(ids < 0, ids + 5, ids), axis=1)
    np.testing.assert_array_equal(got, want)


def test_reverse_sequence_with_fed_lengths(ctx) -> None:
    rng = np.random.default_rng()
    for time_axis in (0, 1):
        shape = (7, 3, 2) if time_axis == 0 else (3, 7, 2)
        x = rng.standard_normal(shape).astype(np.float32)
        lens = np.array([7, 0, 4], np.int64)
        m = model("ReverseSequence", {"x": x, "lens": lens}, batch_axis=1 - time_axis,
                  time_axis=time_axis)
        check(ctx, m, {"x": x, "lens": lens})
