"""What tracing refuses, and that every refusal names the user's line (or the call)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph import GraphError
from vkumd.framework.graph.trace import (
    DataDependentError,
    SymbolicDimError,
    TraceError,
    trace,
)

X = np.zeros((2, 3), np.float32)


def line_of(fn, offset: int = 1) -> str:
    return f"test_trace_errors.py:{fn.__code__.co_firstlineno + offset}"


HOST_READS = {
    "numpy": (lambda x: x.numpy(), r"\.numpy\(\)"),
    "float": (lambda x: float(x.sum().sum()), r"float\(\)"),
    "int": (lambda x: int(x), r"int\(\)"),
    "bool": (lambda x: bool(x), r"bool\(\)"),
    "if": (lambda x: x if x.sum().max() > 0 else -x, r"bool\(\) \(an `if`"),
    "asarray": (lambda x: np.asarray(x), r"np\.asarray\(\)"),
    "item": (lambda x: x.item(), r"\.item\(\)"),
    "tolist": (lambda x: x.tolist(), r"\.tolist\(\)"),
    "index": (lambda x: [1, 2, 3][x], r"use as an index"),
    "math": (lambda x: math.exp(x), r"float\(\)"),
}


@pytest.mark.parametrize("name", sorted(HOST_READS))
def test_host_reads_are_data_dependent_errors(name: str) -> None:
    fn, what = HOST_READS[name]
    with pytest.raises(DataDependentError, match=what) as info:
        trace(fn, {"x": X})
    text = str(info.value)
    assert "data-dependent control flow is not supported" in text
    assert "at test_trace_errors.py:" in text
    assert isinstance(info.value, VkumdValueError)  # the package's hierarchy


def test_an_if_on_a_comparison_names_its_line() -> None:
    def f(x):
        if x.max().max() > 0:  # the comparison itself records; the `if` cannot
            return x
        return -x

    with pytest.raises(DataDependentError, match=line_of(f)):
        trace(f, {"x": X})


def test_len_of_a_symbolic_dim() -> None:
    def f(x):
        return x[len(x) - 1]

    with pytest.raises(SymbolicDimError, match=rf"len\(\) .*{line_of(f)}.*symbolic batch"):
        trace(f, {"x": X}, dynamic={"x": {0: "batch"}})
    assert trace(f, {"x": X}).graph.outputs[0].shape == (3,)  # static: fine


SYMBOLIC_AS_INT = {
    "range": lambda x: [x[i] for i in range(x.shape[0])],
    "numpy shape": lambda x: x + np.zeros((x.shape[0], 3), np.float32),
    "int": lambda x: x * int(x.shape[0]),
    "sqrt": lambda x: x * (1 / math.sqrt(x.shape[0])),
    "true division": lambda x: x * (x.shape[0] / 2),
    "float product": lambda x: x * (x.shape[0] * 0.5),
    "derived dim": lambda x: x * float(x.shape[0] * 2 + 1),
    "slice bound": lambda x: x[: x.shape[0]],
    "axis": lambda x: x.transpose(x.shape[0], 1),
    "scale alpha": lambda x: ops.scale(x, x.shape[0]),
    "comparison": lambda x: x if x.shape[0] > 1 else -x,
    "truth value": lambda x: x if x.shape[0] else -x,
}


@pytest.mark.parametrize("name", sorted(SYMBOLIC_AS_INT))
def test_a_symbolic_dim_where_an_int_is_needed(name: str) -> None:
    with pytest.raises(SymbolicDimError, match=r"symbolic dimension (2\*)?n.*test_trace_errors"
                       ) as info:
        trace(SYMBOLIC_AS_INT[name], {"x": X}, dynamic={"x": {0: "n"}})
    assert isinstance(info.value, TypeError)


UNSUPPORTED = {
    "out=": (lambda x: ops.add(x, x, out=x), r"vkumd\.ops\.add\(\.\.\., out=\.\.\.\)"),
    "beta": (lambda x: ops.matmul(x, x.T, beta=1.0), r"beta scales out="),
    "variant": (lambda x: ops.matmul(x, x.T, variant="lanes"), r"drop variant="),
    "fill": (lambda x: ops.fill(x, 1.0), r"ops\.fill.*in place"),
    "setitem": (lambda x: x.__setitem__(0, 1.0), r"cannot write into a tensor in place"),
    "power": (lambda x: x ** 2, r"no power op"),
    "gather": (lambda x: x[x], r"indexing with TracedTensor"),
    "list index": (lambda x: x[[0, 1]], r"indexing with list"),
    "step": (lambda x: x[::0], r"step must be a nonzero int"),
    "two ellipses": (lambda x: x[..., ...], r"only one \.\.\."),
    "too many indices": (lambda x: x[0, 0, 0], r"too many indices \(3\)"),
    "index range": (lambda x: x[5], r"index 5 is out of range for axis 0 of size 2"),
    "sum axis": (lambda x: x.sum(axis=5), r"sum .*dim 5 is out of range"),
    "squeeze": (lambda x: x.squeeze(0), r"has size 2, not 1"),
    "unknown kwarg": (lambda x: ops.softmax(x, temperature=2), r"temperature"),
    "bad activation": (lambda x: ops.matmul(x, x.T, activation="tanh"), r"activation"),
    "returns a number": (lambda x: 1.0, r"returned float 1\.0"),
    "returns None": (lambda x: None, r"returned NoneType"),
}


@pytest.mark.parametrize("name", sorted(UNSUPPORTED))
def test_unsupported_calls_and_arguments(name: str) -> None:
    fn, what = UNSUPPORTED[name]
    with pytest.raises((GraphError, VkumdTypeError, TypeError), match=what):
        trace(fn, {"x": X})


def test_an_unsupported_op_names_itself() -> None:
    from vkumd.framework.graph.trace import Tracer

    tracer = Tracer()
    from vkumd.framework.graph.proxy import TracedTensor

    x = TracedTensor(tracer.input("x", (2,)), tracer)
    with pytest.raises(TraceError, match=r"vkumd\.ops\.deform_conv2d has no graph form"):
        tracer.call("deform_conv2d", x)


def test_a_traced_tensor_kept_after_the_trace() -> None:
    kept = []

    def f(x):
        kept.append(x)
        return x * 2.0

    trace(f, {"x": X})
    with pytest.raises(TraceError, match="this trace has finished"):
        kept[0] + 1.0  # noqa: B018
    with pytest.raises(TraceError, match="belongs to another trace"):
        trace(lambda y: y + kept[0], {"y": X})


def test_shape_mismatch_in_an_operator_names_the_line() -> None:
    def f(x, y):
        return x + y

    with pytest.raises(GraphError, match=rf"= add \({line_of(f)}\).*broadcast"):
        trace(f, {"x": X, "y": np.zeros((4,), np.float32)})


def test_bad_examples_and_dynamic_specs() -> None:
    with pytest.raises(TraceError, match="dynamic= names input 'y'"):
        trace(lambda x: x, {"x": X}, dynamic={"y": {0: "n"}})
    with pytest.raises(TraceError, match="axis 5 is out of range"):
        trace(lambda x: x, {"x": X}, dynamic={"x": {5: "n"}})
    with pytest.raises(TraceError, match="must map axes to symbol names"):
        trace(lambda x: x, {"x": X}, dynamic={"x": [0]})
    with pytest.raises(VkumdValueError, match="must be an identifier"):
        trace(lambda x: x, {"x": X}, dynamic={"x": {0: "not a name"}})
    with pytest.raises(TraceError, match="symbol 'n' is 2 in input 'x' but 3 in 'y'"):
        trace(lambda x, y: x, {"x": X, "y": np.zeros((3,), np.float32)},
              dynamic={"x": {0: "n"}, "y": {0: "n"}})
    with pytest.raises(VkumdTypeError, match="float64 are not converted silently"):
        trace(lambda x: x, {"x": np.zeros(3)})


def test_compile_reports_trace_errors_too() -> None:
    with pytest.raises(DataDependentError):
        vkumd.compile(lambda x: x.numpy(), {"x": X})
    with pytest.raises(VkumdValueError, match="unknown pass"):
        vkumd.compile(lambda x: x + 1, {"x": X}, disable=["fusion_typo"])
