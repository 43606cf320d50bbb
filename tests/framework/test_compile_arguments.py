"""Arguments of ``vkumd.compile`` and of ops that used to be ignored or fail untyped: a
misspelt bucket symbol, a symbol that is not a name, float attributes past float32's range
(refused by name in graphs as eagerly), and numbers past the type's range that compute."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphError, TraceError


def _x(ctx: Any) -> Any:
    return ctx.tensor(np.ones((3, 2), np.float32))


def _compile(ctx: Any, **kwargs: Any) -> Any:
    return vkumd.compile(lambda x: x * 2, {"x": _x(ctx)}, dynamic={"x": {0: "batch"}},
                         **kwargs)


def test_a_misspelt_bucket_symbol_is_refused_naming_the_known_ones(ctx: Any) -> None:
    with pytest.raises(VkumdValueError, match="symbol 'bacth'.*its symbols: 'batch'"):
        _compile(ctx, buckets={"bacth": [4, 8]})
    with pytest.raises(VkumdValueError, match="none \\(all sizes fixed\\)"):
        vkumd.compile(lambda x: x * 2, {"x": _x(ctx)}, buckets={"batch": [4]})
    f = _compile(ctx, buckets={"batch": [4, 8]})
    np.testing.assert_array_equal(f(_x(ctx)).numpy(), 2.0)


@pytest.mark.parametrize("buckets", [[4], {"batch": 4}, {"batch": ["a"]}, {"batch": [2.5, 8]},
                                     {"batch": "48"}])
def test_malformed_buckets_are_refused_typed(ctx: Any, buckets: Any) -> None:
    with pytest.raises(VkumdTypeError, match="buckets"):
        _compile(ctx, buckets=buckets)


def test_a_symbol_must_be_a_name(ctx: Any) -> None:
    with pytest.raises(TraceError, match="a symbol is a name"):
        vkumd.compile(lambda x: x * 2, {"x": _x(ctx)}, dynamic={"x": {0: 3}})


@pytest.mark.parametrize("value", [1e300, -1e300, 10**400])
def test_graph_attributes_past_float32_are_refused_naming_the_node(ctx: Any,
                                                                   value: Any) -> None:
    with pytest.raises(GraphError, match=r"layer_norm.*attribute eps=.*outside float32's "
                       r"range"):
        vkumd.compile(lambda x: x.layer_norm(eps=value), {"x": _x(ctx)})
    with pytest.raises(GraphError, match="softmax.*attribute scale=.*outside float32"):
        vkumd.compile(lambda x: ops.softmax(x, scale=value), {"x": _x(ctx)})


@pytest.mark.parametrize("value, want", [(1e300, np.inf), (-1e40, -np.inf), (10**400, np.inf)])
def test_numbers_past_the_type_compute_as_infinity(ctx: Any, value: Any, want: float) -> None:
    # A number operand is rounded to the tensor's type (docs: past its range, infinity),
    # eagerly, through scale and in a compiled graph alike; none ends in OverflowError.
    x = _x(ctx)
    for got in (ops.add(x, value), ops.mul(x, value), ops.scale(x, value),
                vkumd.compile(lambda a: a * value, {"a": x})(x)):
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(ops.div(x, value).numpy(), 0.0)


@pytest.mark.parametrize("kwargs, error, fragment", [
    ({"dynamic": "x"}, TraceError, "give a dict of input"),
    ({"passes": [1.0]}, VkumdTypeError, "pass names are strings"),
    ({"disable": "cse"}, VkumdTypeError, "give a list of pass names"),
    ({"disable": [None]}, VkumdTypeError, "pass names are strings"),
], ids=["dynamic_string", "passes_float", "disable_string", "disable_none"])
def test_malformed_compile_arguments_are_refused_typed(ctx: Any, kwargs: dict, error: type,
                                                       fragment: str) -> None:
    # These ended in ValueError or TypeError from dict() and str.join.
    with pytest.raises(error, match=fragment):
        vkumd.compile(lambda x: x * 2, {"x": _x(ctx)}, **kwargs)


def test_examples_the_function_cannot_take_are_refused(ctx: Any) -> None:
    with pytest.raises(TraceError, match="example_inputs is NoneType"):
        vkumd.compile(lambda x: x * 2, None)
    with pytest.raises(TraceError, match=r"cannot take the example inputs \(none\)"):
        vkumd.compile(lambda x: x * 2, {})
    with pytest.raises(TraceError, match="cannot take the example inputs \\('y'\\)"):
        vkumd.compile(lambda x: x * 2, {"y": _x(ctx)})
