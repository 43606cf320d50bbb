"""Per-process device-memory quotas: VKUMD_MEMORY_LIMIT as bytes or a share of the heap, and
four processes on one device of which one passes its quota and fails alone, clearly."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vkumd
from vkumd import settings
from vkumd.errors import VkumdValueError

CHILD = Path(__file__).with_name("quota_child.py")


@pytest.mark.parametrize(("value", "share"), [
    ("0.25", 0.25), ("25%", 0.25), (" 1.0 ", 1.0), ("0.5%", 0.005), (".5", 0.5), ("100%", 1.0),
    ("512MiB", None), ("1048576", None), ("1", None),
])
def test_parse_fraction(value: str, share: float | None) -> None:
    assert settings.parse_fraction(value) == share


@pytest.mark.parametrize("value", ["1.5", "0.0", "0%", "101%", "2."])
def test_parse_fraction_refuses_shares_outside_the_heap(value: str) -> None:
    with pytest.raises(VkumdValueError, match=r"share of the device-local heap .*\(0, 1\]"):
        settings.parse_fraction(value)


@pytest.mark.parametrize("value", ["0.25", "25%"])
def test_environment_share_sets_the_pool_limit(value: str,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", value)
    with vkumd.Context() as ctx:
        assert ctx.memory.get_limit() == int(ctx.caps.device_local_bytes * 0.25)


def test_set_limit_takes_a_share_string(ctx) -> None:
    before = ctx.memory.get_limit()
    try:
        ctx.memory.set_limit("50%")
        assert ctx.memory.get_limit() == int(ctx.caps.device_local_bytes * 0.5)
        with pytest.raises(VkumdValueError, match="memory limit: .*share"):
            ctx.memory.set_limit("150%")
    finally:
        ctx.memory.set_limit(before)


def test_quota_error_names_ask_use_limit_and_source(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VKUMD_MEMORY_LIMIT", "0.01%")
    with vkumd.Context() as ctx:
        limit = ctx.memory.get_limit()
        kept = ctx.empty((1024,), "float32")
        with pytest.raises(vkumd.OutOfDeviceMemory) as caught:
            ctx.empty((limit // 2,), "float32")
        exc = caught.value
        assert (exc.requested, exc.in_use, exc.limit) == (limit // 2 * 4, 4096, limit)
        text = str(exc)
        for words in (f"asked for {limit // 2 * 4} bytes", "4096 bytes in use",
                      f"limit {limit} bytes from VKUMD_MEMORY_LIMIT=0.01%"):
            assert words in text
        kept.release()


def _child_command() -> list[str]:
    """The python to start a Vulkan child with: under the Mesa 26 lane, through its loader
    (docs/lanes.md), else this interpreter."""
    ldso, libs = os.environ.get("VKUMD_LANE_LDSO"), os.environ.get("VKUMD_LANE_LIBRARY_PATH")
    if ldso and libs:
        return [ldso, "--library-path", libs, sys.executable]
    return [sys.executable]


def test_four_processes_one_over_its_quota_fails_alone() -> None:
    heap = vkumd.devices()[0].device_local_bytes
    # Three processes with roomy quotas in each spelling; the fourth (0.01% of the heap)
    # asks for twice its quota after its matmul.
    small = int(heap * 0.0001)
    plans = [("0.25", 0), ("10%", 0), ("256MiB", 0), ("0.01%", 2 * small + 64)]
    procs = []
    for seed, (limit, overflow) in enumerate(plans):
        env = dict(os.environ, VKUMD_MEMORY_LIMIT=limit, OPENBLAS_NUM_THREADS="1")
        args = [str(seed)] + ([str(overflow)] if overflow else [])
        procs.append(subprocess.Popen([*_child_command(), str(CHILD), *args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True))
    results = []
    try:
        for proc in procs:
            out, err = proc.communicate(timeout=240)
            results.append((proc.returncode, out, err))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()  # by its own handle: only the children this test started
                proc.wait()
    for seed, ((limit, overflow), (code, out, err)) in enumerate(zip(plans, results,
                                                                     strict=True)):
        assert code == (3 if overflow else 0), f"child {seed} ({limit}): {code}\n{out}\n{err}"
        report = json.loads(out.strip().splitlines()[-1])
        assert report["rel_error"] < 1e-5, report
        assert np.isfinite(report["rel_error"])
        if overflow:
            assert report["requested"] == overflow // 4 * 4
            assert report["limit"] == small
            assert "VKUMD_MEMORY_LIMIT=0.01%" in report["error"]
            assert f"asked for {report['requested']} bytes" in report["error"]
        else:
            assert "error" not in report
