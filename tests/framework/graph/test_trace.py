"""Tracing through TracedTensor: the graphs it records, checked with the float64 reference.

No device: every graph is run by ``reference.evaluate`` against numpy written out directly.
"""

from __future__ import annotations

import numpy as np
import pytest

from vkumd import ops
from vkumd.framework.graph import Dim, GraphError, evaluate, run_passes, sym
from vkumd.framework.graph.passes import FUSION
from vkumd.framework.graph.proxy import TracedTensor
from vkumd.framework.graph.trace import trace
from vkumd.framework.graph.trace_dims import SymbolicDim

rng = np.random.default_rng(11)


def f32(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def run(fn, inputs, **kw):
    t = trace(fn, inputs, **kw)
    return t, evaluate(t.graph, inputs)


def ops_of(t) -> list[str]:
    return [n.op for n in t.graph.nodes]


def test_scalars_on_both_sides_of_every_operator() -> None:
    x = f32(3, 4)

    def f(x):
        return [x + 1.5, 1.5 + x, x - 2, 2 - x, x * 3, 3 * x, x / 4, 4 / x, -x, +x]

    t, outs = run(f, {"x": x})
    xd = x.astype(np.float64)
    want = [xd + 1.5, 1.5 + xd, xd - 2, 2 - xd, xd * 3, 3 * xd, xd / 4, 4 / xd, -xd, xd]
    for got, exp in zip(outs, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-6)
    assert t.output_keys == 10
    assert ops_of(t) == ["add", "add", "sub", "sub", "mul", "mul", "div", "div", "scale"]


def test_tensor_operators_and_numpy_operands() -> None:
    x, y, m = f32(2, 3), f32(2, 3), f32(3, 5)
    c = np.arange(3, dtype=np.float64)  # an array operand takes the tensor's dtype

    def f(x, y, m):
        return {"sum": x + y, "prod": x * y, "ratio": x / (y * y + 1), "mm": x @ m,
                "rmm": m.T @ x.T, "left": c - x, "right": x + c,
                "half": np.float16(0.5) * x.astype("float16")}

    t, outs = run(f, {"x": x, "y": y, "m": m})
    xd, yd, md = (a.astype(np.float64) for a in (x, y, m))
    assert t.output_keys == ("sum", "prod", "ratio", "mm", "rmm", "left", "right", "half")
    assert t.graph.outputs[-1].dtype.name == "float16"
    half = (x.astype(np.float16) * np.float16(0.5)).astype(np.float64)
    want = [xd + yd, xd * yd, xd / (yd * yd + 1), xd @ md, md.T @ xd.T, c - xd, xd + c, half]
    for got, exp in zip(outs, want, strict=True):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_layout_methods() -> None:
    x = f32(2, 3, 4)

    def f(x):
        return (x.reshape(6, 4), x.view((-1,)), x.flatten(1), x.flatten(0, 1),
                x.unsqueeze(1), x.unsqueeze(-1), x.reshape(2, 1, 3, 4).squeeze(),
                x.reshape(2, 1, 12).squeeze(1), x.transpose(0, 2), x.permute(2, 0, 1),
                x.permute((1, 2, 0)), x.T, x.astype("float16"))

    t, outs = run(f, {"x": x})
    xd = x.astype(np.float64)
    want = [xd.reshape(6, 4), xd.reshape(-1), xd.reshape(2, 12), xd.reshape(6, 4),
            xd[:, None], xd[..., None], xd, xd.reshape(2, 12), xd.transpose(2, 1, 0),
            xd.transpose(2, 0, 1), xd.transpose(1, 2, 0), xd.T,
            xd.astype(np.float16).astype(np.float64)]
    for got, exp in zip(outs, want, strict=True):
        np.testing.assert_array_equal(got, exp)


@pytest.mark.parametrize("key", [
    (slice(None), slice(1, 3)), 0, -1, (Ellipsis, 1), (1, slice(None), slice(None, None, 2)),
    (None, 0), (slice(-2, None),), (Ellipsis, None), (slice(None), -2, None),
])
def test_slicing_matches_numpy(key) -> None:
    x = f32(3, 4, 5)
    t, (out,) = run(lambda x: (x[key],), {"x": x})
    np.testing.assert_array_equal(out, x.astype(np.float64)[key])
    assert set(ops_of(t)) <= {"slice", "reshape"}


def test_reductions_and_row_wise_methods() -> None:
    x, w, b, mask = f32(2, 5), f32(5), f32(5), f32(2, 5)

    def f(x, w, b, mask):
        return (x.sum(), x.mean(keepdims=True), x.max(axis=1), x.softmax(),
                x.softmax(scale=0.5, mask=mask), x.relu(), x.gelu(), x.silu(),
                x.layer_norm(w, b, eps=1e-6), x.rms_norm(w))

    t, outs = run(f, {"x": x, "w": w, "b": b, "mask": mask})
    assert ops_of(t) == ["sum", "mean", "max", "softmax", "softmax", "relu", "gelu", "silu",
                         "layer_norm", "rms_norm"]
    xd = x.astype(np.float64)
    np.testing.assert_allclose(outs[0], xd.sum(-1), rtol=1e-12)
    np.testing.assert_allclose(outs[1], xd.mean(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(outs[2], xd.max(-1), rtol=1e-12)
    e = np.exp(xd - xd.max(-1, keepdims=True))
    np.testing.assert_allclose(outs[3], e / e.sum(-1, keepdims=True), rtol=1e-12)
    np.testing.assert_allclose(outs[5], np.maximum(xd, 0))
    mu, var = xd.mean(-1, keepdims=True), xd.var(-1, keepdims=True)
    np.testing.assert_allclose(outs[8], (xd - mu) / np.sqrt(var + 1e-6) * w + b, rtol=1e-9)


def test_functional_ops_record_nodes_with_their_attributes() -> None:
    x, w, b, r = f32(2, 3, 8), f32(4, 8), f32(4), f32(2, 3, 4)

    def f(x, w, b, r):
        y = ops.matmul(x, w, bias=b, activation="gelu", residual=r, alpha=0.5, trans_b=True)
        z = ops.scale(ops.cast(ops.layer_norm(y, eps=1e-3), "float32"), 2.0)
        return ops.copy(ops.transpose(ops.permute(z, (0, 2, 1)), 1, 2)), ops.softmax(z, scale=3)

    t, outs = run(f, {"x": x, "w": w, "b": b, "r": r})
    node = t.graph.nodes[0]
    assert node.op == "matmul" and node.attrs == {"activation": "gelu", "alpha": 0.5,
                                                  "trans_b": True}
    assert [v.name for v in node.inputs] == ["x", "w", "b", "r"]
    assert "copy" not in ops_of(t)  # the identity in a graph
    from vkumd.framework.graph.reference import gelu

    xd = x.astype(np.float64)
    y = gelu(0.5 * xd @ w.T.astype(np.float64) + b) + r
    mu, var = y.mean(-1, keepdims=True), y.var(-1, keepdims=True)
    z = 2 * (y - mu) / np.sqrt(var + 1e-3)
    np.testing.assert_allclose(outs[0], z, rtol=1e-6, atol=1e-6)


def test_mixed_operands_in_functional_calls() -> None:
    """A traced tensor past the first argument, numbers and arrays first, still record."""
    x, w = f32(3, 4), f32(4, 4)

    def f(x):
        return ops.add(1.0, x), ops.matmul(w, x.T), ops.mul(np.float32(2), x)

    t, outs = run(f, {"x": x})
    assert ops_of(t) == ["add", "transpose", "matmul", "mul"]
    assert [v.name for v in t.graph.weights if v.data.shape == (4, 4)] == ["captured"]
    xd = x.astype(np.float64)
    np.testing.assert_allclose(outs[1], w.astype(np.float64) @ xd.T, rtol=1e-5)
    np.testing.assert_allclose(outs[2], 2 * xd)


def test_captured_arrays_become_one_constant_each() -> None:
    w = f32(4, 4)

    def f(x):
        return (x @ w) @ w

    t = trace(f, {"x": f32(2, 4)})
    assert len(t.graph.weights) == 1 and t.graph.weights[0].name == "captured"


def test_symbolic_dims_print_as_symbols_and_shapes_are_dims() -> None:
    seen = {}

    def f(x, mask):
        seen["shape"] = x.shape
        seen["dtype"], seen["ndim"] = x.dtype, x.ndim
        b, s, h = x.shape
        y = x.reshape(b * s, h)  # symbolic dims in a reshape target
        return (y @ y.T).reshape(b, s, b, s).sum() + mask, x.reshape(b, -1)

    t = trace(f, {"x": f32(2, 3, 4), "mask": f32(2, 3, 1)},
              dynamic={"x": {0: "batch", 1: "seq"}, "mask": {0: "batch", 1: "seq"}})
    b, s, h = seen["shape"]
    assert isinstance(b, SymbolicDim) and b == sym("batch") and h == 4
    assert seen["dtype"].name == "float32" and seen["ndim"] == 3
    assert isinstance(b * 2, SymbolicDim) and isinstance(b + s, SymbolicDim)
    text = str(t.graph)
    assert "float32[batch, seq, 4]" in text and "float32[batch*seq, 4]" in text
    assert "float32[batch, 4*seq]" in text
    # The IR stores plain Dims, not the tracing wrapper.
    shapes = [d for n in t.graph.nodes for d in n.attrs.get("shape", ())]
    assert shapes and not any(isinstance(d, SymbolicDim) for d in shapes)
    assert any(isinstance(d, Dim) for d in shapes)
    split = trace(lambda x: ops.split(x, [x.shape[0] - 1, 1], axis=0) if hasattr(ops, "split")
                  else x.tracer.call("split", x, [x.shape[0] - 1, 1], 0),
                  {"x": f32(3, 2)}, dynamic={"x": {0: "n"}})
    sizes = split.graph.nodes[0].attrs["sizes"]
    assert str(sizes[0]) == "n - 1" and type(sizes[0]) is Dim
    xs, ms = f32(3, 5, 4), f32(3, 5, 1)
    out, flat = evaluate(t.graph, {"x": xs, "mask": ms})
    y = xs.astype(np.float64).reshape(15, 4)
    np.testing.assert_allclose(out, (y @ y.T).reshape(3, 5, 3, 5).sum(-1) + ms, rtol=1e-6)
    assert flat.shape == (3, 20)


def test_positional_examples_are_named_after_parameters() -> None:
    def block(hidden, weight, scale=2.0):
        return hidden @ weight * scale

    t = trace(block, (f32(2, 3), f32(3, 3)), dynamic={0: {0: "rows"}})
    assert t.positional and t.input_names == ["hidden", "weight"]
    assert [v.name for v in t.graph.inputs] == ["hidden", "weight"]
    assert str(t.graph.inputs[0].shape[0]) == "rows"


def test_nodes_are_labelled_with_the_users_line() -> None:
    def f(x):
        y = x * 2.0
        return ops.relu(y)

    t = trace(f, {"x": f32(2, 2)})
    first = f.__code__.co_firstlineno
    assert [n.name for n in t.graph.nodes] == [f"test_trace.py:{first + 1}",
                                               f"test_trace.py:{first + 2}"]
    assert "# test_trace.py:" in str(t.graph)


def test_shape_errors_name_the_node_and_the_users_line() -> None:
    def f(x, w):
        return x @ w

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(GraphError, match=rf"= matmul \(test_trace.py:{line}\)"):
        trace(f, {"x": f32(2, 3), "w": f32(4, 5)})


def test_passes_run_on_traced_graphs() -> None:
    def f(x):
        return (x * 2.0) + (x * 2.0), x + 0  # CSE merges the two products

    t = trace(f, {"x": f32(3)})
    g = run_passes(t.graph, disable=FUSION)  # fusion would fold the product away
    assert len([n for n in g.nodes if n.op == "mul"]) == 1
    np.testing.assert_allclose(evaluate(g, {"x": np.ones(3, np.float32)})[0], [4, 4, 4])


def test_an_input_returned_as_is_and_iteration_over_a_static_axis() -> None:
    def f(x):
        rows = list(x)
        return x, rows[1] + rows[0], len(x)

    with pytest.raises(Exception, match="returned int 3 at position 2"):
        trace(f, {"x": f32(3, 2)})
    t = trace(lambda x: (x, *list(x)), {"x": f32(2, 2)})
    assert t.graph.outputs[0] is t.graph.inputs[0] and t.output_keys == 3


def test_repr_and_attribute_errors() -> None:
    def f(x):
        assert repr(x) == "TracedTensor(%0: float32[n, 2])"
        assert isinstance(x, TracedTensor)
        with pytest.raises(AttributeError, match="no attribute 'cumsum'.*offers"):
            x.cumsum()  # noqa: B018
        assert x.exp().value.producer.op == "exp"  # every one-input registry op is a method
        return x

    trace(f, {"x": f32(3, 2)}, dynamic={"x": {0: "n"}})
