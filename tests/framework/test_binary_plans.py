"""The binary ops' plan lookup: a hit gives the same result as planning, a bad call raises
every time (nothing is remembered for it), and an entry of other caps is never used."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.errors import VkumdValueError
from vkumd.framework import ops
from vkumd.framework.opset import arith
from vkumd.testing.numerics import poisoned, rel_error


def test_repeated_shapes_hit_and_stay_correct() -> None:
    rng = np.random.default_rng()
    with vkumd.Context() as ctx:
        for shape_a, shape_b in (((7, 13), (13,)), ((5, 1, 3), (1, 4, 3)), ((7, 13), (13,))):
            a = rng.standard_normal(shape_a).astype(np.float32)
            b = rng.standard_normal(shape_b).astype(np.float32)
            out = poisoned(ctx, np.broadcast_shapes(shape_a, shape_b))
            ops.sub(ctx.tensor(a), ctx.tensor(b), out=out)
            assert rel_error(out.numpy(), a.astype(np.float64) - b) < 1e-6


def test_a_bad_broadcast_raises_every_time() -> None:
    with vkumd.Context() as ctx:
        a, b = ctx.zeros((3, 4)), ctx.zeros((5,))
        for _ in range(2):
            with pytest.raises(VkumdValueError, match="broadcast"):
                ops.add(a, b)
        assert ops.add(a, ctx.zeros((4,))).shape == (3, 4)  # the context stays usable


def test_an_entry_of_other_caps_is_not_used(monkeypatch) -> None:
    """An id can be recycled once a context's caps are gone; the entry holds its caps, so a
    stale one is replanned rather than used."""
    rng = np.random.default_rng()
    with vkumd.Context() as ctx:
        a = rng.standard_normal(300).astype(np.float32)
        ta = ctx.tensor(a)
        key = (id(ctx.caps), "add", "float32", (300,), (300,))
        wrong = arith._plan_binary("mul", "mul", ta, ta, ctx.caps)[2]
        monkeypatch.setitem(arith._BINARY_PLANS, key, (object(), (300,), wrong))
        out = poisoned(ctx, 300)
        ops.add(ta, ta, out=out)
        assert rel_error(out.numpy(), 2 * a.astype(np.float64)) < 1e-6
