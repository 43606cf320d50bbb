"""The bad-input corpus: every case must raise its typed vkumd error with a clear message,
and leave the shared context working (an add still matches numpy, no capture left open, no
tensor or context left alive by the refusal).

The cases live in ``bad_input_cases.py`` (Context, factories, Tensor, memory, streams,
events, capture, DLPack) and ``bad_input_ops.py`` (every op in ``vkumd.ops``). Validation is
on (the conftest), so a refusal that still reached the driver with bad arguments fails too.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from bad_input_cases import CASES as RUNTIME_CASES
from bad_input_env import Case, Env
from bad_input_ops import CASES as OP_CASES

import vkumd
from vkumd import ops

CASES = RUNTIME_CASES + OP_CASES
# Objects whose count must not grow across a case: a refused call that leaked a tensor or
# half-built a context would show here (pool bytes in use are checked as well).
WATCHED = ("Tensor", "Context", "Instance", "Device")


@pytest.fixture(scope="module")
def env(ctx: Any) -> Iterator[Env]:
    """The shared context and one second context for every mixed-context case."""
    other = vkumd.Context()
    try:
        for context in (ctx, other):
            _still_works(context)  # transfers keep staging memory; make it before measuring
        yield Env(ctx, other)
    finally:
        other.close()


def _watched(env: Env) -> dict[str, int]:
    gc.collect()
    live = vkumd.live_objects()
    counts = {name: live.get(name, 0) for name in WATCHED}
    for name, context in (("ctx", env.ctx), ("other", env.other)):
        context.synchronize()  # memory of released tensors returns once their work is done
        counts[f"{name} pool bytes in use"] = context.memory.used_bytes()
    return counts


def _still_works(ctx: Any) -> None:
    assert not ctx.capturing, "the case left a capture open"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.full((2, 3), 0.5, dtype=np.float32)
    x, y = ctx.tensor(a), ctx.tensor(b)
    try:
        np.testing.assert_array_equal(ops.add(x, y).numpy(), a + b)
        ctx.synchronize()
    finally:
        x.release()
        y.release()


def test_corpus_is_large_and_ids_unique() -> None:
    ids = [case.id for case in CASES]
    assert len(ids) >= 120
    assert len(set(ids)) == len(ids), sorted({i for i in ids if ids.count(i) > 1})


def test_every_op_is_covered() -> None:
    ids = {case.id for case in OP_CASES}
    for name in ops.__all__:
        assert {f"{name}_numpy_array", f"{name}_released", f"{name}_closed_context"} <= ids, name


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, env: Env) -> None:
    before = _watched(env)
    limit = env.ctx.memory.get_limit()
    try:
        with pytest.raises(case.error) as info:
            case.call(env)
        message = str(info.value)
        kind = info.type
        del info  # its traceback holds the case's tensors
    finally:
        env.ctx.memory.set_limit(size=limit)  # in case a refused call changed it anyway
    assert issubclass(kind, vkumd.VkumdError), f"{kind.__name__} is not a vkumd error"
    assert case.fragment in message, f"{case.fragment!r} not in {message!r}"
    _still_works(env.ctx)
    _still_works(env.other)
    after = _watched(env)
    grown = {name: (before[name], after[name]) for name in before if after[name] > before[name]}
    assert not grown, f"objects left alive by the refused call (before, after): {grown}"
