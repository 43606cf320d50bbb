"""Ray: actors placed by a vulkan_gpu resource, a job that survives a killed actor, and
``vkumd embed --ray``.

Ray binds to the machine's non-loopback address unless it runs in a network namespace, so
the test never starts Ray in its own process: it runs ray_job.py under ``unshare --net
--pid --fork --kill-child --mount-proc`` with only ``lo`` up. Ray can reach nothing but
loopback there, and when the job ends (or this test kills it by PID) the kernel ends every
process left in its PID namespace. Skips, with the reason, without ray, unshare or the model.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import MISSING, model_installed

JOB = Path(__file__).with_name("ray_job.py")
NAMESPACE = ["unshare", "--net", "--pid", "--fork", "--kill-child", "--mount-proc"]


def _skip_reason() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: pip install 'vkumd[ray]'"
    if not model_installed():
        return MISSING
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing: the Ray test runs only inside its own namespaces"
    probe = subprocess.run([*NAMESPACE, "ip", "link", "set", "lo", "up"],
                           capture_output=True, text=True, timeout=30)
    if probe.returncode != 0:
        return f"cannot make a network and PID namespace here: {probe.stderr.strip()}"
    return None


def test_ray_embed_survives_a_killed_actor_and_the_cli_matches() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    env = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OPENBLAS_NUM_THREADS="1",
               RAY_DISABLE_IMPORT_WARNING="1")
    command = [*NAMESPACE, "sh", "-c", 'ip link set lo up && exec "$0" "$1"',
               sys.executable, str(JOB)]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=420)
    finally:
        if proc.poll() is None:
            proc.kill()  # its PID only; --kill-child then ends the namespace's processes
            proc.wait()
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    assert proc.returncode == 0 and lines, f"rc {proc.returncode}\n{out[-3000:]}\n{err[-3000:]}"
    report = json.loads(lines[-1][len("REPORT "):])
    assert report["order"] == list(range(0, 48, 6))  # streamed in input order
    assert report["max_diff"] < 2e-6  # same driver and kernels as the in-process encoder
    assert report["lost"] == 1 and report["retried"] >= 1
    assert len({a["pid"] for a in report["actors"]}) == 2
    assert report["cli_rc"] == 0, report["cli_err"]
    assert report["cli_max_diff"] < 2e-6
    assert "sentences in" in report["cli_err"]


def test_without_ray_the_error_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from vkumd.distributed import embed
    from vkumd.errors import VkumdError

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(VkumdError, match=r"pip install 'vkumd\[ray\]'"):
        embed(["a"])


def test_node_resources_counts_devices() -> None:
    import vkumd
    from vkumd.distributed import RESOURCE, node_resources
    from vkumd.errors import VkumdValueError

    count = len(vkumd.devices())
    assert node_resources() == {RESOURCE: float(count)}
    assert node_resources(slots_per_device=3) == {RESOURCE: 3.0 * count}
    with pytest.raises(VkumdValueError, match="slots_per_device=0"):
        node_resources(0)


def test_stream_refuses_bad_input() -> None:
    from vkumd.distributed import iter_embed
    from vkumd.errors import VkumdTypeError, VkumdValueError

    with pytest.raises(VkumdValueError, match="no actors"):
        iter_embed(["a"], [])
    with pytest.raises(VkumdValueError, match="chunk_size=0"):
        iter_embed(["a"], [object()], chunk_size=0)
    with pytest.raises(VkumdTypeError, match="one string"):
        iter_embed("text", [object()])  # type: ignore[arg-type]
