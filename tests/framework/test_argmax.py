"""``ops.argmax`` against numpy's argmax (the reference for indices): every float type, odd
row lengths on every row-reduction path, ties, NaN and infinities, other axes, keepdims, a
compiled graph, the ONNX ArgMax node and bad inputs (torch's argmax:
tests/frontends/test_torch_compile.py)."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import (  # noqa: F401  (row_path is a fixture)
    FLOATS,
    assert_each_raises,
    row_path,
    sample,
    tensor,
)

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphBuilder, evaluate

SHAPES = [(1,), (7,), (3, 5), (4, 64), (2, 3, 33), (5, 1000), (2, 49152)]


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_numpy(ctx, dtype: str, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape, scale=10.0)
    out = ctx.tensor(np.full(shape[:-1], -7, np.int32))  # poisoned: no index is -7
    got = ops.argmax(tensor(ctx, x, dtype), out=out)
    assert got is out and got.dtype.name == "int32"
    np.testing.assert_array_equal(got.numpy(), np.argmax(x, axis=-1))


@pytest.mark.usefixtures("row_path")
def test_every_reduction_path(ctx) -> None:
    rng = np.random.default_rng()
    for cols in (1, 3, 8, 67, 300, 1028):
        x = rng.standard_normal((9, cols)).astype(np.float32)
        np.testing.assert_array_equal(ops.argmax(ctx.tensor(x)).numpy(), np.argmax(x, -1),
                                      err_msg=f"cols {cols}")


@pytest.mark.usefixtures("row_path")
@pytest.mark.parametrize("cols", [5, 64, 1001])
def test_ties_nan_and_infinities(ctx, cols: int) -> None:
    """Equal maxima give the lowest index (also across lanes); a NaN anywhere gives the first
    NaN's index; all -inf gives 0; +inf wins over finite values."""
    rng = np.random.default_rng()
    x = rng.uniform(-1, 1, (7, cols)).astype(np.float32)
    x[0, [cols - 1, cols // 2, 1 % cols]] = 3.0  # ties: the lowest wins
    x[1, [cols - 1, cols // 3]] = np.nan
    x[1, 0] = np.inf
    x[2] = -np.inf
    x[3, cols // 2] = np.inf
    x[4] = np.nan
    x[5] = 2.5  # a constant row
    x[6, -1] = np.nan
    got = ops.argmax(ctx.tensor(x)).numpy()
    np.testing.assert_array_equal(got, np.argmax(x, axis=-1))
    assert got[0] == min(1 % cols, cols // 2) and got[5] == 0 and got[6] == cols - 1


@pytest.mark.parametrize("axis", [0, 1, -3])
@pytest.mark.parametrize("keepdims", [False, True])
def test_other_axes_and_keepdims(ctx, axis: int, keepdims: bool) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((3, 10, 5)).astype(np.float16)
    got = ops.argmax(ctx.tensor(x), axis=axis, keepdims=keepdims).numpy()
    np.testing.assert_array_equal(got, np.argmax(x, axis=axis, keepdims=keepdims))


def test_compiled_graph(ctx) -> None:
    """Greedy decoding's last step: logits (a symbolic batch) scaled, then argmax."""
    rng = np.random.default_rng()
    b = GraphBuilder("greedy")
    logits = b.input("logits", ("n", 301))
    b.output(b.argmax(b.mul(logits, 0.5)))
    graph = b.build()
    compiled = vkumd.compile(lambda logits: ops.argmax(logits * 0.5),
                             {"logits": np.ones((4, 301), np.float32)}, ctx=ctx,
                             dynamic={"logits": {0: "n"}})
    assert compiled.executor == "compiled"
    for rows in (4, 3):
        data = rng.standard_normal((rows, 301)).astype(np.float32)
        want = evaluate(graph, {"logits": data})[0]
        np.testing.assert_array_equal(compiled(logits=data).numpy(), want)


def test_onnx_argmax(ctx) -> None:
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper

    import vkumd.onnx
    from vkumd.onnx import MalformedGraphError

    def model(**attrs):
        shape = [3, 5, 7]
        axis = attrs.get("axis", 0) % 3
        out = shape[:axis] + [1] * attrs.get("keepdims", 1) + shape[axis + 1:]
        graph = helper.make_graph(
            [helper.make_node("ArgMax", ["x"], ["y"], **attrs)], "argmax",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
            [helper.make_tensor_value_info("y", TensorProto.INT64, out)])
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        onnx.checker.check_model(m)
        return m

    x = np.round(np.random.default_rng().standard_normal((3, 5, 7)) * 2).astype(np.float32)
    for attrs in ({}, {"axis": 2, "keepdims": 0}, {"axis": -2},
                  {"axis": 1, "select_last_index": 1}):
        got = vkumd.onnx.load(model(**attrs), ctx=ctx)(x=x)
        got = np.asarray(got[next(iter(got))] if isinstance(got, dict) else got)
        axis = attrs.get("axis", 0)
        keep = bool(attrs.get("keepdims", 1))
        want = np.argmax(x, axis=axis, keepdims=keep)
        if attrs.get("select_last_index"):  # the last of equal maxima (rounding made ties)
            want = x.shape[axis] - 1 - np.argmax(np.flip(x, axis), axis=axis, keepdims=keep)
        assert got.dtype == np.int64
        np.testing.assert_array_equal(got, want)
    with pytest.raises(MalformedGraphError, match="select_last_index"):
        vkumd.onnx.load(model(select_last_index=2), ctx=ctx)


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3), np.float32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.argmax(ctx.tensor(np.ones((2, 3), np.int32)))),
        (VkumdValueError, lambda: ops.argmax(ctx.tensor(np.ones((), np.float32)))),
        (VkumdValueError, lambda: ops.argmax(ctx.empty((2, 0)))),
        (VkumdValueError, lambda: ops.argmax(x, axis=2)),
        (VkumdTypeError, lambda: ops.argmax(x, axis=1.0)),
        (VkumdTypeError, lambda: ops.argmax(x, keepdims=1)),
        (VkumdTypeError, lambda: ops.argmax(x, out=ctx.empty((2,), "float32"))),
        (VkumdValueError, lambda: ops.argmax(x, out=ctx.empty((3,), "int32"))),
    ], "argmax")
