"""``ops.nll_loss`` against a float64 numpy reference: every float dtype, every reduction,
weights, ignore_index, spatial dimensions and many terms, out-of-range targets, a compiled
graph, the ONNX NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss nodes and bad inputs.

Outputs start poisoned (NaN). Shapes are listed in the parameter ids.
"""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, sample, tensor

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.opset.log_softmax import log_softmax_reference
from vkumd.framework.opset.losses import nll_reference

SHAPES = [(1, 1), (5, 3), (4, 7, 3, 2), (3, 10, 999)]


def _case(rng: np.random.Generator, dtype: str, shape: tuple[int, ...], weighted: bool):
    # Log-probabilities are at most 0: the terms share a sign, as a real loss's do, so a sum
    # is judged without cancellation magnifying float32's rounding.
    x = -np.abs(sample(rng, dtype, shape))
    target = rng.integers(0, shape[1], (shape[0], *shape[2:])).astype(np.int32)
    weight = np.abs(sample(rng, dtype, (shape[1],), scale=0.3, offset=1.0)) if weighted else None
    return x, target, weight


@pytest.mark.parametrize("ignore_index", [None, 1, -100], ids=lambda i: f"ignore{i}")
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
@pytest.mark.parametrize("reduction", ["none", "sum", "mean"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_float64(ctx, dtype: str, shape: tuple[int, ...], reduction: str,
                         weighted: bool, ignore_index: int | None) -> None:
    rng = np.random.default_rng()
    x, target, weight = _case(rng, dtype, shape, weighted)
    if ignore_index == -100:
        target.reshape(-1)[::3] = -100  # ignored targets outside the classes
    want = nll_reference(x, target, weight, reduction, ignore_index)
    out = poisoned(ctx, want.shape, dtype)
    got = ops.nll_loss(tensor(ctx, x, dtype), ctx.tensor(target),
                       None if weight is None else tensor(ctx, weight, dtype),
                       reduction=reduction, ignore_index=ignore_index, out=out)
    assert got.dtype.name == dtype and got.shape == want.shape
    what = f"{dtype} {shape} {reduction} weighted={weighted} ignore={ignore_index}"
    if np.isnan(want).any():  # a mean over nothing but ignored targets: 0 / 0
        assert np.isnan(got.numpy()).all(), what
    else:
        assert_close(np.asarray(got.numpy(), np.float64), want, dtype, what)


def test_out_of_range_targets_give_nan(ctx) -> None:
    x = np.log(np.full((4, 3), 1 / 3, np.float32))
    target = np.array([0, 3, -1, 2], np.int32)
    got = ops.nll_loss(ctx.tensor(x), ctx.tensor(target), reduction="none").numpy()
    assert np.isnan(got[1]) and np.isnan(got[2]) and np.isfinite(got[[0, 3]]).all()
    assert np.isnan(ops.nll_loss(ctx.tensor(x), ctx.tensor(target)).numpy())


def test_empty_batch(ctx) -> None:
    x, target = ctx.empty((0, 3)), ctx.tensor(np.zeros(0, np.int32))
    assert ops.nll_loss(x, target, reduction="none").shape == (0,)
    assert ops.nll_loss(x, target, reduction="sum").numpy() == 0
    assert np.isnan(ops.nll_loss(x, target).numpy())


def test_compiled_cross_entropy(ctx) -> None:
    rng = np.random.default_rng()
    x = sample(rng, "float32", (6, 11)).astype(np.float32)
    target = rng.integers(0, 11, 6).astype(np.int32)
    compiled = vkumd.compile(lambda x, t: ops.nll_loss(ops.log_softmax(x, axis=1), t),
                             {"x": x, "t": target}, ctx=ctx)
    want = nll_reference(log_softmax_reference(x.astype(np.float64), 1), target, None, "mean",
                         None)
    assert_close(np.asarray(compiled(x=x, t=target).numpy(), np.float64), want, "float32")


def _onnx_loss(op_type: str, shape: list[int], weighted: bool, log_prob: bool, **attrs):
    onnx = pytest.importorskip("onnx", reason="the ONNX frontend's extra is not installed")
    from onnx import TensorProto, helper
    names = ["x", "t"] + (["w"] if weighted else [])
    outputs = ["loss"] + (["log_prob"] if log_prob else [])
    node = helper.make_node(op_type, names, outputs, **attrs)
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
              helper.make_tensor_value_info("t", TensorProto.INT64, shape[:1] + shape[2:])]
    if weighted:
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, shape[1:2]))
    reduction = attrs.get("reduction", "mean")
    out_shape = shape[:1] + shape[2:] if reduction == "none" else []
    outs = [helper.make_tensor_value_info("loss", TensorProto.FLOAT, out_shape)]
    if log_prob:
        outs.append(helper.make_tensor_value_info("log_prob", TensorProto.FLOAT, shape))
    model = helper.make_model(helper.make_graph([node], "loss", inputs, outs),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize(("op_type", "reduction", "weighted", "ignore"),
                         [("NegativeLogLikelihoodLoss", "mean", True, 2),
                          ("NegativeLogLikelihoodLoss", "none", False, None),
                          ("SoftmaxCrossEntropyLoss", "sum", True, None),
                          ("SoftmaxCrossEntropyLoss", "mean", False, 0)])
def test_onnx_losses(ctx, op_type: str, reduction: str, weighted: bool,
                     ignore: int | None) -> None:
    import vkumd.onnx
    shape = [3, 5, 4]
    cross = op_type == "SoftmaxCrossEntropyLoss"
    attrs = {"reduction": reduction, **({} if ignore is None else {"ignore_index": ignore})}
    model = _onnx_loss(op_type, shape, weighted, cross, **attrs)
    rng = np.random.default_rng()
    x = rng.standard_normal(shape).astype(np.float32)
    t = rng.integers(0, 5, (3, 4)).astype(np.int64)
    feed = {"x": x, "t": t, **({"w": rng.uniform(0.5, 2, 5).astype(np.float32)}
                               if weighted else {})}
    got = vkumd.onnx.load(model, ctx=ctx)(**feed)
    got = [np.asarray(v) for v in got.values()] if isinstance(got, dict) else list(got)
    log_prob = log_softmax_reference(x.astype(np.float64), 1) if cross else x
    want = nll_reference(log_prob, t, feed.get("w"), reduction, ignore)
    assert_close(np.asarray(got[0], np.float64), want, "float32", op_type)
    if cross:
        assert_close(np.asarray(got[1], np.float64), log_prob, "float32", "log_prob")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.zeros((5, 3), np.float32))
    t = ctx.tensor(np.zeros(5, np.int32))
    cases = [
        (VkumdTypeError, lambda: ops.nll_loss(np.zeros((5, 3), np.float32), t)),
        (VkumdTypeError, lambda: ops.nll_loss(x, np.zeros(5, np.int32))),
        (VkumdTypeError, lambda: ops.nll_loss(ctx.tensor(np.zeros((5, 3), np.int32)), t)),
        (VkumdTypeError, lambda: ops.nll_loss(x, ctx.zeros((5,)))),
        (VkumdValueError, lambda: ops.nll_loss(ctx.zeros((5,)), t)),
        (VkumdValueError, lambda: ops.nll_loss(x, ctx.tensor(np.zeros(4, np.int32)))),
        (VkumdValueError, lambda: ops.nll_loss(x, t, ctx.zeros((4,)))),
        (VkumdTypeError, lambda: ops.nll_loss(x, t, ctx.zeros((3,), "float16"))),
        (VkumdValueError, lambda: ops.nll_loss(x, t, reduction="avg")),
        (VkumdTypeError, lambda: ops.nll_loss(x, t, ignore_index=1.5)),
        (VkumdValueError, lambda: ops.nll_loss(x, t, ignore_index=2**40)),
        (VkumdValueError, lambda: ops.nll_loss(x, t, out=ctx.empty((5,)))),
        (VkumdTypeError, lambda: ops.nll_loss(x, t, out=ctx.empty((), "float16"))),
    ]
    assert_each_raises(ctx, cases, "nll_loss")
