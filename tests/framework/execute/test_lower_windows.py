"""slice, concat, split and where in compiled graphs: recorded (not run eagerly), and equal
to float64 numpy and to the eager interpreter, on odd shapes along every axis.

Each compiled result is read from a second call made after the recording's arena and
outputs were filled with NaN, so an element a window copy never writes shows up.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import vkumd
from vkumd import ops
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate, run_passes
from vkumd.framework.interpret import run_graph
from vkumd.testing.numerics import rel_error

sys.path.insert(0, str(Path(__file__).parents[1] / "graph"))
from execute_checks import poison  # noqa: E402

SHAPE = (3, 5, 7)
AXES = (0, 1, 2, -1, -2, -3)


def _feeds(rng: np.random.Generator, *names: str, shape: tuple[int, ...] = SHAPE
           ) -> dict[str, np.ndarray]:
    return {n: rng.standard_normal(shape).astype(np.float32) for n in names}


def _compiled_outputs(graph, ctx, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    compiled = CompiledGraph(graph, ctx)
    try:
        compiled(**feeds)
        poison(compiled)
        return [o.numpy() for o in compiled(**feeds)]
    finally:
        compiled.release()


def _check_all_paths(graph, ctx, feeds: dict[str, np.ndarray]) -> None:
    """Compiled == eager interpreter == float64 reference (window ops copy bits: exactly)."""
    want = evaluate(graph, feeds)
    got = _compiled_outputs(graph, ctx, feeds)
    eager = [t.numpy() for t in run_graph(graph, ctx, {k: ctx.tensor(v)
                                                       for k, v in feeds.items()})]
    for i, (g, e, w) in enumerate(zip(got, eager, want, strict=True)):
        assert g.shape == w.shape, (i, g.shape, w.shape)
        np.testing.assert_array_equal(g.astype(np.float64), w, err_msg=f"output {i}")
        np.testing.assert_array_equal(e, g, err_msg=f"output {i}")


@pytest.mark.parametrize("axis", AXES)
def test_slices_along_every_axis(ctx, axis: int) -> None:
    rng = np.random.default_rng()
    n = SHAPE[axis]
    b = GraphBuilder("slices")
    x = b.input("x", SHAPE)
    # Inside, from the end, clamped past the end, one element, the whole axis.
    windows = [(1, n - 1), (-2, None), (n - 2, n + 5), (0, 1), (0, None)]
    b.output(*(b.slice(x, axis, lo, hi) for lo, hi in windows))
    _check_all_paths(b.build(), ctx, _feeds(rng, "x"))


@pytest.mark.parametrize("axis", AXES)
def test_concat_and_split_along_every_axis(ctx, axis: int) -> None:
    rng = np.random.default_rng()
    shapes = [list(SHAPE) for _ in range(3)]
    for s, length in zip(shapes, (2, 1, 3), strict=True):
        s[axis] = length
    b = GraphBuilder("joins")
    xs = [b.input(f"x{i}", tuple(s)) for i, s in enumerate(shapes)]
    joined = b.concat(xs, axis)
    pieces = b.split(joined, (4, 0, 1, 1), axis)
    b.output(joined, *pieces, b.relu(pieces[0]))
    feeds = {f"x{i}": rng.standard_normal(s).astype(np.float32) for i, s in enumerate(shapes)}
    _check_all_paths(b.build(), ctx, feeds)


@pytest.mark.parametrize("dtype", ["int32", "float16"])
def test_windows_of_other_element_types(ctx, dtype: str) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("typed")
    x = b.input("x", SHAPE, dtype)
    lo, hi = b.split(x, (3, 4), -1)
    b.output(b.concat([hi, b.slice(hi, 1, 1, 4)], 1), lo)
    data = (rng.integers(-1000, 1000, SHAPE) if dtype == "int32"
            else rng.standard_normal(SHAPE)).astype(dtype)
    joined, lo = _compiled_outputs(b.build(), ctx, {"x": data})
    np.testing.assert_array_equal(joined, np.concatenate([data[..., 3:], data[:, 1:4, 3:]], 1))
    np.testing.assert_array_equal(lo, data[..., :3])


@pytest.mark.parametrize("cond_dtype", ["uint8", "int8", "int32"])
def test_a_lone_where_broadcasts_its_condition(ctx, cond_dtype: str) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("select")
    cond = b.input("c", (5, 1), cond_dtype)
    x, y = b.input("x", SHAPE), b.input("y", (7,))
    b.output(b.where(cond, x, y))
    feeds = {"c": rng.integers(-2, 3, (5, 1)).astype(cond_dtype) if cond_dtype != "uint8"
             else rng.integers(0, 2, (5, 1)).astype(np.uint8), **_feeds(rng, "x"),
             "y": rng.standard_normal(7).astype(np.float32)}
    want = np.where(feeds["c"] != 0, feeds["x"].astype(np.float64), feeds["y"])
    (got,) = _compiled_outputs(b.build(), ctx, feeds)
    np.testing.assert_array_equal(got, want)


def test_where_joins_the_elementwise_fusion(ctx) -> None:
    rng = np.random.default_rng()
    b = GraphBuilder("fused_select")
    x, y = b.input("x", SHAPE), b.input("y", SHAPE[1:])
    b.output(b.relu(b.where(b.gt(x, y), b.mul(x, 2.0), b.sub(y, x))))
    graph = run_passes(b.build())
    assert [n.op for n in graph.nodes] == ["fused_elementwise"]
    assert "where" in [step[0] for step in graph.nodes[0].attrs["program"]]
    feeds = {**_feeds(rng, "x"), "y": rng.standard_normal(SHAPE[1:]).astype(np.float32)}
    x64, y64 = feeds["x"].astype(np.float64), feeds["y"].astype(np.float64)
    want = np.maximum(np.where(x64 > y64, 2 * x64, y64 - x64), 0)
    (got,) = _compiled_outputs(graph, ctx, feeds)
    assert not np.isnan(got).any()
    assert rel_error(got, want) < 1e-6


def test_traced_windows_are_recorded_and_match_eager(ctx) -> None:
    def f(x, y):
        lo, hi = ops.split(y, [2, 3], 1)
        return x[:, 1:4], ops.concat([x, hi], axis=-2), lo[..., -3:]

    rng = np.random.default_rng()
    feeds = _feeds(rng, "x", "y")
    cf = vkumd.compile(f, feeds, ctx=ctx)
    assert cf.executor == "compiled"
    cf(**feeds)
    poison(cf._compiled)
    got = [t.numpy() for t in cf(**feeds)]
    eager = [t.numpy() for t in f(ctx.tensor(feeds["x"]), ctx.tensor(feeds["y"]))]
    x, y = feeds["x"].astype(np.float64), feeds["y"].astype(np.float64)
    want = [x[:, 1:4], np.concatenate([x, y[:, 2:]], -2), y[:, :2, -3:]]
    for g, e, w in zip(got, eager, want, strict=True):
        np.testing.assert_array_equal(g, w)
        np.testing.assert_array_equal(e, g)


def test_a_strided_slice_is_recorded(ctx) -> None:
    def f(x):
        return x[::2] * 2.0, x[::-3]

    x = np.random.default_rng().standard_normal(SHAPE).astype(np.float32)
    cf = vkumd.compile(f, {"x": x}, ctx=ctx)
    assert cf.executor == "compiled"  # one strided-copy launch of a view each
    got = cf(x=x)
    np.testing.assert_array_equal(got[0].numpy(), x[::2] * 2)
    np.testing.assert_array_equal(got[1].numpy(), x[::-3])


def test_a_where_on_integers_is_recorded_and_exact(ctx) -> None:
    b = GraphBuilder("int_select")
    cond, x = b.input("c", (4,), "uint8"), b.input("x", (4,), "int32")
    b.output(b.where(cond, x, b.input("y", (4,), "int32")))
    graph = b.build()
    rng = np.random.default_rng()
    feeds = {"c": rng.integers(0, 2, 4).astype(np.uint8),
             "x": rng.integers(-2**31, 2**31, 4, dtype=np.int64).astype(np.int32),
             "y": rng.integers(-2**31, 2**31, 4, dtype=np.int64).astype(np.int32)}
    want = np.where(feeds["c"] != 0, feeds["x"], feeds["y"])
    np.testing.assert_array_equal(CompiledGraph(graph, ctx)(**feeds)[0].numpy(), want)
    (got,) = run_graph(graph, ctx, {k: ctx.tensor(v) for k, v in feeds.items()})
    np.testing.assert_array_equal(got.numpy(), want)


@st.composite
def window_programs(draw: st.DrawFn):
    """A random graph of slices, joins, cuts and selects over two inputs of one odd shape."""
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(rank))
    b = GraphBuilder("windows")
    pool = [b.input("x", shape), b.input("y", shape)]
    for _ in range(draw(st.integers(1, 6))):
        v = pool[draw(st.integers(0, len(pool) - 1))]
        axis = draw(st.integers(-v.type.ndim, v.type.ndim - 1))
        n = int(v.shape[axis])
        op = draw(st.sampled_from(("slice", "concat", "split", "where")))
        if op == "slice":
            start = draw(st.integers(-n, n - 1))
            stop = draw(st.integers(start % n + 1, n)) if draw(st.booleans()) else None
            pool.append(b.slice(v, axis, start, stop))
        elif op == "concat":
            pool.append(b.concat([v, b.relu(v), v], axis))
        elif op == "split" and n >= 2:
            cut = draw(st.integers(1, n - 1))
            pool.extend(b.split(v, (cut, n - cut), axis))
        else:
            # Values are copies and exact scalings, so no comparison sits on a rounding edge.
            pool.append(b.where(b.gt(v, 0.0), v, b.scale(v, -0.5)))
    b.output(pool[-1], pool[draw(st.integers(2 if len(pool) > 2 else 0, len(pool) - 1))])
    return b.build(), shape


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(window_programs(), st.integers(0, 2**32 - 1))
def test_random_window_graphs_compile_and_match_the_reference(ctx, program, seed) -> None:
    graph, shape = program
    feeds = _feeds(np.random.default_rng(seed), "x", "y", shape=shape)
    fused = run_passes(graph)
    for got, want in zip(_compiled_outputs(fused, ctx, feeds), evaluate(graph, feeds),
                         strict=True):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.astype(np.float64), want)


def test_windows_along_a_symbolic_axis_run_at_the_true_sizes(ctx) -> None:
    b = GraphBuilder("symbolic")
    x = b.input("x", ("n", 7))
    lo, hi = b.split(x, (3, 4), -1)
    b.output(b.slice(x, 0, -2), b.concat([hi, lo], 1), b.slice(x, 0, 1, None))
    compiled = CompiledGraph(b.build(), ctx)
    try:
        for n in (5, 3, 5):
            data = np.random.default_rng().standard_normal((n, 7)).astype(np.float32)
            got = [o.numpy() for o in compiled(x=data)]
            want = [data[-2:], np.concatenate([data[:, 3:], data[:, :3]], 1), data[1:]]
            for g, w in zip(got, want, strict=True):
                np.testing.assert_array_equal(g, w)
        # x[-2:] of a padded x would read padding: the windows run at the true n, each in
        # its bucket's memory (3 -> 4, 5 -> 8), and 5 is recorded once.
        assert sorted(s.bindings["n"] for s in compiled.buckets()) == [4, 8]
        assert sorted(e["n"] for s in compiled.buckets() for e in s.sizes) == [3, 5]
        assert compiled.recorded == 2
    finally:
        compiled.release()
