"""``t += x`` and the other augmented assignments on the tensor API: in place, as PyTorch
(same object, same memory, views see it), with PyTorch's refusals; a traced function's
``+=`` rebinds and leaves the caller's tensor."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd


def test_augmented_assignment_updates_in_place(ctx) -> None:
    # As PyTorch: t += x writes into t's memory; t stays the same object and views see it.
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ctx.tensor(a)
    same, view = t, t.reshape(6)
    t += 1
    t *= ctx.tensor(np.array([1, 2, 3], np.float32))  # broadcasts into t's shape
    t -= 0.5
    t /= 2
    assert t is same
    want = ((a + 1) * np.array([1, 2, 3], np.float32) - 0.5) / 2
    np.testing.assert_array_equal(t.numpy(), want)
    np.testing.assert_array_equal(view.numpy(), want.reshape(6))
    ids = ctx.tensor(np.array([7, -7, 9], np.int32))
    same = ids
    ids //= 2
    assert ids is same
    np.testing.assert_array_equal(ids.numpy(), [3, -4, 4])


def test_augmented_assignment_refuses_what_pytorch_refuses(ctx) -> None:
    small = ctx.tensor(np.ones(3, np.float32))
    with pytest.raises(vkumd.VkumdValueError, match=r"\+= x: x of shape \(2, 3\) does not "
                       r"broadcast into t's shape \(3,\)"):
        small += ctx.tensor(np.ones((2, 3), np.float32))
    ints = ctx.tensor(np.ones(3, np.int32))
    with pytest.raises(vkumd.VkumdValueError, match="not an integer"):
        ints += 0.5
    square = ctx.tensor(np.ones((3, 3), np.float32))
    with pytest.raises(vkumd.VkumdTypeError, match="t = t @ x"):
        square @= square
    np.testing.assert_array_equal(small.numpy(), 1.0)  # a refusal leaves t as it was
    np.testing.assert_array_equal(ints.numpy(), 1)


def test_augmented_assignment_in_a_traced_function_leaves_the_input(ctx) -> None:
    def bump(x):
        x += 1
        return x

    x = ctx.tensor(np.zeros(3, np.float32))
    f = vkumd.compile(bump, {"x": x})
    np.testing.assert_array_equal(f(x).numpy(), 1.0)
    np.testing.assert_array_equal(x.numpy(), 0.0)
