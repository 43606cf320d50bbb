"""DCE, constant folding and CSE: each alone on hand-written graphs, the registry and its
switches, and every pass on random DAGs against the reference evaluator and numpy."""

from __future__ import annotations

import numpy as np
import pytest
from graph_dags import Program, programs
from hypothesis import given, settings

from vkumd.errors import VkumdValueError
from vkumd.framework.graph import PASSES, PIPELINE, GraphBuilder, evaluate, run_passes
from vkumd.framework.graph.constant_folding import fold_constants
from vkumd.framework.graph.cse import eliminate_common_subexpressions
from vkumd.framework.graph.dce import eliminate_dead_code
from vkumd.framework.graph.ir import Graph, ValueKind
from vkumd.framework.graph.passes import FUSION


def ops(g: Graph) -> list[str]:
    return [n.op for n in g.nodes]


def dead_graph() -> Graph:
    b = GraphBuilder()
    x = b.input("x", (4,))
    unused = b.input("unused", (4,))
    w = b.weight("w", np.ones(4, np.float32))
    dead_w = b.weight("dead_w", np.ones(4, np.float32))
    dead = b.relu(b.add(x, dead_w))
    b.mul(dead, unused)
    b.output(b.add(x, w))
    return b.build()


def test_dce_removes_dead_nodes_and_weights_keeps_inputs() -> None:
    g = dead_graph()
    before = str(g)
    out = eliminate_dead_code(g)
    assert str(g) == before  # the input graph is left alone
    assert ops(out) == ["add"]
    assert [w.name for w in out.weights] == ["w"]
    assert [v.name for v in out.inputs] == ["x", "unused"]
    assert not out.inputs[1].users
    out.check()


def test_constant_folding_chains_and_dtypes() -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 2))
    w = b.weight("w", np.arange(6, dtype=np.float32).reshape(2, 3))
    wt = b.scale(b.transpose(w, 0, 1), 0.5)  # constant: folds to one weight
    ids = b.weight("ids", np.array([1, 2], np.int32))
    half = b.cast(b.div(ids, ids, rounding="floor"), "float16")  # int32 then float16
    y = b.add(x, wt)
    b.output(y, half)
    g = b.build()
    folded = fold_constants(g)
    assert ops(g) == ["transpose", "scale", "div", "cast", "add"]
    assert ops(folded) == ["add"]
    folded.check()
    new = [w for w in folded.weights if w.name.startswith("folded_")]
    assert {w.dtype.name for w in new} == {"float32", "int32", "float16"}
    assert folded.outputs[1].kind is ValueKind.WEIGHT
    assert np.array_equal(folded.outputs[1].data, np.ones(2, np.float16))
    feed = {"x": np.ones((3, 2), np.float32)}
    for a, c in zip(evaluate(g, feed), evaluate(folded, feed), strict=True):
        np.testing.assert_array_equal(a, c)
    # Folding orphans the original weights; DCE then drops them.
    assert [w.name for w in eliminate_dead_code(folded).weights] == ["folded_3", "folded_6"]


def test_constant_folding_leaves_symbolic_results() -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", 4))
    w = b.weight("w", np.ones((4,), np.float32))
    b.output(b.add(x, b.relu(w)))
    assert ops(fold_constants(b.build())) == ["add"]


def test_cse_merges_equal_nodes_and_constants() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    y = b.input("y", (4, 8))
    c1 = b.weight("c1", np.full(8, 2.0, np.float32))
    c2 = b.weight("c2", np.full(8, 2.0, np.float32))
    a1 = b.add(x, y)
    a2 = b.add(y, x)  # commutative: the same
    s1 = b.sub(x, y)
    s2 = b.sub(y, x)  # not commutative: kept
    m1 = b.mul(a1, c1)
    m2 = b.mul(a2, c2)  # same once c2 is c1 and a2 is a1
    g1 = b.scale(m1, 2.0)
    g2 = b.scale(m2, 3.0)  # different attribute: kept
    b.output(m1, m2, s1, s2, g1, g2)
    g = b.build()
    out = eliminate_common_subexpressions(g)
    out.check()
    assert ops(out) == ["add", "sub", "sub", "mul", "scale", "scale"]
    assert [w.name for w in out.weights] == ["c1"]
    assert out.outputs[0] is out.outputs[1]
    assert len(g.nodes) == 8  # the input graph is left alone
    feed = {"x": np.ones((4, 8), np.float32), "y": np.arange(32, dtype=np.float32).reshape(4, 8)}
    for a, c in zip(evaluate(g, feed), evaluate(out, feed), strict=True):
        np.testing.assert_array_equal(a, c)


def test_registry_pipeline_and_switches(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fusion passes (FUSION, tested in test_fusion_*.py) run between cleanup and the
    # last DCE.
    assert set(PASSES) == {"dce", "constant_folding", "conv_bn_folding", "pad_folding",
                           "hardswish_rewrite", "conv_input_affine_folding", "cse",
                           "transpose_folding", *FUSION}
    assert PIPELINE[0] == "dce" and PIPELINE[-1] == "dce"
    g = dead_graph()
    out = run_passes(g)
    assert out.passes_run == list(PIPELINE) and g.passes_run == []
    cnn = ["conv_bn_folding", "pad_folding", "hardswish_rewrite", "conv_input_affine_folding"]
    assert run_passes(g, disable=["dce"]).passes_run == ["constant_folding", *cnn, "cse",
                                                         "transpose_folding", *FUSION]
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", "cse, constant_folding")
    assert run_passes(g).passes_run == ["dce", *cnn, "transpose_folding", *FUSION, "dce"]
    kept = run_passes(g, disable=["dce", *cnn, "transpose_folding", *FUSION])
    assert kept.passes_run == [] and kept is not g and str(kept) == str(g)
    monkeypatch.setenv("VKUMD_DISABLE_PASSES", "fusion")
    with pytest.raises(VkumdValueError, match="unknown pass fusion .*VKUMD_DISABLE_PASSES.*"
                                              "the passes are dce, constant_folding, "
                                              "conv_bn_folding, pad_folding, "
                                              "hardswish_rewrite, conv_input_affine_folding, "
                                              "cse"):
        run_passes(g)
    monkeypatch.delenv("VKUMD_DISABLE_PASSES")
    with pytest.raises(VkumdValueError, match="unknown pass nope"):
        run_passes(g, ["nope"])


def _assert_same(a: list[np.ndarray], b: list[np.ndarray], rtol: float) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.shape == y.shape
        scale = max(1.0, float(np.max(np.abs(y), initial=0.0)))
        np.testing.assert_allclose(x, y, rtol=rtol, atol=rtol * scale)


@settings(max_examples=60, deadline=None)
@given(programs())
def test_random_dags_every_pass_keeps_the_values(program: Program) -> None:
    g = program.build()
    feed = program.feed_dict()
    reference = evaluate(g, feed)
    _assert_same(reference, program.numpy(), 1e-12)
    before = str(g)
    for name, fn in PASSES.items():
        out = fn(g)
        out.check()
        # Folding stores constants in float32: one rounding per folded value.
        _assert_same(evaluate(out, feed), reference, 1e-5 if name == "constant_folding"
                     else 0.0)
    assert str(g) == before
    final = run_passes(g)
    _assert_same(evaluate(final, feed), program.numpy(), 1e-5)
    assert len(final.nodes) <= len(g.nodes)
    assert not any(all(v.kind is ValueKind.WEIGHT for v in n.inputs if v is not None)
                   for n in final.nodes)
    live = {v.id for n in final.nodes for v in n.inputs if v is not None}
    live |= {v.id for v in final.outputs}
    assert all(v.id in live for n in final.nodes for v in n.outputs[:1])
