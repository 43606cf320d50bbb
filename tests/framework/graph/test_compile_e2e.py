"""``vkumd.compile`` end to end on the compiled executor: functions written on the tensor API,
traced, optimised, recorded and replayed, against the same function run eagerly and against
float64 numpy.

Every compiled result is read from a second call made after the recording's arena and
outputs were filled with NaN (``execute_checks.poison``), so an element a fused kernel never
writes, or reads before it is written, fails the comparison.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from execute_checks import poison, rel
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkumd
from vkumd import ops
from vkumd.errors import VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import UnsupportedOpError
from vkumd.framework.graph.registry import OPS
from vkumd.framework.graph.trace import DataDependentError, TraceError
from vkumd.testing.numerics import rel_error

TOL = 1e-5
BASE = (3, 5, 7)
UNARY = ("relu", "gelu", "silu", "neg")
BINARY = ("add", "sub", "mul", "div")
SCALAR = ("scalar_add", "scalar_sub", "scalar_mul", "scalar_div")
SCALARS = (0.5, -2.0, 3.0)
_erf = np.vectorize(math.erf)


def compiled_twice(cf: Any, inputs: dict[str, Any]) -> list[np.ndarray]:
    """Call ``cf`` (recording), poison its recording, call it again; the second results."""
    cf(**inputs)
    assert cf.executor == "compiled"
    poison(cf._compiled)  # the recording is the executor's; tests reach into it on purpose
    out = cf(**inputs)
    return [t.numpy() for t in (out if isinstance(out, tuple) else (out,))]


# -- random elementwise DAGs -------------------------------------------------------------------

Step = tuple[str, tuple[int, ...], float, bool]
"""(op, operand pool indices, scalar, scalar on the left)."""


def apply(step: Step, pool: list[Any], numpy: bool) -> Any:
    """One step on tensors (eager or traced, through the tensor API) or on float64 arrays."""
    op, args, c, left = step
    a = pool[args[0]]
    if op == "relu":
        return np.maximum(a, 0.0) if numpy else a.relu()
    if op == "gelu":
        return 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0))) if numpy else a.gelu()
    if op == "silu":
        return a / (1.0 + np.exp(-a)) if numpy else a.silu()
    if op == "neg":
        return -a
    if op.startswith("scalar_"):
        kind = op[len("scalar_"):]
        if kind == "div" and left:  # c / a: keep the divisor away from zero
            return c / (a * a + 1.0)
        pair = (c, a) if left else (a, c)
        return {"add": lambda x, y: x + y, "sub": lambda x, y: x - y,
                "mul": lambda x, y: x * y, "div": lambda x, y: x / y}[kind](*pair)
    b = pool[args[1]]
    if op == "div":
        return a / (b * b + 1.0)
    if op == "add":
        return a + b
    return a - b if op == "sub" else a * b


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, ...]:
    """A shape that broadcasts to BASE (some axes 1, some leading axes missing)."""
    rank = draw(st.integers(1, len(BASE)))
    return tuple(draw(st.sampled_from((1, d))) for d in BASE[len(BASE) - rank:])


@st.composite
def programs(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], list[Step], list[int]]:
    """Inputs (1-3), steps (1-10) over earlier values, and the pool indices returned."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    feeds = {f"x{i}": rng.standard_normal(draw(shapes())).astype(np.float32)
             for i in range(draw(st.integers(1, 3)))}
    steps: list[Step] = []
    pool = len(feeds)
    for _ in range(draw(st.integers(1, 10))):
        op = draw(st.sampled_from(UNARY + BINARY + SCALAR))
        arity = 2 if op in BINARY else 1
        args = tuple(draw(st.integers(0, pool - 1)) for _ in range(arity))
        steps.append((op, args, draw(st.sampled_from(SCALARS)), draw(st.booleans())))
        pool += 1
    first_step, last = len(feeds), pool - 1
    # Sometimes an earlier step's value is returned too, so a group must stop there.
    extra = draw(st.lists(st.integers(first_step, last - 1), max_size=1)) if last > first_step \
        else []
    return feeds, steps, [last, *extra]


def as_function(steps: list[Step], outputs: list[int]) -> Callable[..., Any]:
    """The program as a Python function of its inputs by keyword, on the tensor API."""
    def fn(**xs: Any) -> Any:
        pool = [xs[name] for name in sorted(xs)]
        for step in steps:
            pool.append(apply(step, pool, numpy=False))
        results = tuple(pool[i] for i in outputs)
        return results if len(results) > 1 else results[0]
    return fn


def numpy_outputs(feeds: dict[str, np.ndarray], steps: list[Step], outputs: list[int]
                  ) -> tuple[list[np.ndarray], float]:
    """The float64 outputs, and the largest size (Frobenius norm, broadcast to the output)
    of any value the program computes on the way."""
    pool: list[Any] = [feeds[name].astype(np.float64) for name in sorted(feeds)]
    for step in steps:
        pool.append(apply(step, pool, numpy=True))
    sizes = [np.linalg.norm(np.broadcast_to(np.asarray(v), BASE)) for v in pool]
    return [np.asarray(pool[i]) for i in outputs], float(max(sizes))


def judged(got: np.ndarray, want: np.ndarray, scale: float) -> float:
    """The error relative to the larger of the result and the program's intermediate values:
    a difference of nearly equal values is exact only to its operands' rounding, so its
    error is measured against their size, not against the tiny result's."""
    return rel_error(got, want, floor=max(scale, 1e-30))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_random_elementwise_functions(ctx, program) -> None:
    feeds, steps, outputs = program
    fn = as_function(steps, outputs)
    tensors = {k: ctx.tensor(v) for k, v in feeds.items()}
    cf = vkumd.compile(fn, tensors, ctx=ctx)
    got = compiled_twice(cf, tensors)
    eager = fn(**tensors)
    eager = [t.numpy() for t in (eager if isinstance(eager, tuple) else (eager,))]
    want, scale = numpy_outputs(feeds, steps, outputs)
    for g, e, w in zip(got, eager, want, strict=True):
        assert g.shape == w.shape
        assert judged(g, w, scale) < TOL
        assert judged(e, w, scale) < TOL
        assert judged(g, e, scale) < TOL
    # A tree of elementwise ops with one output never needs more than one kernel.
    if len(outputs) == 1 and len(cf.traced_graph.nodes) > 1:
        assert len(cf.graph.nodes) == 1, cf.graph


# -- a small transformer block -----------------------------------------------------------------

D, HEADS, FF = 32, 4, 64
rng = np.random.default_rng(11)


def f32(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


WEIGHTS = {"wq": f32(D, D, scale=0.2), "wk": f32(D, D, scale=0.2), "wv": f32(D, D, scale=0.2),
           "bq": f32(D), "bk": f32(D), "bv": f32(D), "wo": f32(D, D, scale=0.2), "bo": f32(D),
           "g1": f32(D), "be1": f32(D), "w1": f32(D, FF, scale=0.2), "b1": f32(FF),
           "w2": f32(FF, D, scale=0.2), "b2": f32(D), "g2": f32(D), "be2": f32(D)}


def block(x, wq, wk, wv, bq, bk, bv, wo, bo, g1, be1, w1, b1, w2, b2, g2, be2):
    """A post-norm encoder layer on the tensor API; attention written out."""
    b, s, d = x.shape
    hd = d // HEADS

    def heads(t):
        return t.reshape(b, s, HEADS, hd).permute(0, 2, 1, 3)

    q, k, v = heads(x @ wq + bq), heads(x @ wk + bk), heads(x @ wv + bv)
    p = (ops.matmul(q, k, trans_b=True) * (1.0 / math.sqrt(hd))).softmax()
    a = (p @ v).permute(0, 2, 1, 3).reshape(b, s, d)
    h = (a @ wo + bo + x).layer_norm(g1, be1, eps=1e-12)
    f = (h @ w1 + b1).gelu()
    return (f @ w2 + b2 + h).layer_norm(g2, be2, eps=1e-12)


def block_numpy(x: np.ndarray, **w: np.ndarray) -> np.ndarray:
    """The block in float64 numpy."""
    w = {k: v.astype(np.float64) for k, v in w.items()}
    x = x.astype(np.float64)
    b, s, d = x.shape
    hd = d // HEADS

    def heads(t):
        return t.reshape(b, s, HEADS, hd).transpose(0, 2, 1, 3)

    def norm(t, g, be):
        mu = t.mean(-1, keepdims=True)
        return (t - mu) / np.sqrt(((t - mu) ** 2).mean(-1, keepdims=True) + 1e-12) * g + be

    q, k, v = (heads(x @ w[f"w{n}"] + w[f"b{n}"]) for n in "qkv")
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    a = (p @ v).transpose(0, 2, 1, 3).reshape(b, s, d)
    h = norm(a @ w["wo"] + w["bo"] + x, w["g1"], w["be1"])
    f = h @ w["w1"] + w["b1"]
    f = 0.5 * f * (1.0 + _erf(f / math.sqrt(2.0)))
    return norm(f @ w["w2"] + w["b2"] + h, w["g2"], w["be2"])


def test_transformer_block_fuses_and_matches(ctx) -> None:
    x = f32(2, 8, D)
    tensors = {"x": ctx.tensor(x), **{k: ctx.tensor(v) for k, v in WEIGHTS.items()}}
    cf = vkumd.compile(block, tensors, ctx=ctx)
    got = compiled_twice(cf, tensors)[0]
    fused = [n.op for n in cf.graph.nodes]
    assert fused.count("attention") == 1, cf.graph
    assert "softmax" not in fused
    # Every bias, the GELU and both residuals went into GEMM epilogues.
    assert fused.count("matmul") == 6 and "add" not in fused and "gelu" not in fused
    eager = block(**tensors).numpy()
    want = block_numpy(x, **WEIGHTS)
    assert rel(got, want) < TOL
    assert rel(eager, want) < TOL
    assert rel(got, eager) < TOL
    (stats,) = cf._compiled.buckets()
    assert stats.arena_bytes <= stats.intermediate_bytes


def test_a_seq_of_37_runs_in_the_64_bucket_as_the_exact_shape(ctx) -> None:
    x = f32(2, 37, D)
    tensors = {"x": ctx.tensor(x), **{k: ctx.tensor(v) for k, v in WEIGHTS.items()}}
    bucketed = vkumd.compile(block, tensors, ctx=ctx, dynamic={"x": {1: "seq"}})
    exact = vkumd.compile(block, tensors, ctx=ctx)  # static: recorded at 37 itself
    got = compiled_twice(bucketed, tensors)[0]
    want = compiled_twice(exact, tensors)[0]
    assert got.shape == (2, 37, D)
    (stats,) = bucketed._compiled.buckets()
    assert stats.bindings == {"seq": 64}
    assert "seq=64" in bucketed.summary()
    assert np.array_equal(got, want)  # run at the true sizes: the exact run's bytes
    assert rel(got, block_numpy(x, **WEIGHTS)) < TOL
    shorter = f32(2, 50, D)  # another length: the same bucket's memory, its own recording
    out = bucketed(**{**tensors, "x": ctx.tensor(shorter)}).numpy()
    assert rel(out, block_numpy(shorter, **WEIGHTS)) < TOL
    # 37 copied in, 37 over the same tensors passed again (read in place), then 50.
    assert bucketed._compiled.recorded == 3 and bucketed._compiled.allocated == 1


# -- bad input --------------------------------------------------------------------------------


def test_reading_a_tensor_on_the_host_mid_trace_names_the_line() -> None:
    def f(x):
        h = x.relu()
        scale = float(h.numpy().max())  # data on the host: no graph can record this
        return h * scale

    line = f.__code__.co_firstlineno + 2
    with pytest.raises(DataDependentError, match=rf"\.numpy\(\).*test_compile_e2e\.py:{line}"):
        vkumd.compile(f, {"x": np.ones((2, 3), np.float32)})


def test_a_shape_against_a_symbolic_constraint_names_the_inputs(ctx) -> None:
    def f(x, y):
        return x.relu() + y  # one symbol for both: their seq axes must agree

    example = np.ones((2, 5, 4), np.float32)
    cf = vkumd.compile(f, {"x": example, "y": example}, ctx=ctx,
                       dynamic={"x": {1: "seq"}, "y": {1: "seq"}})
    with pytest.raises(VkumdValueError, match=r"input 'y' has shape \(2, 6, 4\): seq is 6"):
        cf(x=np.ones((2, 5, 4), np.float32), y=np.ones((2, 6, 4), np.float32))
    with pytest.raises(VkumdValueError, match=r"input 'x'"):
        cf(x=np.ones((3, 5, 4), np.float32), y=example)  # a fixed axis of another size


def test_an_op_without_a_graph_form_names_the_call() -> None:
    def f(x):
        return (x + 1.0) ** 2

    line = f.__code__.co_firstlineno + 1
    with pytest.raises(TraceError, match=rf"no power op.*test_compile_e2e\.py:{line}|"
                                         rf"test_compile_e2e\.py:{line}.*no power op"):
        vkumd.compile(f, {"x": np.ones((2, 3), np.float32)})


def test_an_op_without_a_lowering_names_the_node(ctx, caplog, monkeypatch) -> None:
    # Every slice has a recorded form now: a record whose kernels refuse stands in for an
    # op without one.
    record = OPS["slice"]
    monkeypatch.setitem(OPS, "slice", dataclasses.replace(
        record, refuse=lambda node: "no recorded form (this test's stand-in)"))

    def f(x):
        return x[::2].relu() * 2.0

    x = np.arange(6, dtype=np.float32).reshape(3, 2) - 2.0
    with caplog.at_level(logging.WARNING, logger="vkumd.compile"):
        cf = vkumd.compile(f, {"x": x}, ctx=ctx)
    assert cf.executor == "eager"  # runs, node by node, and says why
    assert "= slice (test_compile_e2e.py:" in caplog.text
    np.testing.assert_allclose(cf(x=x).numpy(), np.maximum(x[::2], 0) * 2)
    with pytest.raises(UnsupportedOpError, match=r"= slice \(test_compile_e2e\.py:\d+\).*"
                                                 r"no recorded form"):
        CompiledGraph(cf.graph, ctx)
