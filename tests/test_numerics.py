"""The shared numerical checks (vkumd.testing.numerics) judge what they say they judge."""

from __future__ import annotations

import numpy as np
import pytest

from vkumd.framework import dtypes
from vkumd.framework.graph.reference import round_to
from vkumd.testing.numerics import SENTINEL, poison, poisoned, rel_error, stored, stored_tensor


def test_rel_error_is_the_relative_frobenius_error() -> None:
    want = np.array([[3.0, 0.0], [0.0, 4.0]])
    assert rel_error(want + [[0.5, 0.0], [0.0, 0.0]], want) == pytest.approx(0.1)
    assert rel_error(np.float32(2.5), np.float64(2.0)) == pytest.approx(0.25)
    assert rel_error([1.0, 3.0], [1.0, 1.0], norm="max") == pytest.approx(2.0)


def test_a_zero_reference_gives_the_absolute_error_and_floor_sets_the_scale() -> None:
    assert rel_error(np.full(4, 0.5), np.zeros(4)) == pytest.approx(1.0)
    assert rel_error(np.full(4, 0.5), np.zeros(4), floor=10.0) == pytest.approx(0.1)
    assert rel_error(np.zeros(3), np.zeros(3)) == 0.0


def test_nan_where_a_number_was_expected_fails_and_shapes_must_match() -> None:
    with pytest.raises(AssertionError, match="never written"):
        rel_error(np.array([1.0, np.nan]), np.array([1.0, 2.0]))
    assert np.isnan(rel_error(np.array([1.0, np.nan]), np.array([1.0, np.nan])))
    with pytest.raises(AssertionError, match="shape"):
        rel_error(np.ones((1, 3)), np.ones(3))
    with pytest.raises(ValueError, match="norm"):
        rel_error(np.ones(3), np.ones(3), norm="l1")


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16", "int32", "int8", "uint8"])
def test_stored_is_what_the_graph_reference_rounds_to(name: str) -> None:
    values = np.random.default_rng(3).standard_normal((5, 7)) * 100
    np.testing.assert_array_equal(stored(values, name), round_to(values, dtypes.dtype(name)))


@pytest.mark.parametrize("name", ["float32", "float16", "bfloat16"])
def test_stored_tensor_holds_what_stored_says(ctx, name: str) -> None:
    values = np.random.default_rng(4).standard_normal((3, 9))
    tensor, held = stored_tensor(ctx, values, name)
    assert tensor.dtype.name == name and held.dtype == np.float64
    np.testing.assert_array_equal(held, stored(values, name))


def test_poisoned_and_poison(ctx) -> None:
    assert np.isnan(poisoned(ctx, (2, 3), "float16").numpy()).all()
    assert (poisoned(ctx, (4,), "int32").numpy() == SENTINEL).all()
    t = ctx.tensor(np.zeros(5, np.float32))
    poison(t)
    assert np.isnan(t.numpy()).all()
    u = ctx.tensor(np.zeros(5, np.int32))
    poison(u)
    assert (u.numpy() == 7).all()
