"""``ops.kv_write``: the key/value cache written in place at each slot's position, against a
float64 reference; positions near and past the end of the cache (nothing written outside
it); the op in compiled graphs and the interpreter, where its output is the cache itself."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import assert_each_raises, stored

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, GraphError, evaluate, run_passes
from vkumd.framework.graph.memory import plan_memory
from vkumd.framework.interpret import run_graph
from vkumd.framework.opset.rotary import rope_reference


def written(cache: np.ndarray, new: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """The float64 cache after the update (rows past the end dropped), in the cache's type."""
    out = np.array(cache, np.float64)
    for b in range(cache.shape[0]):
        for s in range(new.shape[1]):
            p = int(positions[b]) + s
            if 0 <= p < cache.shape[1]:
                out[b, p] = stored(new[b, s], str(cache.dtype))
    return out


@pytest.mark.parametrize("new_dtype", ["float32", "float16", "bfloat16"])
@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
@pytest.mark.parametrize("shape", [(3, 17, 3, 6, 7), (2, 9, 1, 64, 1), (1, 5, 2, 10, 5)],
                         ids=str)
def test_writes_each_slot_at_its_position(ctx, cache_dtype: str, new_dtype: str,
                                          shape: tuple[int, ...]) -> None:
    slots, max_len, heads, dim, seq = shape
    rng = np.random.default_rng()
    cache = rng.standard_normal((slots, max_len, heads, dim)).astype(cache_dtype)
    new = stored(rng.standard_normal((slots, seq, heads, dim)), new_dtype)
    positions = rng.integers(0, max_len - seq + 1, size=slots).astype(np.int32)
    t = ctx.tensor(cache)
    got = ops.kv_write(t, ctx.tensor(new.astype(np.float32), dtype=new_dtype),
                       ctx.tensor(positions))
    assert got is t
    np.testing.assert_array_equal(t.numpy().astype(np.float64), written(cache, new, positions))


def test_positions_past_the_end_are_dropped(ctx) -> None:
    """A slot at the last position writes one row and drops the rest; one past the end and a
    negative one write nothing; the slots around them (and their other rows) are untouched."""
    rng = np.random.default_rng()
    cache = rng.standard_normal((4, 8, 3, 6)).astype(np.float32)
    new = rng.standard_normal((4, 3, 3, 6)).astype(np.float32)
    positions = np.array([7, 8, -2, 5], np.int32)
    t = ctx.tensor(cache)
    ops.kv_write(t, ctx.tensor(new), ctx.tensor(positions))
    got = t.numpy()
    np.testing.assert_array_equal(got, written(cache, new, positions))
    np.testing.assert_array_equal(got[0, 7], new[0, 0])
    np.testing.assert_array_equal(got[0, :7], cache[0, :7])
    np.testing.assert_array_equal(got[1], cache[1])
    np.testing.assert_array_equal(got[2, 1:], cache[2, 1:])  # -2 + 2 = 0: one row written
    np.testing.assert_array_equal(got[2, 0], new[2, 2])
    np.testing.assert_array_equal(got[3, 5:], new[3])


def test_a_cache_view_at_an_offset(ctx) -> None:
    """A cache that is a view into a larger tensor: bytes outside the view stay as they were."""
    from vkumd.framework.execute.arena import view

    rng = np.random.default_rng()
    whole = rng.standard_normal((3, 8, 2, 64)).astype(np.float32)
    base = ctx.tensor(whole)
    slot = view(base, (1, 8, 2, 64), offset=8 * 2 * 64 * 4)
    new = rng.standard_normal((1, 2, 2, 64)).astype(np.float32)
    ops.kv_write(slot, ctx.tensor(new), ctx.tensor(np.array([7], np.int32)))
    want = whole.copy()
    want[1, 7] = new[0, 0]
    ctx.synchronize()  # host reads of a base do not wait for work through its views
    np.testing.assert_array_equal(base.numpy(), want)


def test_out_gets_an_updated_copy(ctx) -> None:
    rng = np.random.default_rng()
    cache = rng.standard_normal((2, 6, 1, 4)).astype(np.float16)
    new = rng.standard_normal((2, 1, 1, 4)).astype(np.float32)
    positions = np.array([0, 5], np.int32)
    t = ctx.tensor(cache)
    out = ctx.tensor(np.full(cache.shape, np.nan, np.float16))
    assert ops.kv_write(t, ctx.tensor(new), ctx.tensor(positions), out=out) is out
    np.testing.assert_array_equal(out.numpy().astype(np.float64),
                                  written(cache, new, positions))
    np.testing.assert_array_equal(t.numpy(), cache)


def _decode_graph(slots: int, max_len: int, heads: int, kv_heads: int, dim: int):
    b = GraphBuilder("decode")
    q = b.input("q", (slots, "seq", heads, dim))
    k = b.input("k", (slots, "seq", kv_heads, dim))
    v = b.input("v", (slots, "seq", kv_heads, dim))
    pos = b.input("pos", (slots,), "int32")
    lengths = b.input("lengths", (slots,), "int32")
    k_cache = b.input("k_cache", (slots, max_len, kv_heads, dim))
    v_cache = b.input("v_cache", (slots, max_len, kv_heads, dim))
    qr = b.op("rope", q, pos, theta=10000.0)
    k_new = b.op("kv_write", k_cache, b.op("rope", k, pos, theta=10000.0), pos)
    v_new = b.op("kv_write", v_cache, v, pos)
    b.output(b.op("attention", qr, k_new, v_new, lengths, layout="bshd"))
    return b.build()


@pytest.mark.parametrize("executor", ["compiled", "interpreter"])
def test_graph_reads_the_cache_it_wrote(ctx, executor: str) -> None:
    """rope -> kv_write -> attention over the written cache: matches the float64 graph; the
    caller's cache tensors hold the update after each call; no arena memory is spent on the
    caches (the write's output is the cache)."""
    slots, max_len, heads, kv_heads, dim = 3, 16, 3, 1, 12
    graph = run_passes(_decode_graph(slots, max_len, heads, kv_heads, dim))
    rng = np.random.default_rng()
    caches = {n: rng.standard_normal((slots, max_len, kv_heads, dim)).astype(np.float32)
              for n in ("k_cache", "v_cache")}
    tensors = {n: ctx.tensor(c) for n, c in caches.items()}
    compiled = CompiledGraph(graph, ctx) if executor == "compiled" else None
    lengths = np.array([2, 9, 4], np.int32)
    for seq in (1, 1, 3):
        data = {"q": rng.standard_normal((slots, seq, heads, dim)).astype(np.float32),
                "k": rng.standard_normal((slots, seq, kv_heads, dim)).astype(np.float32),
                "v": rng.standard_normal((slots, seq, kv_heads, dim)).astype(np.float32),
                "pos": lengths.copy(), "lengths": lengths + seq}
        want = evaluate(graph, {**data, **caches}, keep=True)
        if compiled is not None:
            (got,) = compiled(**data, **tensors)
        else:
            (got,) = run_graph(graph, ctx, {**{n: ctx.tensor(a) for n, a in data.items()},
                                            **tensors})
        final = want[graph.outputs[0].id]
        err = np.linalg.norm(got.numpy() - final) / np.linalg.norm(final)
        assert err < 1e-5
        for node in graph.nodes:
            if node.op == "kv_write":
                name = node.inputs[0].name
                updated = want[node.outputs[0].id]
                np.testing.assert_allclose(tensors[name].numpy(), updated, rtol=0, atol=1e-6)
                caches[name] = updated.astype(np.float32)
        lengths = lengths + seq
    plan = plan_memory(graph, {"seq": 3})
    cache_ids = {n.outputs[0].id for n in graph.nodes if n.op == "kv_write"}
    assert not cache_ids & set(plan.allocations)


def test_graphs_that_would_read_the_old_cache_are_refused() -> None:
    b = GraphBuilder("bad")
    cache = b.input("cache", (1, 4, 1, 2))
    new = b.input("new", (1, 1, 1, 2))
    pos = b.input("pos", (1,), "int32")
    updated = b.op("kv_write", cache, new, pos)
    b.output(b.add(updated, cache))  # reads the cache after the write
    with pytest.raises(GraphError, match="reads it afterwards"):
        b.build()
    w = GraphBuilder("weight")
    cache_w = w.weight("cache", np.zeros((1, 4, 1, 2), np.float32))
    w.output(w.op("kv_write", cache_w, w.input("new", (1, 1, 1, 2)),
                  w.input("pos", (1,), "int32")))
    with pytest.raises(GraphError, match="is a weight"):
        w.build()


def test_dead_code_elimination_keeps_the_write() -> None:
    b = GraphBuilder("side")
    cache = b.input("cache", (1, 4, 1, 2))
    new = b.input("new", (1, 1, 1, 2))
    b.op("kv_write", cache, new, b.input("pos", (1,), "int32"))
    b.output(b.mul(new, 2.0))
    graph = run_passes(b.build())
    assert [n.op for n in graph.nodes].count("kv_write") == 1


def test_bad_inputs(ctx) -> None:
    cache = ctx.tensor(np.zeros((2, 8, 3, 4), np.float16))
    new = ctx.tensor(np.ones((2, 1, 3, 4), np.float32))
    pos = ctx.tensor(np.zeros(2, np.int32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.kv_write(cache, new, ctx.tensor(np.zeros(2, np.float32)))),
        (VkumdValueError, lambda: ops.kv_write(cache, new, ctx.tensor(np.zeros(3, np.int32)))),
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 1, 1, 4),
                                                                         np.float32)), pos)),
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 1, 3, 8),
                                                                         np.float32)), pos)),
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((3, 1, 3, 4),
                                                                         np.float32)), pos)),
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 3, 4),
                                                                         np.float32)), pos)),
        (VkumdTypeError, lambda: ops.kv_write(ctx.tensor(np.zeros((2, 8, 3, 4), np.int32)),
                                              new, pos)),
        (VkumdTypeError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 1, 3, 4),
                                                                        np.int32)), pos)),
        (VkumdTypeError, lambda: ops.kv_write(cache, new, pos,
                                              out=ctx.empty((2, 8, 3, 4), "float32"))),
        (VkumdTypeError, lambda: ops.kv_write(np.zeros((2, 8, 3, 4), np.float16), new, pos)),
    ], "kv_write")
    np.testing.assert_array_equal(cache.numpy(), 0)  # nothing refused wrote anything


@pytest.mark.parametrize("pairs", ["adjacent", "halves"])
@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_rotation_on_the_way_in(ctx, cache_dtype: str, pairs: str) -> None:
    """kv_write(rope_theta=...) stores rope(new) exactly as the two ops do, rows past the end
    dropped, at large positions too."""
    rng = np.random.default_rng()
    cache = rng.standard_normal((3, 9000, 3, 10)).astype(cache_dtype)
    new = rng.standard_normal((3, 4, 3, 10)).astype(np.float32)
    positions = np.array([8997, 0, 4000], np.int32)
    t = ctx.tensor(cache)
    ops.kv_write(t, ctx.tensor(new), ctx.tensor(positions), rope_theta=100000.0,
                 rope_pairs=pairs)
    rotated = rope_reference(new.astype(np.float64), positions, 100000.0, pairs)
    want = np.array(cache, np.float64)
    for b in range(3):
        for s in range(4):
            if positions[b] + s < 9000:
                want[b, positions[b] + s] = rotated[b, s]
    got = t.numpy().astype(np.float64)
    np.testing.assert_array_equal(got[0, :8997], cache[0, :8997])  # untouched
    tol = 1e-6 if cache_dtype == "float32" else 2e-3
    np.testing.assert_allclose(got, want, rtol=0, atol=tol)
    two_ops = ctx.tensor(cache)
    ops.kv_write(two_ops, ops.rope(ctx.tensor(new), ctx.tensor(positions), theta=100000.0,
                                   pairs=pairs), ctx.tensor(positions))
    np.testing.assert_array_equal(got, two_ops.numpy().astype(np.float64))


def test_rope_fusion_pass(ctx) -> None:
    """The decode graph's key rotation folds into its cache write (one node fewer), gives the
    same results, and the pass switches off by name."""
    graph = _decode_graph(2, 16, 2, 1, 8)
    fused = run_passes(graph)
    plain = run_passes(graph, disable=["rope_fusion"])
    assert [n.op for n in fused.nodes].count("rope") == 1  # q's stays: attention reads it
    assert [n.op for n in plain.nodes].count("rope") == 2
    writes = [n for n in fused.nodes if n.op == "kv_write"]
    assert sorted(str(n.attrs.get("rope_theta")) for n in writes) == ["10000.0", "None"]
    rng = np.random.default_rng()
    data = {"q": rng.standard_normal((2, 1, 2, 8)).astype(np.float32),
            "k": rng.standard_normal((2, 1, 1, 8)).astype(np.float32),
            "v": rng.standard_normal((2, 1, 1, 8)).astype(np.float32),
            "pos": np.array([3, 11], np.int32), "lengths": np.array([4, 12], np.int32)}
    caches = {n: rng.standard_normal((2, 16, 1, 8)).astype(np.float32)
              for n in ("k_cache", "v_cache")}
    want = evaluate(graph, {**data, **caches})[0]
    assert np.abs(evaluate(fused, {**data, **caches})[0] - want).max() < 1e-12
    results = []
    for g in (fused, plain):
        tensors = {n: ctx.tensor(c) for n, c in caches.items()}
        (got,) = CompiledGraph(g, ctx)(**data, **tensors)
        results.append((got.numpy(), tensors["k_cache"].numpy()))
        assert np.linalg.norm(got.numpy() - want) / np.linalg.norm(want) < 1e-5
    np.testing.assert_array_equal(results[0][1], results[1][1])


def test_rope_attribute_bad_values(ctx) -> None:
    cache = ctx.tensor(np.zeros((2, 8, 3, 4), np.float32))
    pos = ctx.tensor(np.zeros(2, np.int32))
    odd = ctx.tensor(np.zeros((2, 8, 3, 5), np.float32))
    assert_each_raises(ctx, [
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 1, 3, 4),
                                                                         np.float32)), pos,
                                               rope_theta=0.5)),
        (VkumdValueError, lambda: ops.kv_write(cache, ctx.tensor(np.ones((2, 1, 3, 4),
                                                                         np.float32)), pos,
                                               rope_theta=10.0, rope_pairs="neox")),
        (VkumdValueError, lambda: ops.kv_write(odd, ctx.tensor(np.ones((2, 1, 3, 5),
                                                                       np.float32)), pos,
                                               rope_theta=10.0)),
    ], "kv_write")


def test_a_captured_decode_step_replays_with_new_positions(ctx) -> None:
    """The decode loop's shape: rope + kv_write (rotating on the way in) + attention captured
    once, then replayed per token with new inputs written to the same tensors; each step
    matches the float64 reference over the cache it grew."""
    slots, max_len, heads, kv_heads, dim = 2, 12, 3, 1, 8
    rng = np.random.default_rng()
    q = ctx.empty((slots, 1, heads, dim), "float16")
    k, v = (ctx.empty((slots, 1, kv_heads, dim)) for _ in range(2))
    pos, lengths = ctx.empty((slots,), "int32"), ctx.empty((slots,), "int32")
    caches = [ctx.zeros((slots, max_len, kv_heads, dim), "float16") for _ in range(2)]
    out = ctx.empty((slots, 1, heads, dim), "float16")
    with ctx.capture() as step:
        qr = ops.rope(q, pos, theta=10000.0, pairs="halves")
        ops.kv_write(caches[0], k, pos, rope_theta=10000.0, rope_pairs="halves")
        ops.kv_write(caches[1], v, pos)
        ops.attention(qr, caches[0], caches[1], key_lengths=lengths, layout="bshd", out=out)
    ref_k = np.zeros((slots, max_len, kv_heads, dim))
    ref_v = np.zeros_like(ref_k)
    start = np.array([0, 4], np.int32)
    for t in range(5):
        here = start + t
        data = [stored(rng.standard_normal(x.shape), "float16") for x in (q, k, v)]
        for tensor_, array in zip((q, k, v), data, strict=True):
            tensor_.write(array.astype(tensor_.dtype.numpy))
        pos.write(here)
        lengths.write(here + 1)
        step.replay()
        rotated_k = rope_reference(data[1], here, 10000.0, "halves")
        for b in range(slots):
            ref_k[b, here[b]] = stored(rotated_k[b, 0], "float16")
            ref_v[b, here[b]] = data[2][b, 0]
        got = out.numpy()
        qr_ref = stored(rope_reference(data[0], here, 10000.0, "halves"), "float16")
        for b in range(slots):
            n = here[b] + 1
            scores = np.einsum("hd,nd->hn", qr_ref[b, 0], ref_k[b, :n, 0]) / np.sqrt(dim)
            w = np.exp(scores - scores.max(-1, keepdims=True))
            w /= w.sum(-1, keepdims=True)
            want = w @ ref_v[b, :n, 0]
            err = np.linalg.norm(got[b, 0] - want) / np.linalg.norm(want)
            assert err < 2e-3, (t, b, err)
    np.testing.assert_array_equal(caches[0].numpy()[0, 5:], 0)  # nothing past slot 0's tokens
