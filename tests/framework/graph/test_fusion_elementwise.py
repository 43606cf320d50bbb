"""Elementwise fusion on hand-written graphs: what joins a group, what stays out, and the
registry switch. The random DAGs are in ``test_fusion_dags.py``."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_checks import feeds_for

from vkumd.compiler.kernels.limits import FUSED_MAX_INPUTS
from vkumd.framework.graph import PASSES, GraphBuilder, evaluate, op_info, run_passes
from vkumd.framework.graph.fusion_elementwise import fuse_elementwise
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.passes import FUSION


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def same_reference(before: Graph, after: Graph, feeds: dict[str, np.ndarray]) -> None:
    after.check()
    for want, got in zip(evaluate(before, feeds), evaluate(after, feeds), strict=True):
        np.testing.assert_array_equal(got, want)


def test_a_chain_becomes_one_node_with_inlined_constants() -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", 8))
    bias = b.weight("bias", np.linspace(-1, 1, 8).astype(np.float32))
    y = b.gelu(b.add(b.scale(b.mul(x, 2.0), 0.5), bias))
    b.output(b.relu(y))
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise"]
    node = fused.nodes[0]
    assert node.inputs == [fused.inputs[0], fused.weights[0]]  # x and the bias; 2.0 inlined
    assert node.attrs["program"] == (("mul", 0, ("const", 2.0)), ("mul", 2, ("const", 0.5)),
                                     ("add", 3, 1), ("gelu", 4), ("relu", 5))
    assert node.attrs["dtype"] == "float32"
    same_reference(g, fused, feeds_for(g))
    assert ops(g) == ["mul", "scale", "add", "gelu", "relu"]  # the input graph is untouched


def test_a_value_read_outside_the_group_ends_it() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 5))
    h = b.gelu(b.mul(x, x))  # mul -> gelu fuse; h is also read by the softmax
    out = b.add(h, b.softmax(h))
    b.output(b.relu(out))
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise", "softmax", "fused_elementwise"]
    first, _, last = fused.nodes
    assert first.attrs["program"] == (("mul", 0, 0), ("gelu", 1))
    assert last.attrs["program"] == (("add", 0, 1), ("relu", 2))
    same_reference(g, fused, feeds_for(g))


def test_a_graph_output_in_the_middle_is_kept() -> None:
    b = GraphBuilder()
    x = b.input("x", (6,))
    mid = b.silu(b.sub(x, 1.0))
    b.output(b.relu(b.mul(mid, 3.0)), mid)
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise", "fused_elementwise"]
    assert fused.outputs[1] is fused.nodes[0].outputs[0]
    same_reference(g, fused, feeds_for(g))


def test_a_diamond_fuses_whole() -> None:
    b = GraphBuilder()
    x, y = b.input("x", (3, 4)), b.input("y", (4,))
    s = b.add(x, y)
    b.output(b.where(b.gt(s, 0.0), b.gelu(s), b.scale(s, 0.01)))
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise"]
    assert len(fused.nodes[0].attrs["program"]) == 5
    same_reference(g, fused, feeds_for(g))


def test_non_elementwise_and_integer_ops_stay_out() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 6))
    i = b.input("i", (4, 6), "int32")
    c = b.cast(b.add(i, i), "float32")  # int32 arithmetic wraps; float32 would not
    n = b.layer_norm(b.relu(x))
    lone = b.gt(x, 0.0)  # a comparison alone has no float result to root a group
    b.output(b.mul(n, c), lone)
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["add", "cast", "relu", "layer_norm", "gt", "mul"]
    assert all(n.op != "fused_elementwise" for n in fused.nodes)


def test_a_where_condition_may_be_an_integer_input() -> None:
    b = GraphBuilder()
    x = b.input("x", (5,))
    keep = b.input("keep", (5,), "uint8")
    b.output(b.where(keep, b.relu(x), -1.0))
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise"]
    feeds = {"x": np.arange(-2, 3, dtype=np.float32),
             "keep": np.array([1, 0, 1, 0, 1], np.uint8)}
    same_reference(g, fused, feeds)


def test_a_constant_that_widens_the_output_stays_an_input() -> None:
    b = GraphBuilder()
    x = b.input("x", (4,))
    one = b.weight("one", np.ones((1, 1), np.float32))
    b.output(b.relu(b.add(x, one)))  # [1, 1] + [4] is [1, 4]
    g = b.build()
    fused = fuse_elementwise(g)
    assert ops(fused) == ["fused_elementwise"]
    assert fused.nodes[0].inputs == [fused.inputs[0], fused.weights[0]]
    assert fused.outputs[0].shape == (1, 4)
    same_reference(g, fused, feeds_for(g))


def test_groups_take_at_most_max_inputs() -> None:
    b = GraphBuilder()
    xs = [b.input(f"x{i}", (3,)) for i in range(FUSED_MAX_INPUTS + 3)]
    acc = xs[0]
    for x in xs[1:]:
        acc = b.add(acc, x)
    b.output(b.relu(acc))
    g = b.build()
    fused = fuse_elementwise(g)
    assert all(len(n.inputs) <= FUSED_MAX_INPUTS for n in fused.nodes)
    assert ops(fused) == ["fused_elementwise", "fused_elementwise"]
    same_reference(g, fused, feeds_for(g))


def test_float16_chain_keeps_its_dtype_and_casts() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float16")
    b.output(b.cast(b.gelu_tanh(b.div(x, 3.0)), "bfloat16"))
    g = b.build()
    fused = fuse_elementwise(g)
    node = fused.nodes[0]
    assert node.attrs["dtype"] == "bfloat16"
    assert node.attrs["program"][-1] == ("cast", 2, "bfloat16")
    same_reference(g, fused, feeds_for(g))


def test_registered_in_the_pipeline_and_switchable_off() -> None:
    assert PASSES["elementwise_fusion"] is fuse_elementwise
    assert "elementwise_fusion" in FUSION
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.output(b.relu(b.add(x, 1.0)))
    g = b.build()
    assert ops(run_passes(g)) == ["fused_elementwise"]
    assert ops(run_passes(g, disable=["elementwise_fusion"])) == ["add", "relu"]


@pytest.mark.parametrize("twice", [False, True])
def test_running_again_changes_nothing(twice: bool) -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.output(b.relu(b.add(x, 1.0)))
    once = fuse_elementwise(b.build())
    again = fuse_elementwise(once) if twice else once
    assert str(again) == str(once)


def test_the_fused_op_is_not_planned_in_place() -> None:
    """A float32 [N] input of a float16 [2, N] result has its byte size but other offsets,
    and the memory planner matches byte sizes only."""
    assert op_info("fused_elementwise").inplace is False
