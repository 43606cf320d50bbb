"""The soak (``tests/soak/soak.py``) scaled to about a minute or less, with validation on.

Same phases and bounds as ``make soak``: eager dispatches, random allocations, graph replays
and context cycles; RSS within 64 MiB of the post-warm-up baseline, pool bytes and live
objects back to the baseline after every phase. ``VKUMD_SOAK_SCALE`` overrides the scale.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest

from vkumd import ops
from vkumd.submission.descriptors import SETS_PER_POOL

# 0.15 of the full soak: about 26 s alone with validation on here, under 60 s even
# with other test processes on the two cores (docs/reliability.md has the measurements).
SCALE = float(os.environ.get("VKUMD_SOAK_SCALE", "0.15"))


def _soak_module():  # noqa: ANN202 - a module loaded by path
    path = Path(__file__).parent / "soak" / "soak.py"
    spec = importlib.util.spec_from_file_location("vkumd_soak", path)
    assert spec is not None and spec.loader is not None
    if spec.name in sys.modules:
        return sys.modules[spec.name]
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_soak_short() -> None:
    soak = _soak_module()
    lines: list[str] = []
    phases = soak.soak(SCALE, lines.append)
    report = soak.table(phases)
    assert [p.name for p in phases] == ["dispatch", "alloc", "replay", "contexts"], report
    assert phases[0].count == round(soak.FULL["dispatch"] * SCALE)
    failures = [f"{p.name}: {f}" for p in phases for f in p.failures]
    assert not failures, report + "\n" + "\n".join(lines[-20:])


def test_soak_notices_a_leak() -> None:
    """The bounds are live: a phase that keeps one tensor fails on pool bytes and objects."""
    soak = _soak_module()
    kept = []

    class Leaky(soak.Soak):
        def replay(self, phase, n):  # noqa: ANN001, ANN202 - the override under test
            super().replay(phase, n)
            if not phase.name.startswith("warm-up"):
                kept.append(self.ctx.empty(1000))

    runner = Leaky(0.002, lambda line: None)
    try:
        phases = {p.name: p for p in runner.run()}
    finally:
        kept.clear()
        runner.close()
    assert not phases["alloc"].failures
    failures = " ".join(phases["replay"].failures)
    assert "pool bytes in use" in failures and "'Tensor'" in failures, failures


def test_soak_takes_a_fuller_set_cache_for_no_leak() -> None:
    """A phase after which the stream's descriptor-set cache holds one pool more passes.

    How many distinct offsets the dispatch phase's new outputs take follows how far the
    device lags the host (a released output's memory comes back once its work completed),
    and each distinct binding is a cached set; under load the cache filled one pool more
    than after the warm-up and the soak failed on ``{'DescriptorPool': (n, n + 1)}``. Here
    the lag is made on purpose: more outputs alive at once than a pool has sets.
    """
    soak = _soak_module()
    pools: list[int] = []

    class Lagging(soak.Soak):
        def dispatch(self, phase, n):  # noqa: ANN001, ANN202 - the override under test
            super().dispatch(phase, n)
            if phase.name.startswith("warm-up"):
                return
            outs = [self.ctx.empty(256) for _ in range(SETS_PER_POOL + 1)]
            for out in outs:
                ops.add(self.x, self.one, out=out)
            self.ctx.synchronize()
            pools.append(self.ctx.default_stream.submitter.binder.pool_count)
            for out in outs:
                out.release()

    runner = Lagging(0.002, lambda line: None)
    try:
        if runner.ctx.kernels.push_descriptors:
            pytest.skip("push descriptors: the stream allocates no descriptor set")
        phases = runner.run()
    finally:
        runner.close()
    assert pools and pools[0] >= 2, pools  # the cache did fill one pool more
    failures = [f"{p.name}: {f}" for p in phases for f in p.failures]
    assert not failures, soak.table(phases)
