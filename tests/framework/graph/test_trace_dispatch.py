"""The vkumd.ops seam: exact signatures, eager calls untouched, traced calls recorded, and
what the check costs on the eager path."""

from __future__ import annotations

import inspect
import timeit

import numpy as np
import pytest

import vkumd.framework.ops as framework_ops
from vkumd import ops
from vkumd.framework.graph.trace import trace
from vkumd.framework.ops.tracing_dispatch import install, traceable


@pytest.mark.parametrize("name", ops.__all__)
def test_every_public_op_is_wrapped_with_its_exact_signature(name: str) -> None:
    op = getattr(ops, name)
    assert op is getattr(framework_ops, name)
    assert hasattr(op, "eager") and op.__doc__ == op.eager.__doc__
    assert op.__name__ == op.eager.__name__
    assert inspect.signature(op, follow_wrapped=False) == inspect.signature(op.eager)


def test_eager_calls_reach_the_op_unchanged() -> None:
    seen = []

    def probe(a, b=2, *rest, scale=1.0, out=None, **extra):
        seen.append((a, b, rest, scale, out, extra))
        return "eager"

    op = traceable("probe", probe)
    assert op(1) == "eager" and op(1, 3, 4, 5, scale=2.0, out="o", flag=True) == "eager"
    assert seen == [(1, 2, (), 1.0, None, {}), (1, 3, (4, 5), 2.0, "o", {"flag": True})]
    with pytest.raises(TypeError):
        op()  # the signature's own error, as calling the op


def test_eager_errors_pass_through_when_nothing_is_traced() -> None:
    def refuse(x):
        raise ValueError("eager says no")

    with pytest.raises(ValueError, match="eager says no"):
        traceable("refuse", refuse)(1)


def test_a_name_imported_before_tracing_still_records() -> None:
    from vkumd.ops import matmul, softmax  # bound once, as user code does

    t = trace(lambda x: softmax(matmul(x, x, trans_b=True)), {"x": np.ones((2, 3), np.float32)})
    assert [n.op for n in t.graph.nodes] == ["matmul", "softmax"]


def test_variadic_ops_find_traced_tensors_in_lists() -> None:
    calls = []

    def concat(tensors, axis=0):  # the shape ops.concat is expected to take
        raise TypeError("concat: tensors must be Tensors")

    namespace = {"concat": concat}
    install(namespace, ["concat"])
    install(namespace, ["concat"])  # idempotent
    assert namespace["concat"].eager is concat

    def f(x):
        calls.append(1)
        return namespace["concat"]([x, x * 2.0], axis=1)

    t = trace(f, {"x": np.ones((2, 3), np.float32)})
    assert [n.op for n in t.graph.nodes] == ["mul", "concat"]
    assert t.graph.outputs[0].shape == (2, 6)


def test_the_check_costs_well_under_half_a_microsecond() -> None:
    def op(a, b, *, out=None):
        return out

    wrapped = traceable("add", op)
    x = object()
    number = 50_000

    def best(fn) -> float:
        return min(timeit.repeat(lambda: fn(x, x, out=x), number=number, repeat=7)) / number

    # Measured here: about 0.06-0.1 us added (a generic *args/**kwargs wrapper: ~0.3 us).
    overhead = best(wrapped) - best(op)
    assert overhead < 0.5e-6, f"the tracing check costs {overhead * 1e6:.2f} us a call"
