"""Symbolic dimensions: canonical arithmetic, equality, broadcasting and binding."""

from __future__ import annotations

import pytest

from vkumd.errors import VkumdTypeError, VkumdValueError
from vkumd.framework.graph.dims import (
    Dim,
    as_dim,
    as_shape,
    divide_exact,
    format_shape,
    product,
    sym,
)
from vkumd.framework.graph.symbols import DimTable

batch, seq = sym("batch"), sym("seq")


def test_products_and_sums_are_canonical() -> None:
    assert batch * seq == seq * batch
    assert batch * seq * 384 == 384 * (seq * batch)
    assert seq + seq == 2 * seq
    assert (seq + 1) - 1 == seq
    assert isinstance(seq - seq, int) and seq - seq == 0
    assert str(batch * seq) == "batch*seq"
    assert str(seq + 1) == "seq + 1"
    assert str(2 * seq - 3) == "2*seq - 3"
    assert hash(batch * seq) == hash(seq * batch)
    assert batch != seq and batch != 1 and seq * 1 == seq


def test_exact_division() -> None:
    assert divide_exact(batch * seq * 384, 384) == batch * seq
    assert divide_exact(batch * seq * 384, seq * 12) == batch * 32
    assert divide_exact(2 * seq + 4, 2) == seq + 2
    assert divide_exact(batch * seq, 7) is None
    assert divide_exact(batch, seq) is None
    assert divide_exact(batch * seq, seq + 1) is None  # only monomial divisors
    assert (batch * seq * 4) // 4 == batch * seq
    with pytest.raises(VkumdValueError, match="not an exact multiple"):
        _ = batch // 3


def test_bind_and_subs() -> None:
    assert (batch * seq + 1).bind({"batch": 2, "seq": 5}) == 11
    with pytest.raises(VkumdValueError, match="needs sizes for seq"):
        (batch * seq).bind({"batch": 2})
    assert (batch * seq).subs({"seq": batch}) == batch * batch
    assert (batch * seq).subs({"seq": 3, "batch": 2}) == 6


def test_as_dim_and_shape() -> None:
    assert as_shape(("batch", 3, seq)) == (batch, 3, seq)
    assert product(as_shape(("batch", 3))) == 3 * batch
    assert format_shape(as_shape(("batch", "seq", 384))) == "[batch, seq, 384]"
    with pytest.raises(VkumdValueError, match=">= 0"):
        as_dim(-2)
    with pytest.raises(VkumdValueError, match="identifier"):
        as_dim("2x")
    with pytest.raises(VkumdTypeError, match="dimension"):
        as_dim(1.5)
    with pytest.raises(VkumdTypeError, match="sequence"):
        as_shape("batch")
    assert repr(batch) == "Dim('batch')" and isinstance(batch, Dim)


def test_broadcast_with_symbols() -> None:
    t = DimTable()
    assert t.broadcast((batch, 1, 384), (seq, 1)) == (batch, seq, 384)
    assert t.broadcast((batch, seq), (batch, seq)) == (batch, seq)
    with pytest.raises(VkumdValueError, match=r"axis -1 has seq and kv.*declared equal"):
        t.broadcast((batch, seq), (batch, sym("kv")))
    with pytest.raises(VkumdValueError, match="axis -1 has 3 and 4"):
        t.broadcast((2, 3), (4,))
    t.equate("kv", "seq")
    assert t.broadcast((batch, seq), (batch, sym("kv"))) == (batch, seq)


def test_equalities_resolve_and_conflict() -> None:
    t = DimTable()
    t.equate("kv", "seq")
    t.equate("hidden", 384)
    assert t.same(sym("kv") * 2, seq * 2)
    assert t.resolve(sym("hidden") * batch) == 384 * batch
    assert ("hidden", 384) in t.pairs() and ("kv", "seq") in t.pairs()
    with pytest.raises(VkumdValueError, match="already 384"):
        t.equate("hidden", 512)
    with pytest.raises(VkumdValueError, match="symbol"):
        t.equate(1, 2)
    copy = t.copy()
    copy.equate("batch", 1)
    assert not t.same(batch, 1) and copy.same(batch, 1)


def test_bind_and_unify_through_table() -> None:
    t = DimTable()
    t.equate("kv", "seq")
    assert t.bind((batch, sym("kv")), {"batch": 2, "seq": 7}) == (2, 7)
    assert t.bind((sym("kv"),), {"kv": 7}) == (7,)
    with pytest.raises(VkumdValueError, match="class"):
        t.normalize_env({"kv": 3, "seq": 4})
    env: dict[str, int] = {}
    t.unify((batch * seq, 4), (6, 4), env, "x", strict=False)
    t.unify((batch, seq), (2, 3), env, "y")
    t.unify((batch * seq, 4), (6, 4), env, "x")
    assert env == {"batch": 2, "seq": 3}
    with pytest.raises(VkumdValueError, match="x has shape"):
        t.unify((batch * seq, 4), (5, 4), env, "x")
    with pytest.raises(VkumdValueError, match="elsewhere"):
        t.unify((batch,), (9,), env, "z")
