"""Elementwise fusion on random DAGs: the fused graph's float64 reference equals the
original's exactly, and every fused node, run on the device by
``vkumd.ops.fused_elementwise``, matches the float64 reference of its program.

A DAG has 1-4 inputs whose shapes broadcast to ``BASE`` (odd sizes), scalar and vector
constants, and 1-12 steps over earlier values; some steps' values are also graph outputs
or read by a softmax, so groups must stop there.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vkumd.compiler.kernels.limits import FUSED_MAX_INPUTS
from vkumd.framework import ops
from vkumd.framework.graph import GraphBuilder, evaluate
from vkumd.framework.graph.fusion_elementwise import fuse_elementwise, fusible
from vkumd.framework.graph.ir import Graph
from vkumd.framework.graph.reference import round_to, run_node
from vkumd.testing.numerics import rel_error

BASE = (3, 5, 7)
UNARY = ("relu", "gelu", "gelu_tanh", "silu", "scale", "softmax")
BINARY = ("add", "sub", "mul", "safe_div", "maximum", "select")
TOLERANCE = {"float32": 1e-5, "float16": 2e-3, "bfloat16": 1.6e-2}


@st.composite
def shapes(draw: st.DrawFn) -> tuple[int, ...]:
    rank = draw(st.integers(0, len(BASE)))
    return tuple(draw(st.sampled_from((1, d))) for d in BASE[len(BASE) - rank:])


@st.composite
def dags(draw: st.DrawFn) -> tuple[Graph, dict[str, np.ndarray]]:
    """A random elementwise graph and its inputs."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    dtype = draw(st.sampled_from(("float32", "float32", "float16", "bfloat16")))
    b = GraphBuilder("dag")
    feeds, pool = {}, []
    for i in range(draw(st.integers(1, 4))):
        shape = draw(shapes())
        feeds[f"x{i}"] = rng.standard_normal(shape).astype(np.float32)
        pool.append(b.input(f"x{i}", shape, dtype))
    if draw(st.booleans()):
        pool.append(b.weight("w", rng.standard_normal(BASE[-1:]).astype(np.float32), dtype))
    outputs = []
    for _ in range(draw(st.integers(1, 12))):
        op = draw(st.sampled_from(UNARY + BINARY))
        a = pool[draw(st.integers(0, len(pool) - 1))]
        c = pool[draw(st.integers(0, len(pool) - 1))]
        if op == "scale":
            value = b.scale(a, draw(st.sampled_from((0.5, -2.0, 3.0))))
        elif op == "softmax":
            value = b.softmax(a) if a.type.ndim else b.relu(a)
        elif op in UNARY:
            value = getattr(b, op)(a)
        elif op == "safe_div":
            value = b.div(a, b.add(b.mul(c, c), 1.0))
        elif op == "maximum":
            value = b.where(b.gt(a, c), a, c)
        elif op == "select":
            # Both branches agree where a == c: a comparison of values equal up to rounding
            # (gelu(x) < x for large x) may go either way on the device and in float64, and
            # a branch that jumps there would be judged as the kernel's error.
            value = b.where(b.lt(a, c), b.add(b.mul(a, 0.25), b.mul(c, 0.75)), c)
        else:
            value = getattr(b, op)(a, c)
        pool.append(value)
        if draw(st.integers(0, 5)) == 0:
            outputs.append(value)
    last = pool[-1]
    if draw(st.booleans()) and last.producer is not None:
        last = b.cast(last, draw(st.sampled_from(("float32", "float16", "bfloat16"))))
    b.output(last, *(v for v in outputs if v is not pool[-1]))
    return b.build(), feeds


def _relative_error(got: np.ndarray, want: np.ndarray, inputs: list[np.ndarray] = ()) -> float:
    # Relative to the larger of the result and the inputs: a difference of nearly equal
    # values (x - y with x close to y) is exact only up to the rounding of its operands,
    # so its error is judged against their size, not against the tiny result's.
    return rel_error(got, want, floor=max([0.0, *(np.linalg.norm(np.asarray(a, np.float64))
                                                  for a in inputs)]))


# Modest, so the file runs in seconds; 300 examples (about 30 s here) passed as well.
EXAMPLES = 30


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(dags())
def test_fused_dags_match_the_reference_and_the_device(ctx, dag) -> None:
    graph, feeds = dag
    fused = fuse_elementwise(graph)
    fused.check()
    for want, got in zip(evaluate(graph, feeds), evaluate(fused, feeds), strict=True):
        np.testing.assert_array_equal(got, want)
    values = evaluate(fused, feeds, keep=True)
    for node in fused.nodes:
        if node.op != "fused_elementwise":
            # Maximal groups: an elementwise node left alone has a reader outside any group.
            out = node.outputs[0]
            lone = (fusible(node) and len(out.users) == 1 and out not in fused.outputs
                    and out.users[0].op == "fused_elementwise")
            assert not lone or len(out.users[0].inputs) + len(node.inputs) > FUSED_MAX_INPUTS
            continue
        assert len(node.attrs["program"]) >= 2
        args = [round_to(values[v.id], v.dtype) for v in node.inputs]
        shape = tuple(int(d) for d in node.outputs[0].shape)
        want = run_node(node, args, [shape])[0]
        tensors = [ctx.tensor(a.astype(np.float32), dtype=v.dtype.name) if v.dtype.is_float
                   else ctx.tensor(a.astype(v.dtype.numpy)) for a, v in zip(args, node.inputs,
                                                                            strict=True)]
        dtype = node.attrs["dtype"]
        out = ctx.tensor(np.full(shape, np.nan, np.float32), dtype=dtype)
        ops.fused_elementwise(tensors, node.attrs["program"], out=out)
        got = out.numpy()
        assert not np.isnan(got).any(), "an element was not written"
        assert _relative_error(got, want, args) < TOLERANCE[dtype], node.attrs["program"]
