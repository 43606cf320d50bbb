"""The body of the Ray test, run by test_ray.py inside a network and PID namespace it made.

Starts a one-node Ray cluster on loopback (two ``vulkan_gpu`` slots on the one lavapipe
device), embeds a corpus on two actors while killing one of them by its handle mid-job,
runs ``vkumd embed --ray ADDRESS`` against the same cluster, checks both against one
in-process encoder, prints a JSON report and stops every process it started by PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from vkumd.distributed import iter_embed, node_resources, start_actors
from vkumd.models import SentenceEncoder

CORPUS = [f"line {i}: a sentence about {w} and {i % 7} other things"
          for i, w in enumerate(["rivers", "cats", "tea", "maths", "trains", "night"] * 8)]


def refuse_outside_a_private_network_namespace() -> None:
    """Stop unless this process runs in a network namespace of its own (unshare -n) whose
    only interface is loopback: Ray would otherwise bind to the machine's own address."""
    # /proc/self/net follows the process's network namespace (/sys/class/net does not,
    # unless sysfs is mounted again inside it).
    lines = Path("/proc/self/net/dev").read_text().splitlines()[2:]
    interfaces = sorted(line.split(":", 1)[0].strip() for line in lines)
    if interfaces != ["lo"]:
        sys.exit(f"ray_job.py must run inside a private network namespace (unshare -n) with "
                 f"only lo; this one has {interfaces}")


def descendants() -> set[int]:
    """PIDs of every process below this one, read from /proc (ppid is field 4 of stat)."""
    parent: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, frontier = set(), {os.getpid()}
    while frontier:
        frontier = {pid for pid, ppid in parent.items() if ppid in frontier} - found
        found |= frontier
    return found


def stop_by_pid(pids: set[int]) -> list[int]:
    """SIGTERM, then SIGKILL after up to 10 s, those of ``pids`` that still run."""
    def running() -> list[int]:
        alive = []
        for pid in pids:
            try:
                status = Path(f"/proc/{pid}/status").read_text(errors="ignore")
            except OSError:
                continue  # gone
            if "zombie" not in status:
                alive.append(pid)
        return alive

    def send(pid: int, sig: int) -> None:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass  # it ended between the look and the signal

    left = running()
    for pid in left:
        send(pid, signal.SIGTERM)
    for _ in range(100):  # bounded: 10 s
        if not running():
            break
        time.sleep(0.1)
    for pid in running():
        send(pid, signal.SIGKILL)
    return left


def main() -> int:
    """Run the job; see the module docstring."""
    refuse_outside_a_private_network_namespace()
    assert os.environ.get("RAY_USAGE_STATS_ENABLED") == "0"
    temp = tempfile.mkdtemp(prefix="vkray", dir="/tmp")  # short: Ray's socket paths
    started: set[int] = set()
    report: dict[str, object] = {}
    try:
        t0 = time.perf_counter()
        ray.init(num_cpus=2, resources=node_resources(slots_per_device=2),
                 include_dashboard=False, _temp_dir=temp, _node_ip_address="127.0.0.1",
                 log_to_driver=False)
        started |= descendants()
        report["ray_start_s"] = time.perf_counter() - t0
        with SentenceEncoder.from_pretrained() as enc:
            want = enc.encode(CORPUS)
        actors = start_actors(2)
        report["actors"] = [ray.get(a.info.remote()) for a in actors]
        started |= descendants()
        stream = iter_embed(CORPUS, actors, chunk_size=6, batch_size=6)
        got = np.empty_like(want)
        order = []
        for start, rows in stream:
            order.append(start)
            got[start:start + len(rows)] = rows
            if len(order) == 1:
                ray.kill(actors[0])  # mid-job: both actors hold a batch now
        stats = stream.stats
        report.update(order=order, max_diff=float(np.abs(got - want).max()),
                      retried=stats.retried_batches, lost=stats.actors_lost,
                      sentences_per_s=stats.sentences_per_s)
        ray.kill(actors[1])
        # The CLI against the same cluster, from another process in this namespace.
        work = Path(temp) / "cli"
        work.mkdir()
        (work / "in.txt").write_text("\n".join(CORPUS) + "\n")
        address = ray.get_runtime_context().gcs_address
        cli = subprocess.run(
            [sys.executable, "-m", "vkumd.cli", "embed", "--ray", address, "--actors", "1",
             "--file", str(work / "in.txt"), "--out", str(work / "out.npy"),
             "--no-progress"], capture_output=True, text=True, timeout=300)
        report["cli_rc"], report["cli_err"] = cli.returncode, cli.stderr[-2000:]
        if cli.returncode == 0:
            report["cli_max_diff"] = float(np.abs(np.load(work / "out.npy") - want).max())
    finally:
        started |= descendants()
        ray.shutdown()
        report["stopped_after_shutdown"] = stop_by_pid(started)
        shutil.rmtree(temp, ignore_errors=True)
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
