"""A vkumd tensor passed again for the same input is read where it is (no copy): the
recording over it is made once, sees every later write to it, and never binds the graph's
own memory (an earlier call's result) or a tensor of another dtype."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.errors import VkumdTypeError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder
from vkumd.testing.numerics import rel_error


def _graph():
    b = GraphBuilder("bound")
    x = b.input("x", ("n", 5))
    w = b.weight("w", np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7))
    b.output(b.relu(b.matmul(b.add(x, x), w)))
    return b.build()


def _want(x: np.ndarray) -> np.ndarray:
    w = np.linspace(-1, 1, 35).reshape(5, 7)
    return np.maximum((2 * x.astype(np.float64)) @ w, 0.0)


def _rel(got, want) -> float:
    return rel_error(got, want, norm="max")


@pytest.fixture
def compiled(ctx):
    graph = CompiledGraph(_graph(), ctx)
    yield graph
    graph.release()


def test_a_repeated_tensor_is_read_in_place_and_sees_new_data(ctx, compiled) -> None:
    rng = np.random.default_rng(1)
    first = rng.standard_normal((37, 5)).astype(np.float32)
    t = ctx.tensor(first)
    assert _rel(compiled(x=t)[0].numpy(), _want(first)) < 1e-6  # copied in: 1 recording
    assert _rel(compiled(x=t)[0].numpy(), _want(first)) < 1e-6  # again: read in place
    (bucket,) = compiled.bucket_memory()
    bound = [r for r in bucket.recordings() if r.bound]
    assert len(bound) == 1 and bound[0].inputs["x"] is t
    assert compiled.recorded == 2
    for _ in range(3):  # refilled on the host between calls: the replay reads the new bytes
        data = rng.standard_normal((37, 5)).astype(np.float32)
        t.write(data)
        out = compiled(x=t)[0]
        out_bytes = out.numpy()
        assert _rel(out_bytes, _want(data)) < 1e-6
    assert compiled.recorded == 2  # no further recording


def test_a_new_tensor_every_call_is_copied_and_records_nothing_new(ctx, compiled) -> None:
    rng = np.random.default_rng(2)
    for _ in range(4):
        x = rng.standard_normal((37, 5)).astype(np.float32)
        assert _rel(compiled(x=ctx.tensor(x))[0].numpy(), _want(x)) < 1e-6
    assert compiled.recorded == 1
    (bucket,) = compiled.bucket_memory()
    assert not any(r.bound for r in bucket.recordings())


def test_an_earlier_result_fed_back_is_copied_not_bound(ctx) -> None:
    b = GraphBuilder("loop")
    x = b.input("x", (16,))
    b.output(b.add(b.relu(x), x))  # relu(x) + x, read and written over the bucket's memory
    graph = CompiledGraph(b.build(), ctx)
    try:
        value = np.linspace(-3, 3, 16, dtype=np.float32)
        y = graph(x=value)[0]
        for _ in range(3):  # y is a view of the graph's own output: never read in place
            value = (np.maximum(value.astype(np.float64), 0) + value).astype(np.float32)
            np.testing.assert_allclose(y.numpy(), value, rtol=1e-6)
            y = graph(x=y)[0]
        (bucket,) = graph.bucket_memory()
        assert not any(r.bound for r in bucket.recordings())
    finally:
        graph.release()


def test_a_released_tensor_is_not_replayed_and_the_graph_stays_usable(ctx, compiled) -> None:
    x = np.ones((8, 5), np.float32)
    t = ctx.tensor(x)
    compiled(x=t)
    compiled(x=t)
    t.release()  # its memory stays pinned by the bound recording until that is evicted
    fresh = np.full((8, 5), 2.0, np.float32)
    assert _rel(compiled(x=ctx.tensor(fresh))[0].numpy(), _want(fresh)) < 1e-6


def test_another_dtype_is_refused_not_bound(ctx, compiled) -> None:
    t = ctx.tensor(np.ones((8, 5), np.float16)) if ctx.caps.storage_16bit else None
    if t is None:
        pytest.skip("float16 tensors need 16-bit storage, which this device lacks")
    for _ in range(2):
        with pytest.raises(VkumdTypeError, match="float16"):
            compiled(x=t)
    ok = np.ones((8, 5), np.float32)
    assert _rel(compiled(x=ok)[0].numpy(), _want(ok)) < 1e-6


def test_tensors_taking_turns_are_each_read_in_place(ctx, compiled) -> None:
    rng = np.random.default_rng(3)
    data = [rng.standard_normal((37, 5)).astype(np.float32) for _ in range(2)]
    pair = [ctx.tensor(d) for d in data]
    for turn in range(6):  # a, b, a, b, ...: from the third call on, each is bound
        i = turn % 2
        assert _rel(compiled(x=pair[i])[0].numpy(), _want(data[i])) < 1e-6
    (bucket,) = compiled.bucket_memory()
    assert sorted(id(r.inputs["x"]) for r in bucket.recordings() if r.bound) == \
        sorted(id(t) for t in pair)
    assert compiled.recorded == 3


def test_the_summary_names_each_size_once_and_counts_in_place_twins(ctx) -> None:
    b = GraphBuilder("summary")
    x = b.input("x", ("n", 5))
    b.output(b.relu(x))
    graph = CompiledGraph(b.build(), ctx)
    try:
        t = ctx.tensor(np.ones((37, 5), np.float32))
        graph(x=t)
        graph(x=t)
        (stats,) = graph.buckets()
        assert stats.in_place == 1 and len(stats.sizes) == 2
        assert "recorded at n=37 (at most 8, 0 evicted, 1 reading inputs in place)" in \
            graph.summary()
    finally:
        graph.release()
