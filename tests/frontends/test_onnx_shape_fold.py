"""Import-time folding of shape arithmetic: Equal, Not, And, Where, Mod, Div, Sqrt on the
vectors ``Shape`` gives, as ONNX's expanded functions (Attention's grouped-query branch)
compute an Expand's target shape."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs the onnx package")

from onnx import TensorProto as T  # noqa: E402
from onnx import helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import vkumd.onnx  # noqa: E402
from vkumd.framework.graph import evaluate  # noqa: E402


def _gqa_expand_model(q_heads: int, kv_heads: int) -> onnx.ModelProto:
    """k [2, kv, 5, 3] expanded to [2, kv, q/kv, 5, 3] where q divides evenly, else
    [2, kv, 1, 5, 3], the choice made by Equal/Mod/Not/And/Where on the heads' counts."""
    c = helper.make_tensor
    nodes = [
        helper.make_node("Shape", ["q"], ["qh"], start=1, end=2),
        helper.make_node("Shape", ["k"], ["kh"], start=1, end=2),
        helper.make_node("Shape", ["k"], ["b"], start=0, end=1),
        helper.make_node("Shape", ["k"], ["tail"], start=2),
        helper.make_node("Constant", [], ["zero"], value=c("z", T.INT64, [1], [0])),
        helper.make_node("Constant", [], ["one"], value=c("o", T.INT64, [1], [1])),
        helper.make_node("Equal", ["qh", "kh"], ["same"]),
        helper.make_node("Not", ["same"], ["differ"]),
        helper.make_node("Mod", ["qh", "kh"], ["rem"]),
        helper.make_node("Equal", ["rem", "zero"], ["divides"]),
        helper.make_node("And", ["differ", "divides"], ["gqa"]),
        helper.make_node("Div", ["qh", "kh"], ["ratio"]),
        helper.make_node("Where", ["gqa", "ratio", "one"], ["interleave"]),
        helper.make_node("Concat", ["b", "kh", "interleave", "tail"], ["target"], axis=0),
        helper.make_node("Unsqueeze", ["k", "axis2"], ["k5"]),
        helper.make_node("Expand", ["k5", "target"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "gqa_expand",
        [helper.make_tensor_value_info("q", T.FLOAT, [2, q_heads, 4, 3]),
         helper.make_tensor_value_info("k", T.FLOAT, [2, kv_heads, 5, 3])],
        [helper.make_tensor_value_info("y", T.FLOAT, None)],
        [c("axis2", T.INT64, [1], [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(6, 2), (3, 3), (5, 2)])
def test_expand_shape_from_where_on_shapes_folds_at_import(q_heads: int, kv_heads: int
                                                             ) -> None:
    model = _gqa_expand_model(q_heads, kv_heads)
    rng = np.random.default_rng(q_heads * 10 + kv_heads)
    q = rng.standard_normal((2, q_heads, 4, 3)).astype(np.float32)
    k = rng.standard_normal((2, kv_heads, 5, 3)).astype(np.float32)
    want = ReferenceEvaluator(model).run(None, {"q": q, "k": k})[0]
    graph = vkumd.onnx.load(model).graph
    ops = {n.op for n in graph.nodes}
    # The shape arithmetic left no device work: only the broadcast of k remains.
    assert not ops & {"where", "equal", "logical_not", "logical_and", "mod", "div"}, ops
    assert tuple(graph.outputs[0].shape) == want.shape
    got = evaluate(graph, {"q": q, "k": k})[0]
    np.testing.assert_allclose(got, want, rtol=0, atol=0)
