"""Eager dispatch through both descriptor paths, and logging settings."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import vkumd
from vkumd.framework import ops
from vkumd.testing.numerics import poisoned, rel_error


@pytest.mark.parametrize("push_descriptors", [True, False])
def test_both_descriptor_paths_compute_the_same(push_descriptors: bool) -> None:
    rng = np.random.default_rng()
    a = rng.standard_normal((37, 11), dtype=np.float32)
    b = rng.standard_normal((11,), dtype=np.float32)
    with vkumd.Context(push_descriptors=push_descriptors) as ctx:
        if push_descriptors and not ctx.caps.push_descriptors:
            pytest.skip(f"{ctx.caps.name} has no VK_KHR_push_descriptor")
        assert ctx.descriptors.push_descriptors is push_descriptors
        out = poisoned(ctx, (37, 11))
        for _ in range(3):
            ops.sub(ctx.tensor(a), ctx.tensor(b), out=out)
        got = out.numpy()
        want = a.astype(np.float64) - b
        assert not np.isnan(got).any()
        assert rel_error(got, want) < 1e-6
        if not push_descriptors:
            assert ctx.descriptors.pool_count == 1
            assert ctx.descriptors.sets_allocated >= 3


def test_pooled_path_from_environment(monkeypatch) -> None:
    monkeypatch.setenv("VKUMD_DISABLE_PUSH_DESCRIPTORS", "1")
    with vkumd.Context() as ctx:
        assert not ctx.descriptors.push_descriptors


def test_pooled_descriptors_grow_a_new_pool_when_one_is_full(monkeypatch) -> None:
    from vkumd.submission import descriptors

    monkeypatch.setattr(descriptors, "SETS_PER_POOL", 2)
    monkeypatch.setattr(descriptors, "BUFFERS_PER_POOL", 6)
    with vkumd.Context(push_descriptors=False) as ctx:
        from vkumd.compiler.registry import KERNELS

        kernel = KERNELS["elementwise_binary"]
        program = ctx.kernels.program(kernel.name, kernel.variants(ctx.caps)[0])
        # Five different bindings: the stream's binder hands out a cached set for a repeat.
        tensors = [ctx.zeros((4,)) for _ in range(5)]

        def record(cmd) -> None:
            for t in tensors:
                ctx.descriptors.bind(cmd, program.layout, [t.binding] * 3)

        ctx._oneshot.run(record)
        assert ctx.descriptors.pool_count == 3
        ctx.descriptors.reset()


def test_vkumd_log_sets_the_level_and_refuses_nonsense() -> None:
    # A bare environment, except where vkumd was installed (a --target install needs it).
    base = {"PATH": ""}
    if "PYTHONPATH" in os.environ:
        base["PYTHONPATH"] = os.environ["PYTHONPATH"]
    ok = subprocess.run([sys.executable, "-c", "import logging, vkumd; "
                         "print(logging.getLogger('vkumd').level)"],
                        env={**base, "VKUMD_LOG": "debug"}, capture_output=True, text=True)
    assert ok.returncode == 0 and ok.stdout.strip() == "10"
    bad = subprocess.run([sys.executable, "-c", "import vkumd"],
                         env={**base, "VKUMD_LOG": "loud"}, capture_output=True, text=True)
    assert bad.returncode != 0 and "VKUMD_LOG='loud'" in bad.stderr
