"""ONNX INT64 values: data (arithmetic, comparisons, casts) computed in int64 exactly, past
int32's range; indices and shapes still narrowed to int32, range-checked
(vkumd/framework/frontends/onnx/int64_values.py)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

from vkumd.errors import VkumdValueError
from vkumd.framework.frontends.onnx import model as onnx_model
from vkumd.framework.frontends.onnx.int64_values import int64_data_values

N = 13


def _graph(nodes, inputs, outputs, initializers=()):
    g = helper.make_graph(nodes, "int64", inputs, outputs, list(initializers))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])


def _vi(name: str, elem: int, shape=(N,)):
    return helper.make_tensor_value_info(name, elem, list(shape))


def _data_model():
    """(a + b) * k, a < that, and Cast(f -> INT64) - a, with k an INT64 initializer."""
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Mul", ["s", "k"], ["p"]),
             helper.make_node("Less", ["a", "p"], ["lt"]),
             helper.make_node("Cast", ["f"], ["fi"], to=T.INT64),
             helper.make_node("Sub", ["fi", "a"], ["d"]),
             helper.make_node("Max", ["a", "b"], ["m"])]
    return _graph(nodes, [_vi("a", T.INT64), _vi("b", T.INT64), _vi("f", T.FLOAT)],
                  [_vi("p", T.INT64), _vi("lt", T.BOOL), _vi("d", T.INT64), _vi("m", T.INT64)],
                  [helper.make_tensor("k", T.INT64, [], [-3])])


def test_int64_data_is_computed_in_int64(ctx) -> None:
    rng = np.random.default_rng()
    a = rng.integers(-2**50, 2**50, N) | 1
    b = rng.integers(-2**50, 2**50, N) | 1
    f = (rng.standard_normal(N) * 1e12).astype(np.float32)
    m = onnx_model.load(_data_model(), ctx)
    out = m(a=a, b=b, f=f)
    np.testing.assert_array_equal(out["p"], (a + b) * -3)
    np.testing.assert_array_equal(out["lt"], a < (a + b) * -3)
    np.testing.assert_array_equal(out["d"], np.trunc(f).astype(np.int64) - a)
    np.testing.assert_array_equal(out["m"], np.maximum(a, b))
    assert out["p"].dtype == np.int64


def _index_model():
    """Gather(table, ids + 1): the INT64 ids are indices, so narrowed to int32."""
    nodes = [helper.make_node("Add", ["ids", "one"], ["shifted"]),
             helper.make_node("Gather", ["table", "shifted"], ["rows"], axis=0)]
    return _graph(nodes, [_vi("table", T.FLOAT, (7, 3)), _vi("ids", T.INT64, (5,))],
                  [_vi("rows", T.FLOAT, (5, 3))], [helper.make_tensor("one", T.INT64, [], [1])])


def test_indices_stay_int32(ctx) -> None:
    model = _index_model()
    assert int64_data_values(model.graph) == frozenset()
    m = onnx_model.load(model, ctx)
    table = np.arange(21, dtype=np.float32).reshape(7, 3)
    ids = np.array([0, 5, 2, 3, 1])
    np.testing.assert_array_equal(m(table=table, ids=ids)["rows"], table[ids + 1])
    with pytest.raises(VkumdValueError, match="do not fit in int32"):
        m(table=table, ids=np.array([2**40, 0, 0, 0, 0]))


def test_the_rule_ties_operands_together() -> None:
    """A data op's operands share one type: one of them read as an index narrows the rest."""
    model = _data_model()
    assert int64_data_values(model.graph) >= {"a", "b", "s", "k", "p", "fi", "d", "m"}
    nodes = [*model.graph.node, helper.make_node("Gather", ["f", "d"], ["g"], axis=0)]
    tied = _graph(nodes, list(model.graph.input), list(model.graph.output),
                  list(model.graph.initializer))
    kept = int64_data_values(tied.graph)
    assert not kept & {"a", "fi", "d", "s", "p", "k", "b", "m"}
