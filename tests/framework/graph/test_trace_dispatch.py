"""The vkumd.ops seam: exact signatures, eager calls untouched, traced calls recorded, and
what the check costs on the eager path."""

from __future__ import annotations

import inspect
import sys

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


def test_the_eager_path_adds_one_frame_and_one_isinstance() -> None:
    # What the check costs, counted instead of timed (timings flake on a shared machine):
    # between the caller and the eager op the wrapper runs its own frame and a single
    # builtin call (the isinstance on the first argument); nothing else is called.
    def op(a, b, *, out=None):
        return out

    wrapped = traceable("add", op)
    x = object()
    events: list[tuple[str, str]] = []

    def profile(frame, event, arg) -> None:
        name = arg.__name__ if event.startswith("c_") else frame.f_code.co_name
        events.append((event, name))

    sys.setprofile(profile)
    try:
        result = wrapped(x, x, out=x)
    finally:
        sys.setprofile(None)
    assert result is x
    calls = [e for e in events if e[0] in ("call", "c_call")]
    assert calls == [("call", "add"), ("c_call", "isinstance"), ("call", "op"),
                     ("c_call", "setprofile")], calls
