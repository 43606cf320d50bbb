"""``ops.rope``: rotary position embedding with per-row position offsets, against a float64
numpy reference written here from the definition (not the record's), in both pair
conventions, every float type, odd shapes, large positions, in place, and in a graph."""

from __future__ import annotations

import numpy as np
import pytest
from transformer_checks import FLOATS, assert_close, assert_each_raises, poisoned, sample, tensor

from vkumd import ops
from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.execute import CompiledGraph
from vkumd.framework.graph import GraphBuilder, evaluate

SHAPES = [(3, 7, 3, 64), (1, 1, 1, 6), (2, 5, 3, 10), (3, 1, 9, 64), (1, 13, 2, 2)]


def rotary(x: np.ndarray, positions: np.ndarray, theta: float, pairs: str) -> np.ndarray:
    """The float64 rotation, one pair at a time (a second, loop-shaped reference)."""
    out = np.array(x, np.float64)
    batch, seq, heads, dim = x.shape
    for b in range(batch):
        for s in range(seq):
            p = float(positions[b]) + s
            for i in range(dim // 2):
                angle = p * theta ** (-2.0 * i / dim)
                c, sn = np.cos(angle), np.sin(angle)
                j, k = (2 * i, 2 * i + 1) if pairs == "adjacent" else (i, i + dim // 2)
                x0, x1 = x[b, s, :, j], x[b, s, :, k]
                out[b, s, :, j] = x0 * c - x1 * sn
                out[b, s, :, k] = x0 * sn + x1 * c
    return out


def _positions(rng: np.random.Generator, batch: int, high: int = 8192) -> np.ndarray:
    return rng.integers(0, high, size=batch).astype(np.int32)


@pytest.mark.parametrize("pairs", ["adjacent", "halves"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matches_float64(ctx, dtype: str, shape: tuple[int, ...], pairs: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, shape)
    positions = _positions(rng, shape[0])
    out = poisoned(ctx, shape, dtype)
    got = ops.rope(tensor(ctx, x, dtype), ctx.tensor(positions), theta=10000.0, pairs=pairs,
                   out=out)
    assert got is out and got.dtype.name == dtype
    assert_close(got.numpy().astype(np.float64), rotary(x, positions, 10000.0, pairs), dtype,
                 f"rope {pairs} {shape}")


@pytest.mark.parametrize("theta", [10000.0, 100000.0, 1e6])
def test_large_positions_keep_float32_accuracy(ctx, theta: float) -> None:
    """Positions up to 2^23 (far past a context of 8192): the angle is reduced exactly, so
    every element stays within 1e-6 of float64; a float32 product position * frequency
    alone would be off by up to 0.5 radian there."""
    rng = np.random.default_rng()
    x = rng.standard_normal((64, 3, 2, 64)).astype(np.float32)
    positions = np.concatenate([[0, 1, 8189, 8190], rng.integers(0, 1 << 23, 60)]
                               ).astype(np.int32)
    got = ops.rope(ctx.tensor(x), ctx.tensor(positions), theta=theta).numpy()
    want = rotary(x, positions, theta, "adjacent")
    assert np.abs(got - want).max() < 2e-6
    assert_close(got.astype(np.float64), want, "float32", "large positions")


def test_pair_conventions_differ_and_position_zero_is_identity(ctx) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 3, 2, 8)).astype(np.float32)
    positions = np.array([0, 40], np.int32)
    adjacent = ops.rope(ctx.tensor(x), ctx.tensor(positions), theta=500.0).numpy()
    halves = ops.rope(ctx.tensor(x), ctx.tensor(positions), theta=500.0,
                      pairs="halves").numpy()
    assert not np.allclose(adjacent, halves)
    np.testing.assert_array_equal(adjacent[0, 0], x[0, 0])  # angle 0: cos 1, sin 0 exactly
    # A halves rotation is the adjacent one with the pairs' elements moved next to each other.
    order = np.stack([np.arange(4), np.arange(4) + 4], axis=-1).reshape(-1)
    moved = ops.rope(ctx.tensor(np.ascontiguousarray(x[..., order])), ctx.tensor(positions),
                     theta=500.0).numpy()
    np.testing.assert_allclose(moved, halves[..., order], rtol=0, atol=1e-6)


def test_negative_positions_turn_back(ctx) -> None:
    rng = np.random.default_rng()
    x = rng.standard_normal((2, 4, 1, 6)).astype(np.float32)
    positions = np.array([-3, -100], np.int32)
    got = ops.rope(ctx.tensor(x), ctx.tensor(positions), theta=10000.0).numpy()
    assert_close(got.astype(np.float64), rotary(x, positions, 10000.0, "adjacent"), "float32")


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_in_place(ctx, dtype: str) -> None:
    rng = np.random.default_rng()
    x = sample(rng, dtype, (3, 2, 3, 10))
    positions = _positions(rng, 3)
    t = tensor(ctx, x, dtype)
    assert ops.rope(t, ctx.tensor(positions), theta=10000.0, pairs="halves", out=t) is t
    assert_close(t.numpy().astype(np.float64), rotary(x, positions, 10000.0, "halves"), dtype)


def test_empty(ctx) -> None:
    x = ctx.empty((2, 0, 3, 8), "float32")
    assert ops.rope(x, ctx.tensor(np.zeros(2, np.int32)), theta=10.0).shape == (2, 0, 3, 8)


def test_record_reference_and_a_compiled_graph(ctx) -> None:
    """The record's reference agrees with the loop reference; in a graph, two ropes (q and k
    of one sequence length symbol) run compiled with the rotation in place of its input."""
    rng = np.random.default_rng()
    b = GraphBuilder("rope")
    q = b.input("q", (2, "seq", 3, 10))
    k = b.input("k", (2, "seq", 1, 10))
    pos = b.input("pos", (2,), "int32")
    qr = b.op("rope", b.mul(q, 0.5), pos, theta=100000.0, pairs="halves")
    kr = b.op("rope", k, pos, theta=100000.0, pairs="halves")
    b.output(qr, kr)
    graph = b.build()
    compiled = CompiledGraph(graph, ctx)
    for seq in (5, 2):
        data = {"q": rng.standard_normal((2, seq, 3, 10)).astype(np.float32),
                "k": rng.standard_normal((2, seq, 1, 10)).astype(np.float32),
                "pos": _positions(rng, 2)}
        want = evaluate(graph, data)
        assert_close(want[0], rotary(data["q"] * 0.5, data["pos"], 1e5, "halves"), "float32")
        for got, expected in zip(compiled(**data), want, strict=True):
            assert_close(got.numpy().astype(np.float64), expected, "float32", f"seq {seq}")


def test_bad_inputs(ctx) -> None:
    x = ctx.tensor(np.ones((2, 3, 4, 8), np.float32))
    pos = ctx.tensor(np.zeros(2, np.int32))
    assert_each_raises(ctx, [
        (VkumdTypeError, lambda: ops.rope(x, ctx.tensor(np.zeros(2, np.float32)),
                                          theta=10.0)),
        (VkumdValueError, lambda: ops.rope(x, ctx.tensor(np.zeros(3, np.int32)), theta=10.0)),
        (VkumdValueError, lambda: ops.rope(x, ctx.tensor(np.zeros((2, 1), np.int32)),
                                           theta=10.0)),
        (VkumdValueError, lambda: ops.rope(ctx.tensor(np.ones((2, 3, 4, 7), np.float32)), pos,
                                           theta=10.0)),
        (VkumdValueError, lambda: ops.rope(ctx.tensor(np.ones((2, 3, 8), np.float32)), pos,
                                           theta=10.0)),
        (VkumdTypeError, lambda: ops.rope(ctx.tensor(np.ones((2, 3, 4, 8), np.int32)), pos,
                                          theta=10.0)),
        (VkumdValueError, lambda: ops.rope(x, pos, theta=1.0)),
        (VkumdValueError, lambda: ops.rope(x, pos, theta=float("inf"))),
        (VkumdTypeError, lambda: ops.rope(x, pos, theta="10000")),
        (VkumdValueError, lambda: ops.rope(x, pos, theta=10.0, pairs="neox")),
        (VkumdValueError, lambda: ops.rope(x, pos, theta=10.0, out=ctx.empty((2, 3, 4, 6)))),
        (VkumdTypeError, lambda: ops.rope(x, pos, theta=10.0,
                                          out=ctx.empty((2, 3, 4, 8), "float16"))),
        (VkumdTypeError, lambda: ops.rope(np.ones((2, 3, 4, 8), np.float32), pos, theta=10.0)),
    ], "rope")
