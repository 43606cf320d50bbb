"""One method set for eager and traced tensors (``vkumd.framework.graph.methods``).

No device: the traced side runs through the float64 reference; the eager side's calls are
checked on a stand-in namespace (the device tests of the same methods are in
``tests/framework/test_tensor_api.py``).
"""

from __future__ import annotations

import inspect
import sys
import types

import numpy as np
import pytest

import vkumd.framework.ops as framework_ops
from vkumd import ops
from vkumd.framework.graph import evaluate
from vkumd.framework.graph.errors import GraphError
from vkumd.framework.graph.methods import TensorMethods, unary_methods
from vkumd.framework.graph.proxy import TracedTensor
from vkumd.framework.graph.registry import OPS
from vkumd.framework.graph.trace import TraceError, Tracer, trace
from vkumd.framework.tensor import Tensor
from vkumd.framework.tensor_methods import EagerMethods

rng = np.random.default_rng(5)
X = rng.standard_normal((4, 6)).astype(np.float32)


def run(fn, x=X):
    t = trace(fn, {"x": x})
    return t, evaluate(t.graph, {"x": x})


def surface(cls: type) -> set[str]:
    return {n for n in dir(cls) if n not in dir(object)
            and (callable(inspect.getattr_static(cls, n))
                 or isinstance(inspect.getattr_static(cls, n), property))}


def test_both_classes_take_every_shared_method_from_one_class() -> None:
    shared = surface(TensorMethods)
    for cls in (Tensor, TracedTensor):
        for name in shared - {"__getitem__", "__setitem__"}:
            assert inspect.getattr_static(cls, name) is inspect.getattr_static(
                TensorMethods, name), (cls.__name__, name)
    # What each keeps of its own: indexing, item assignment, identity or recorded ==; and
    # the eager tensor the host steps, which no graph records (their sizes are data).
    assert set(vars(EagerMethods)) - {"__module__", "__doc__", "__slots__"} == {
        "_ops", "_value_error", "_type_error", "__getitem__", "__setitem__", "nonzero",
        "unique", "masked_select"}


def test_every_one_input_registry_op_is_a_method_of_both() -> None:
    names = unary_methods()
    assert {"exp", "sqrt", "tanh", "erf", "sigmoid", "hardswish", "relu", "silu",
            "gelu_tanh"} <= set(names)
    assert "scale" not in names and "cast" not in names  # they take an argument
    for name in names:
        assert callable(getattr(framework_ops, name)), name  # what the eager method calls
    t, outs = run(lambda x: tuple(getattr(x, n)() for n in names))
    assert [n.op for n in t.graph.nodes] == names
    for name, out in zip(names, outs, strict=True):
        want = OPS[name].reference([X.astype(np.float64)], {}, [X.shape])[0]
        np.testing.assert_allclose(out, want, rtol=1e-12, err_msg=name)
    tracer = Tracer()
    assert set(names) <= set(dir(TracedTensor(tracer.input("x", (2,)), tracer)))


def test_an_eager_operator_is_one_frame_over_the_op() -> None:
    # Counted, not timed: `a + b` runs __add__ and then the op itself, nothing between.
    def add(a, b):
        return a

    class Stand(TensorMethods):
        _ops = types.SimpleNamespace(add=add)

    x, events = Stand(), []

    def profile(frame, event, arg) -> None:
        if event == "call":
            events.append(frame.f_code.co_name)

    sys.setprofile(profile)
    try:
        result = x + x
    finally:
        sys.setprofile(None)
    assert result is x and events == ["__add__", "add"]
    _ = Tensor._ops  # the descriptor puts the module itself in its place on first read
    assert vars(EagerMethods)["_ops"] is framework_ops


def test_traced_tensors_gain_the_eager_methods() -> None:
    y = rng.standard_normal((4, 6)).astype(np.float32)

    def f(x):
        lo, hi = x.split(4, dim=1)
        return (x.to("float16"), x.clone(), lo, hi, x.eq(x), x.ne(x * 2.0), x // 2.0,
                3.0 // x, x.gelu(approximate="tanh"), x.sum(dim=1, keepdim=True),
                x.mean(-1), y @ x.T, x.view(2, 12), list(x)[3])

    t, outs = run(f)
    xd = X.astype(np.float64)
    assert outs[1] is not None and "copy" not in [n.op for n in t.graph.nodes]
    wants = [X.astype(np.float16), xd, xd[:, :4], xd[:, 4:], np.ones_like(xd),
             np.ones_like(xd), np.floor(xd / 2), np.floor(3 / xd), None,
             xd.sum(-1, keepdims=True), xd.mean(-1), y.astype(np.float64) @ xd.T,
             xd.reshape(2, 12), xd[3]]
    for i, (got, want) in enumerate(zip(outs, wants, strict=True)):
        if want is not None:
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=str(i))


def test_vkumd_ops_views_and_windows_record_with_their_eager_signatures() -> None:
    x = rng.standard_normal((6, 11, 3)).astype(np.float32)

    def f(x):
        return (ops.slice(x, [-5, 1], [9, 100], axes=[1, 2]), ops.slice(x, 2, 4),
                ops.flatten(x, 1), ops.unsqueeze(x, -1), ops.squeeze(x[:, :1], 1),
                *ops.split(x, 4, 1))

    _, outs = run(f, x)
    wants = [x[:, -5:9, 1:], x[2:4], x.reshape(6, 33), x[..., None], x[:, 0],
             x[:, :4], x[:, 4:8], x[:, 8:]]
    for got, want in zip(outs, wants, strict=True):
        np.testing.assert_array_equal(got, want)


def test_both_spellings_and_their_conflicts() -> None:
    _, outs = run(lambda x: (x.sum(axis=-1, keepdims=True), x.max(1), x.softmax(axis=1)))
    assert outs[0].shape == (4, 1) and outs[1].shape == (4,)
    with pytest.raises(TraceError, match="dim and axis both given"):
        trace(lambda x: x.sum(1, axis=1), {"x": X})
    with pytest.raises(TraceError, match="keepdim and keepdims both given"):
        trace(lambda x: x.sum(keepdim=True, keepdims=True), {"x": X})
    _, outs = run(lambda x: (x.softmax(dim=0),))
    assert outs[0].shape == X.shape
    with pytest.raises(GraphError, match=r"softmax \(test_tensor_surface.py:\d+\): axis 5 is out"):
        trace(lambda x: x.softmax(dim=5), {"x": X})
    with pytest.raises(TraceError, match="approximate='fast'"):
        trace(lambda x: x.gelu(approximate="fast"), {"x": X})
    with pytest.raises(AttributeError, match="no attribute 'cumsum'"):
        trace(lambda x: x.cumsum(), {"x": X})
