"""The IR itself: the builder, the text form, DOT export, topological order, copies, check()."""

from __future__ import annotations

import re

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import (
    Graph,
    GraphBuilder,
    GraphError,
    ValueKind,
    sym,
)


def mlp() -> tuple[GraphBuilder, Graph]:
    b = GraphBuilder("mlp")
    x = b.input("x", ("batch", "seq", 384), "float32")
    w = b.weight("w", np.ones((1536, 384), np.float32))
    bias = b.weight("bias", np.zeros(1536, np.float32))
    h = b.matmul(x, w, bias=bias, activation="gelu", trans_b=True)
    y = b.sum(h, keepdims=True)
    b.output(y)
    return b, b.build()


def test_text_form_one_line_per_node() -> None:
    _, g = mlp()
    text = str(g)
    assert text.splitlines()[0] == 'graph mlp(%0: float32[batch, seq, 384] "x")'
    assert '  weight %1: float32[1536, 384] "w"' in text
    assert ("%3 = matmul(%0, %1, %2) {activation='gelu', trans_b=True} : "
            "float32[batch, seq, 1536]") in text
    assert "%4 = sum(%3) {keepdims=True} : float32[batch, seq, 1]" in text
    assert text.splitlines()[-1] == "  return %4"


def test_absent_optional_inputs_print_as_underscore() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    w = b.weight("w", np.ones((8, 8), np.float32))
    r = b.input("r", (4, 8))
    y = b.matmul(x, w, residual=r)
    b.output(y)
    assert "matmul(%0, %1, _, %2)" in str(b.build())


def test_dot_is_structurally_sound() -> None:
    _, g = mlp()
    dot = g.to_dot()
    assert dot.startswith('digraph "mlp" {') and dot.rstrip().endswith("}")
    assert dot.count("{") - dot.count("\\{") == dot.count("}") - dot.count("\\}")
    edges = [line for line in dot.splitlines() if "->" in line]
    # One line per edge: 3 inputs of matmul, 1 of sum, 1 to the output sink.
    assert len(edges) == 5
    assert all(re.fullmatch(r'\s+\w+ -> \w+ \[label="%\d+"\];', e) for e in edges)
    declared = set(re.findall(r"^\s+(\w+) \[", dot, re.M))
    for e in edges:
        src, dst = re.findall(r"(\w+) -> (\w+)", e)[0]
        assert src in declared and dst in declared


def test_value_kinds_and_handles() -> None:
    b, g = mlp()
    kinds = [v.kind for v in g.values()]
    assert kinds == [ValueKind.INPUT, ValueKind.WEIGHT, ValueKind.WEIGHT,
                     ValueKind.INTERMEDIATE, ValueKind.OUTPUT]
    h = g.nodes[0].outputs[0]
    assert h.shape == (sym("batch"), sym("seq"), 1536) and h.dtype.name == "float32"
    assert [u.op for u in h.users] == ["sum"] and h.producer is g.nodes[0]
    assert repr(h) == "%3"


def test_copy_is_independent_and_keeps_ids() -> None:
    _, g = mlp()
    c = g.copy()
    assert str(c) == str(g)
    c.nodes[0].attrs["alpha"] = 2.0
    c.set_outputs([c.nodes[0].outputs[0]])
    assert "alpha" not in g.nodes[0].attrs and g.outputs[0].id == 4
    assert g.nodes[0].outputs[0].kind is ValueKind.INTERMEDIATE


def test_topological_order_repairs_a_shuffled_list() -> None:
    _, g = mlp()
    order = g.topological_order()
    assert order == g.nodes
    g.nodes.reverse()
    with pytest.raises(GraphError, match=r"node %4 = sum: input 0 \(%3\) is used before"):
        g.check()
    g.nodes = g.topological_order()
    g.check()


def test_cycle_is_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    y = b.relu(x)
    z = b.relu(y)
    b.output(z)
    g = b.build()
    g.nodes[0].inputs = [z]  # a hand-made cycle: y = relu(z), z = relu(y)
    z.users.append(g.nodes[0])
    with pytest.raises(GraphError, match="cycle"):
        g.topological_order()


def test_check_catches_a_wrong_recorded_type() -> None:
    _, g = mlp()
    from vkumd.framework.graph import TensorType

    g.nodes[1].outputs[0].type = TensorType((2, 2), g.nodes[1].outputs[0].dtype)
    with pytest.raises(GraphError, match=r"node %4 = sum: output %4 is recorded as "
                                         r"float32\[2, 2\] but its inputs give"):
        g.check()


def test_check_catches_missing_outputs_and_foreign_values() -> None:
    b = GraphBuilder("empty")
    b.input("x", (3,))
    with pytest.raises(GraphError, match="no outputs"):
        b.build()
    other = GraphBuilder()
    foreign = other.input("y", (3,))
    with pytest.raises(GraphError, match="not a value of graph"):
        b.output(foreign)
    x = b.graph.inputs[0]
    b.output(b.relu(x))
    g = b.build()
    g.nodes[0].inputs = [foreign]
    with pytest.raises(GraphError, match=r"node %1 = relu: input 0 \(%0\) is not a value"):
        g.check()


def test_builder_refusals() -> None:
    b = GraphBuilder()
    b.input("x", (3,))
    with pytest.raises(GraphError, match="already has an input or weight called 'x'"):
        b.input("x", (4,))
    with pytest.raises(VkumdTypeError, match="float64"):
        b.weight("w", np.ones(3))
    with pytest.raises(VkumdTypeError, match="graph values or numbers"):
        b.add(b.graph.inputs[0], "one")
    with pytest.raises(VkumdValueError, match="dimension must be >= 0"):
        b.input("y", (-1,))


def test_scalar_operands_become_constants() -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3), "float16")
    y = b.mul(2.0, b.add(x, 1))
    b.output(y)
    g = b.build()
    assert [w.name for w in g.weights] == ["const", "const_1"]
    assert all(w.dtype.name == "float16" and w.shape == () for w in g.weights)


def test_weights_are_read_only_copies() -> None:
    b = GraphBuilder()
    data = np.arange(4, dtype=np.float32)
    w = b.weight("w", data)
    data[0] = 9
    assert w.data is not None and w.data[0] == 0 and not w.data.flags.writeable
    bf = b.weight("bf", np.array([1.0 + 2 ** -10], np.float32), "bfloat16")
    assert bf.data is not None and bf.data[0] == 1.0  # rounded to what bfloat16 holds


def test_assume_equal_lets_symbols_meet() -> None:
    b = GraphBuilder()
    q = b.input("q", ("batch", "seq", 64))
    k = b.input("k", ("batch", "kv_seq", 64))
    with pytest.raises(GraphError, match=r"node %2 = add: .*seq and kv_seq"):
        b.add(q, k)
    b.assume_equal("kv_seq", "seq")
    s = b.add(q, k)
    assert s.shape == (sym("batch"), sym("seq"), 64)
    b.output(s)
    assert "dim kv_seq = seq" in str(b.build())


def test_multi_output_split() -> None:
    b = GraphBuilder()
    x = b.input("x", ("batch", 1152))
    q, k, v = b.split(x, (384, 384, 384), axis=-1)
    b.output(q, v)
    g = b.build()
    assert "%1, %2, %3 = split(%0) {axis=-1, sizes=(384, 384, 384)}" in str(g)
    assert [o.kind for o in g.nodes[0].outputs] == [
        ValueKind.OUTPUT, ValueKind.INTERMEDIATE, ValueKind.OUTPUT]


def test_check_catches_broken_bookkeeping() -> None:
    _, g = mlp()
    h = g.nodes[0].outputs[0]
    h.users.clear()
    with pytest.raises(GraphError, match="node %4 = sum: input %3 does not list this node"):
        g.check()
    _, g = mlp()
    g.nodes[0].outputs[0].kind = ValueKind.OUTPUT
    with pytest.raises(GraphError, match="%3 has kind output, expected intermediate"):
        g.check()
    _, g = mlp()
    g.weights[0].kind = ValueKind.INPUT
    with pytest.raises(GraphError, match=r"weight %1 \(w\) has kind input"):
        g.check()


def test_repr_and_unique_names() -> None:
    b, g = mlp()
    assert repr(g) == "<Graph mlp: 1 inputs, 2 weights, 2 nodes, 1 outputs>"
    assert g.unique_name("w") == "w_1" and g.unique_name("fresh") == "fresh"
