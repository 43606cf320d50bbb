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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import ray

from vkumd.distributed import iter_embed, node_resources, start_actors
from vkumd.models import SentenceEncoder
from vkumd.testing.netns import descendants, refuse_outside, stop_by_pid

CORPUS = [f"line {i}: a sentence about {w} and {i % 7} other things"
          for i, w in enumerate(["rivers", "cats", "tea", "maths", "trains", "night"] * 8)]


def main() -> int:
    """Run the job; see the module docstring."""
    refuse_outside(["lo"])  # on the host Ray would bind to the machine's own address
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
