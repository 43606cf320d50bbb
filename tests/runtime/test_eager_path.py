"""The eager hot path: what it remembers between dispatches (a plan's pipeline per context, a
batch's last binding, a cached set's keys, the memory an open batch touched) never outlives
what it stands for, and a bad input is refused as it was before anything was remembered."""

from __future__ import annotations

import numpy as np
import pytest

import vkumd
from vkumd.compiler.kernels.elementwise_plan import FixedLaunch, binary_plan, unary_plan
from vkumd.framework import ops
from vkumd.runtime.uses import MemoryUses
from vkumd.testing.numerics import poisoned, rel_error


def _pair(ctx: vkumd.Context, n: int) -> tuple[np.ndarray, np.ndarray, vkumd.Tensor,
                                                vkumd.Tensor]:
    rng = np.random.default_rng()
    a, b = rng.standard_normal((2, n), dtype=np.float32)
    return a, b, ctx.tensor(a), ctx.tensor(b)


def test_a_buffer_list_changed_in_place_binds_the_new_buffers(ctx) -> None:
    n = 203
    a, b, ta, tb = _pair(ctx, n)
    outs = [poisoned(ctx, n) for _ in range(2)]
    plan = binary_plan(ctx.caps, "add", "F32", (n,), (n,), (n,))
    program = ctx.kernels.program(plan.program)
    stream = ctx.stream()
    buffers = [ta.binding, tb.binding, outs[0].binding]
    stream.dispatch(program, buffers, plan.push, plan.groups, plan.writes)
    buffers[2] = outs[1].binding  # the same list object, now naming another output
    stream.dispatch(program, buffers, plan.push, plan.groups, plan.writes)
    want = a.astype(np.float64) + b
    for out in outs:
        assert rel_error(out.numpy(), want) < 1e-6
    stream.release()


def test_bad_outputs_and_operands_are_refused_once_the_plan_is_remembered(ctx) -> None:
    n = 77
    a, b, ta, tb = _pair(ctx, n)
    out = ctx.empty(n)
    ops.add(ta, tb, out=out)  # the plan and its pipeline are now remembered
    with pytest.raises(vkumd.VkumdValueError, match="shape"):
        ops.add(ta, tb, out=ctx.empty(n + 1))
    with pytest.raises(vkumd.VkumdTypeError, match="int32"):
        ops.add(ta, tb, out=ctx.empty(n, vkumd.int32))
    with vkumd.Context() as other, pytest.raises(vkumd.VkumdValueError, match="context"):
        ops.add(ta, tb, out=other.empty(n))
    gone = ctx.empty(n)
    gone.release()
    assert gone.binding is None
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        ops.add(ta, tb, out=gone)
    with pytest.raises(vkumd.VkumdValueError, match="released"):
        ops.add(gone, tb, out=out)
    ops.add(ta, tb, out=out)  # the context stays usable
    assert rel_error(out.numpy(), a.astype(np.float64) + b) < 1e-6


def test_a_one_launch_plan_with_a_bad_push_is_refused_every_time(ctx) -> None:
    t = ctx.tensor(np.arange(40, dtype=np.float32))
    good = unary_plan(ctx.caps, "scale", "F32", "F32", (40,), (40,),
                      int(np.float32(2.0).view(np.uint32)))
    bad = FixedLaunch(good.program, good.push[:-4], good.groups, good.writes)
    for _ in range(2):  # a refused plan is not remembered as checked
        with pytest.raises(vkumd.VkumdValueError, match="push constants"):
            ctx.run(bad, (t, t))
    out = poisoned(ctx, 40)
    ctx.run(good, (t, out))
    np.testing.assert_array_equal(out.numpy(), 2 * np.arange(40, dtype=np.float32))


def test_an_absent_operand_of_a_one_launch_plan_binds_the_first(ctx) -> None:
    """FixedLaunch binds the first operand in place of an absent one; the remembered path
    must do the same (here a copy of ``t`` onto itself, which leaves it as it was)."""
    data = np.random.default_rng().standard_normal(50, dtype=np.float32)
    t = ctx.tensor(data)
    plan = unary_plan(ctx.caps, "convert", "F32", "F32", (50,), (50,))
    for _ in range(2):
        ctx.run(plan, (t, None))
    np.testing.assert_array_equal(t.numpy(), data)


def test_remembered_pipelines_belong_to_their_context() -> None:
    n = 129
    first = vkumd.Context()
    a, b, ta, tb = _pair(first, n)
    ops.add(ta, tb)
    first.close()  # its pipelines are destroyed; another context must build its own
    with vkumd.Context() as second:
        out = ops.add(second.tensor(a), second.tensor(b))
        assert rel_error(out.numpy(), a.astype(np.float64) + b) < 1e-6


def test_an_alias_of_a_bound_tensor_reuses_its_cached_set() -> None:
    with vkumd.Context(push_descriptors=False) as ctx:
        stream = ctx.stream()
        binder = stream.submitter.binder
        a, b, ta, tb = _pair(ctx, 96)
        out = ctx.empty(96)
        with stream:
            ops.add(ta, tb, out=out)
        allocated = binder.sets_allocated
        ops.fill(out, np.nan)
        # Views with bindings equal to the tensors', but other objects: the cache compares
        # the handle objects then, and hits.
        with stream:
            ops.add(ta.alias((96,)), tb.alias((96,)), out=out.alias((96,)))
        assert binder.sets_allocated == allocated
        assert rel_error(out.numpy(), a.astype(np.float64) + b) < 1e-6
        stream.release()


def test_stream_counts_cover_submitted_and_open_batches(ctx) -> None:
    stream = ctx.stream()
    t = ctx.tensor(np.zeros(64, np.float32))
    one = ctx.tensor(np.ones(64, np.float32))
    dispatches, barriers = stream.dispatches, stream.barriers
    with stream:
        for _ in range(3):
            ops.add(t, one, out=t)  # each after the last: two barriers
        stream.flush()
        ops.add(t, one, out=t)      # the first of a batch: ordered by the batch's start
        ops.add(one, one, out=t)    # write after write
    assert stream.dispatches - dispatches == 5
    assert stream.barriers - barriers == 3
    np.testing.assert_array_equal(t.numpy(), np.full(64, 2, np.float32))
    stream.release()


def test_memory_uses_of_the_open_batch() -> None:
    uses = MemoryUses()
    old, fresh, freed = ("buf", 0), ("buf", 256), ("buf", 512)
    uses.mark([old, freed], 3)
    touched: set = set()
    uses.open_batch(touched, 4)
    touched.update([old, fresh, freed])
    assert (uses.last(old), uses.last(fresh)) == (4, 4)
    assert uses.take(freed) == 4  # freed while the open batch uses it
    uses.close_batch(None)        # discarded: it never runs
    assert (uses.last(old), uses.last(fresh), uses.last(freed)) == (3, None, None)
    touched = {old, fresh}
    uses.open_batch(touched, 5)
    uses.close_batch(5)
    assert (uses.last(old), uses.last(fresh), len(uses)) == (5, 5, 2)
