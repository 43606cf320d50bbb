"""Ray: actors placed by a vulkan_gpu resource, a job that survives a killed actor,
``vkumd embed --ray``, and a two-node cluster whose batches land on both nodes.

Ray binds to the machine's non-loopback address unless it runs in a network namespace, so
these tests never start Ray in their own process. One node: ray_job.py runs under ``unshare
--net --pid --fork --kill-child --mount-proc`` with only ``lo`` up. Two nodes: a head and a
worker in two network namespaces joined by a veth pair on a private /30 the host does not
use (vkumd.testing.netns, vkumd.testing.ray_cluster), removed afterwards. Ray can reach
nothing but loopback or the other test namespace, and ending each namespace's first process
(by PID) ends everything inside. Marked ``ray`` (``make test-ray`` runs them, with a time
budget). Skips, with the reason, without ray, the model, root, unshare or ip.
"""

from __future__ import annotations

import importlib.util
import ipaddress
import json
import subprocess
import sys
from pathlib import Path

import pytest

from vkumd.testing import netns, ray_cluster

from .conftest import MISSING, model_installed

JOB = Path(__file__).with_name("ray_job.py")


def _skip_reason() -> str | None:
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: pip install 'vkumd[ray]'"
    if not model_installed():
        return MISSING
    return netns.unavailable()


@pytest.mark.ray
def test_ray_embed_survives_a_killed_actor_and_the_cli_matches() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.Popen(netns.loopback_command([sys.executable, str(JOB)]),
                            env=ray_cluster.environment(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=420)
    finally:
        netns.end(proc)  # its PID only; --kill-child then ends the namespace's processes
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


@pytest.mark.ray
def test_two_nodes_over_veth_each_run_batches() -> None:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    report = ray_cluster.two_nodes(["--actors", "2", "--sentences", "30", "--chunk", "5",
                                    "--batch", "5", "--join-timeout", "120"], timeout_s=400)
    pair = report["pair"]
    subnet = ipaddress.ip_network(pair["subnet"])
    assert subnet.subnet_of(ipaddress.ip_network("10.211.0.0/16"))
    assert report["ip"] == pair["addresses"][0]  # the head bound to its veth address
    assert len(report["nodes"]) == 2
    actor_nodes = [a["node"] for a in report["actor_info"]]
    assert sorted(actor_nodes) == sorted(report["nodes"])  # one actor on each node
    (run,) = report["runs"]
    assert run["actors"] == 2 and sum(run["per_actor"]) == report["chunks"] == 6
    assert min(run["per_actor"]) >= 1, run  # both nodes embedded batches
    assert report["max_diff"] < 2e-6  # the same driver on both nodes
    assert report["leftovers"] == []
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    for name in (*pair["namespaces"], *pair["links"]):
        assert name not in listed and f" {name}:" not in links and f" {name}@" not in links


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


def test_claim_slot_spreads_actors_and_frees_a_dead_ones_slot(tmp_path: Path) -> None:
    import multiprocessing

    from vkumd.framework.ray_pool import claim_slot

    first, held_a = claim_slot("node1", str(tmp_path))
    second, held_b = claim_slot("node1", str(tmp_path))
    other, held_c = claim_slot("node2", str(tmp_path))
    assert (first, second, other) == (0, 1, 0)  # per node, lowest free first
    # Another process sees the held slots too (flock is per open file, across processes).
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:
        assert pool.apply(_claim_in_child, (str(tmp_path),)) == 2
    held_a.close()  # as when an actor dies: its slot is free for the replacement
    again, held_d = claim_slot("node1", str(tmp_path))
    assert again == 0
    for handle in (held_b, held_c, held_d):
        handle.close()


def _claim_in_child(directory: str) -> int:
    from vkumd.framework.ray_pool import claim_slot

    slot, handle = claim_slot("node1", directory)
    handle.close()
    return slot


def test_claim_slot_says_when_all_are_held(tmp_path: Path) -> None:
    from vkumd.errors import VkumdError
    from vkumd.framework.ray_pool import claim_slot

    _, handle = claim_slot("n", str(tmp_path), most=1)
    with pytest.raises(VkumdError, match="all 1 vulkan_gpu slots of node n are held"):
        claim_slot("n", str(tmp_path), most=1)
    handle.close()
