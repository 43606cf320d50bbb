"""The runtime end of the one path: launches checked before they are recorded, and scratch
returned to the pool after the plan's work has run."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

import vkumd
from vkumd.compiler.kernels.elementwise import ELEMENTWISE_FILL, FILL_PUSH
from vkumd.compiler.kernels.elementwise_plan import fill_plan, unary_plan
from vkumd.compiler.launch import Launch
from vkumd.compiler.registry import WORKGROUP
from vkumd.framework import ops
from vkumd.testing.numerics import poisoned


def test_a_push_of_the_wrong_size_is_refused(ctx) -> None:
    t = ctx.zeros((8,))
    program = ELEMENTWISE_FILL.specialize({"WIDTH": 32, WORKGROUP: 64})
    short = Launch(program, (t.binding,), FILL_PUSH.pack(8, 0)[:4], (1, 1, 1), (0,))
    with pytest.raises(vkumd.VkumdValueError, match="8 bytes"):
        ctx.launch(short)
    ctx.launch(short._replace(push=FILL_PUSH.pack(8, 0x3F800000)))  # 1.0f
    np.testing.assert_array_equal(t.numpy(), np.ones(8, np.float32))


def test_a_bad_variant_fails_when_it_is_planned(ctx) -> None:
    with pytest.raises(vkumd.VkumdValueError, match="WIDTH=24"):
        ELEMENTWISE_FILL.specialize({"WIDTH": 24, WORKGROUP: 64})


@dataclass(frozen=True)
class _ScratchThenCopy:
    """A plan that fills a scratch buffer with 3.0 and copies it into its one operand."""

    caps: object
    elements: int

    @property
    def scratch(self) -> tuple[int, ...]:
        return (4 * self.elements,)

    def launches(self, operands, scratch):
        (out,) = operands
        n = self.elements
        fill = fill_plan(self.caps, 32, n, 0x40400000)  # 3.0f
        copy = unary_plan(self.caps, "convert", "F32", "F32", (n,), (n,))
        return [*fill.launches(list(scratch)), *copy.launches([scratch[0], out])]


def test_scratch_is_bound_and_returned_to_the_pool(ctx) -> None:
    out = poisoned(ctx, 1000)
    ctx.synchronize()
    used = ctx.memory.used_bytes()
    ctx.run(_ScratchThenCopy(ctx.caps, 1000), (out,))
    np.testing.assert_array_equal(out.numpy(), np.full(1000, 3.0, np.float32))
    ctx.synchronize()
    assert ctx.memory.used_bytes() == used
    assert np.allclose(ops.add(out, out).numpy(), 6.0)
