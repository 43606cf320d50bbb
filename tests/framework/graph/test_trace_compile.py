"""vkumd.compile end to end on the device: traced, optimised, run by the eager interpreter, and
compared with the same function called eagerly and with the float64 graph reference."""

from __future__ import annotations

import math

import numpy as np
import pytest

import vkumd
from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework import compile as compile_module
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.interpret import run_graph
from vkumd.testing.numerics import rel_error as rel

rng = np.random.default_rng(5)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def check(ctx, fn, arrays: dict, *, tol: float = 1e-5, dynamic=None, eager: bool = True):
    """Compile ``fn``, run it through the interpreter, compare with eager and reference."""
    tensors = {k: ctx.tensor(v) for k, v in arrays.items()}
    cf = vkumd.compile(fn, tensors, dynamic=dynamic)
    got = cf.run_eager(**tensors)
    want = evaluate(cf.traced_graph, arrays)
    got_list = list(got) if isinstance(got, tuple) else [got]
    for g, w in zip(got_list, want, strict=True):
        assert rel(g, w) < tol
    if eager:  # the same function on eager tensors, op by op
        direct = fn(**tensors)
        direct = list(direct) if isinstance(direct, tuple) else [direct]
        for g, d in zip(got_list, direct, strict=True):
            assert rel(g, d.numpy()) < tol
    return cf


def mlp(x, w1, b1, w2, b2):
    h = ops.matmul(x, w1, bias=b1, activation="gelu")
    return ops.matmul(h, w2, bias=b2, trans_b=True)


def test_mlp(ctx) -> None:
    cf = check(ctx, mlp, {"x": f32(6, 16), "w1": f32(16, 32, scale=0.3), "b1": f32(32),
                          "w2": f32(8, 32, scale=0.3), "b2": f32(8)})
    assert [n.op for n in cf.graph.nodes] == ["matmul", "matmul"]


def block(x, wq, wk, wv, wo, bo, g1, be1, w1, b1, w2, b2):
    """A one-head transformer layer written out: attention as matmul/softmax/matmul."""
    d = x.shape[-1]
    q, k, v = (ops.matmul(x, w) for w in (wq, wk, wv))
    p = ops.softmax(ops.matmul(q, k, trans_b=True), scale=1 / math.sqrt(d))
    h = ops.layer_norm(ops.matmul(ops.matmul(p, v), wo, bias=bo, residual=x), g1, be1)
    f = ops.matmul(h, w1, bias=b1, activation="gelu")
    return ops.layer_norm(ops.matmul(f, w2, bias=b2, residual=h), eps=1e-6)


def test_transformer_block_written_out(ctx) -> None:
    d, ff = 16, 32
    arrays = {"x": f32(2, 5, d), **{w: f32(d, d, scale=0.25) for w in ("wq", "wk", "wv", "wo")},
              "bo": f32(d), "g1": f32(d), "be1": f32(d), "w1": f32(d, ff, scale=0.25),
              "b1": f32(ff), "w2": f32(ff, d, scale=0.25), "b2": f32(d)}
    cf = check(ctx, block, arrays, dynamic={"x": {0: "batch", 1: "seq"}})
    assert "float32[batch, seq, seq]" in str(cf.graph)
    x = f32(3, 7, d)  # another batch and length through the same graph
    out = cf.run_eager(**{**arrays, "x": x})
    assert out.shape == (3, 7, d)
    assert rel(out, evaluate(cf.graph, {**arrays, "x": x})[0]) < 1e-5


def multi_head(x, wqkv, wo, heads: int = 2):
    """Tensor methods (reshape, permute, slicing, @) around ops.attention."""
    b, s, d = x.shape
    qkv = (x @ wqkv).reshape(b, s, 3, heads, d // heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv[0], qkv[1], qkv[2]
    o = ops.attention(q, k, v, causal=True)
    return o.permute(0, 2, 1, 3).reshape(b, s, d) @ wo + x


def test_multi_head_attention_with_tensor_methods(ctx) -> None:
    d = 16
    arrays = {"x": f32(2, 6, d), "wqkv": f32(d, 3 * d, scale=0.25), "wo": f32(d, d, scale=0.25)}
    cf = check(ctx, multi_head, arrays, dynamic={"x": {1: "seq"}}, eager=False)
    assert "attention" in [n.op for n in cf.graph.nodes]
    x = f32(2, 9, d)
    assert rel(cf.run_eager(x=x, wqkv=arrays["wqkv"], wo=arrays["wo"]),
               evaluate(cf.graph, {**arrays, "x": x})[0]) < 1e-5


def test_elementwise_chain_with_scalars_on_both_sides(ctx) -> None:
    def chain(x, y):
        z = (2.0 - x) * y + 1.0
        z = 3.0 * z / (y * y + 4.0) - x / 2
        return -z.relu() + 0.5, (1.0 / (x * x + 1.0)).silu()

    arrays = {"x": f32(4, 8), "y": f32(4, 8)}
    cf = check(ctx, chain, arrays, eager=False)
    x, y = (a.astype(np.float64) for a in arrays.values())
    z = 3.0 * ((2.0 - x) * y + 1.0) / (y * y + 4.0) - x / 2
    first, second = cf.run_eager(**arrays)
    assert rel(first, -np.maximum(z, 0) + 0.5) < 1e-5
    u = 1.0 / (x * x + 1.0)
    assert rel(second, u / (1 + np.exp(-u))) < 1e-5


def test_eager_chain_matches_the_same_ops_eagerly(ctx) -> None:
    def chain(x, y):
        a = ops.mul(ops.sub(x, y), ops.scale(y, 0.5))
        return ops.div(ops.gelu_tanh(ops.add(a, x)), ops.add(ops.relu(y), ops.scale(x, 0.0)
                                                           )), ops.mean(a, keepdims=True)

    check(ctx, chain, {"x": f32(3, 8), "y": np.abs(f32(3, 8)) + 1})


WINDOW_OPS = {
    "max_pool2d": lambda x: ops.max_pool2d(x, (3, 2), stride=(2, 1), pads=(1, 0, 1, 1)),
    "max_pool2d_indices": lambda x: ops.max_pool2d_indices(x, (2, 3), stride=(2, 2))[0],
    "avg_pool2d": lambda x: ops.avg_pool2d(x, (3, 3), pads=(1, 1, 1, 1)),
    "lp_pool2d": lambda x: ops.lp_pool2d(x, (2, 2), p=3.0),
    "lrn": lambda x: ops.lrn(x, 3),
    "pad": lambda x: ops.pad(x, (0, 0, 1, 2, 0, 0, 2, 1), value=0.5),
    "pool_chain": lambda x: ops.avg_pool2d(ops.max_pool2d(x, (2, 2)), (2, 2), stride=(1, 1)),
}


@pytest.mark.parametrize("name", list(WINDOW_OPS))
def test_ops_taking_an_attribute_by_position_trace(ctx, name: str) -> None:
    """``max_pool2d(x, kernel)``: an attribute given by position (the builder takes only
    inputs by position) is recorded by its name, and the compiled function gives the eager
    op's result on a 7 x 9 map."""
    fn = WINDOW_OPS[name]
    cf = check(ctx, fn, {"x": f32(2, 5, 7, 9)})
    assert cf.executor == "compiled"
    x = f32(2, 5, 7, 9)
    got = cf(x)
    assert rel(got, fn(ctx.tensor(x)).numpy()) < 1e-6


def test_calling_conventions_and_outputs(ctx) -> None:
    def pair(a, b):
        return {"s": a + b, "p": a * b}

    cf = vkumd.compile(pair, (np.ones((2, 2), np.float32), np.ones((2, 2), np.float32)),
                       ctx=ctx)
    a, b = f32(2, 2), f32(2, 2)
    for out in (cf(a, b), cf(a, b=b), cf(b=b, a=a), cf.run_eager(ctx.tensor(a), b)):
        assert set(out) == {"s", "p"}
        np.testing.assert_allclose(out["s"].numpy(), a + b, rtol=1e-6)
        np.testing.assert_allclose(out["p"].numpy(), a * b, rtol=1e-6)
    with pytest.raises(VkumdTypeError, match="missing input"):
        cf(a)
    with pytest.raises(VkumdTypeError, match="has no input 'c'"):
        cf(a, b, c=a)
    with pytest.raises(VkumdTypeError, match="got input 'a' twice"):
        cf(a, b, a=a)
    with pytest.raises(VkumdValueError, match="input 'a'"):
        cf(f32(3, 2), b)  # a static dim of another size
    with pytest.raises(VkumdTypeError, match="is float16; the graph takes float32"):
        cf(ctx.tensor(a.astype(np.float16)), b)
    assert repr(cf).startswith("<CompiledFunction pair(a, b):")


def test_closure_weights_upload_once(ctx) -> None:
    w = ctx.tensor(f32(8, 8))

    def layer(x):
        return ops.matmul(x, w, activation="relu")

    cf = vkumd.compile(layer, {"x": f32(3, 8)}, dynamic={"x": {0: "n"}}, ctx=ctx)
    assert [v.name for v in cf.graph.weights] == ["captured"]
    for n in (1, 4):
        x = f32(n, 8)
        np.testing.assert_allclose(cf(x=x).numpy(), np.maximum(x @ w.numpy(), 0), rtol=1e-5,
                                   atol=1e-6)
        # The eager interpreter keeps its own uploads of the weights: once, too.
        np.testing.assert_allclose(cf.run_eager(x=x).numpy(), np.maximum(x @ w.numpy(), 0),
                                   rtol=1e-5, atol=1e-6)
    assert len(cf._constants) == 1


def test_summary_dot_and_the_executor_choice(ctx) -> None:
    cf = vkumd.compile(mlp, {"x": f32(2, 4), "w1": f32(4, 4), "b1": f32(4), "w2": f32(4, 4),
                             "b2": f32(4)}, disable=["cse"], ctx=ctx)
    # Two matmuls lower to the device, so the compiled executor runs them, and says so.
    assert cf.executor == "compiled"
    text = cf.summary()
    assert "matmul" in text and "executor: compiled" in text and "cse" not in text
    cf(x=f32(2, 4), w1=f32(4, 4), b1=f32(4), w2=f32(4, 4), b2=f32(4))
    assert isinstance(cf._compiled, CompiledGraph)
    assert cf.graph.to_dot().startswith("digraph")
    assert "matmul" in str(cf.graph) and cf.traced_graph is not cf.graph


def test_a_compiled_graph_class_is_used_when_present(ctx, monkeypatch) -> None:
    """The interface assumed of CompiledGraph: (graph, ctx, buckets=), called by name."""
    calls = []

    class FakeCompiledGraph:
        def __init__(self, graph, context, *, buckets=None):
            calls.append(("init", graph, context, buckets))

        def __call__(self, **inputs):
            calls.append(("call", sorted(inputs)))
            return [ops.add(inputs["x"], inputs["x"])]

        def summary(self):
            return "fake summary"

    monkeypatch.setattr(compile_module, "compiled_graph_class", lambda: FakeCompiledGraph)
    cf = vkumd.compile(lambda x: x + x, {"x": f32(2)}, ctx=ctx, buckets=[4, 8])
    assert cf.executor == "compiled"
    x = f32(2)
    np.testing.assert_allclose(cf(x=x).numpy(), 2 * x)
    assert calls[0][1] is cf.graph and calls[0][2] is ctx and calls[0][3] == [4, 8]
    assert calls[1] == ("call", ["x"]) and cf.summary() == "fake summary"


def test_interpreter_host_paths_match_the_reference(ctx) -> None:
    """Ops without an eager kernel yet (slice, concat, split, compare, where, reshape)."""
    b = GraphBuilder()
    x = b.input("x", ("n", 6))
    y = b.input("y", ("n", 6))
    lo, hi = b.split(x, [2, 4], axis=1)
    joined = b.concat([hi, lo], axis=1)
    third = b.reshape(b.slice(b.reshape(y, ("n", 2, 3)), 1, 1, 2), ("n", 3))
    picked = b.where(b.gt(x, y), joined, b.concat([third, third], axis=-1))
    b.output(b.reshape(picked, (-1,)), b.le(x, 0.0), lo)
    graph = b.build()
    arrays = {"x": f32(3, 6), "y": f32(3, 6)}
    got = run_graph(graph, ctx, {k: ctx.tensor(v) for k, v in arrays.items()})
    want = evaluate(graph, arrays)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy().astype(np.float64), w, rtol=1e-6)


def test_every_ir_op_runs_somewhere() -> None:
    from vkumd.framework.graph import OPS

    stranded = [name for name, op in OPS.items()
                if op.lower is None and op.host is None and op.host_step is None
                and not op.view]
    assert not stranded, f"ops with neither a lowering, a host step nor a view: {stranded}"


def test_attention_op_matches_eager_and_reference(ctx) -> None:
    def attend(q, k, v, wo, mask):
        o = ops.attention(q, k, v, attn_mask=mask, scale=0.3)
        return ops.matmul(o, wo, activation="silu"), ops.attention(q, k, v, causal=True)

    arrays = {"q": f32(2, 4, 5, 8), "k": f32(2, 2, 7, 8), "v": f32(2, 2, 7, 8),
              "wo": f32(8, 8, scale=0.3), "mask": f32(1, 1, 5, 7)}
    check(ctx, attend, arrays, dynamic={"k": {2: "kv"}, "v": {2: "kv"}, "mask": {3: "kv"}})


def test_attention_key_lengths_from_a_list(ctx) -> None:
    def attend(q, k, v):
        return ops.attention(q, k, v, key_lengths=[3, 7])

    arrays = {"q": f32(2, 2, 4, 8), "k": f32(2, 2, 7, 8), "v": f32(2, 2, 7, 8)}
    cf = check(ctx, attend, arrays)
    lengths = [w for w in cf.graph.weights if w.name == "key_lengths"]
    assert len(lengths) == 1 and lengths[0].dtype.name == "int32"


def test_public_names() -> None:
    import vkumd.framework.graph as graph

    assert vkumd.compile is compile_module.compile
    assert vkumd.CompiledFunction is compile_module.CompiledFunction
    assert {"trace", "TracedTensor", "TraceError", "Tracer", "Trace"} <= set(graph.__all__)
