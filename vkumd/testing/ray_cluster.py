"""Start a Ray cluster in namespaces of its own, run :mod:`vkumd.testing.ray_head`, stop it.

:func:`one_node` runs the head in a loopback-only namespace; :func:`two_nodes` makes a veth
pair (:func:`vkumd.testing.netns.veth_pair`), runs the head in one namespace and a
``ray start --block`` worker node in the other, both bound to their veth addresses only.
Both return the head's report (a dict). Every process is stopped by PID, and the namespaces
and links are removed, even when a step fails. ``RAY_USAGE_STATS_ENABLED=0`` is set for all.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vkumd.errors import VkumdError
from vkumd.testing import netns

HEAD = [sys.executable, "-m", "vkumd.testing.ray_head"]


def environment(**extra: str) -> dict[str, str]:
    """The environment of every Ray process: no usage reports, one BLAS thread, and token
    authentication with a token made for this cluster (given in the environment, so Ray
    neither reads nor writes ``~/.ray/auth_token``; ``ray start`` would otherwise join
    without a token and be refused by a head that made one)."""
    return dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OPENBLAS_NUM_THREADS="1",
                RAY_DISABLE_IMPORT_WARNING="1", RAY_AUTH_MODE="token",
                RAY_AUTH_TOKEN=secrets.token_hex(32), **extra)


def _report(out: str, err_path: Path, rc: int) -> dict[str, Any]:
    lines = [line for line in out.splitlines() if line.startswith("REPORT ")]
    if rc != 0 or not lines:
        raise VkumdError(f"the Ray head failed (rc {rc}):\n{out[-2000:]}\n"
                         f"{err_path.read_text(errors='replace')[-3000:]}")
    return json.loads(lines[-1][len("REPORT "):])


def one_node(head_args: Sequence[str], timeout_s: float = 600.0,
             env: dict[str, str] | None = None) -> dict[str, Any]:
    """The head's report from a one-node cluster on loopback (``--ip 127.0.0.1``)."""
    with tempfile.TemporaryDirectory(prefix="vkray") as logs:
        err_path = Path(logs) / "head.err"
        with err_path.open("w") as err:
            proc = subprocess.Popen(netns.loopback_command([*HEAD, *head_args]),
                                    env=env or environment(), stdout=subprocess.PIPE,
                                    stderr=err, text=True)
            try:
                out, _ = proc.communicate(timeout=timeout_s)
            finally:
                netns.end(proc)  # its PID only; --kill-child ends the namespace's processes
        return _report(out, err_path, proc.returncode)


def worker_command(address: str, ip: str, cpus: int, resources: dict[str, float]
                   ) -> list[str]:
    """``ray start`` for a worker node that joins ``address`` from ``ip`` and stays in the
    foreground (``--block``), so ending its PID ends the node."""
    ray = str(Path(sys.executable).with_name("ray"))
    return [ray, "start", "--address", address, "--node-ip-address", ip,
            "--num-cpus", str(cpus), "--resources", json.dumps(resources), "--block",
            "--disable-usage-stats"]


def two_nodes(head_args: Sequence[str], timeout_s: float = 600.0,
              env: dict[str, str] | None = None) -> dict[str, Any]:
    """The head's report from a head and a worker node in two namespaces joined by veth.

    The report gains ``"pair"``: the namespaces, links and addresses used, and
    ``"leftovers"``: what the host still listed after removal (empty).
    """
    from vkumd.distributed import node_resources

    env = env or environment()
    with tempfile.TemporaryDirectory(prefix="vkray") as logs:
        err_path, worker_log = Path(logs) / "head.err", Path(logs) / "worker.log"
        procs: list[subprocess.Popen[str]] = []
        try:
            with netns.veth_pair() as pair, err_path.open("w") as err, \
                    worker_log.open("w") as wlog:
                try:
                    head = subprocess.Popen(
                        netns.namespace_command(pair.namespaces[0], [
                            *HEAD, "--ip", pair.addresses[0], "--allow", pair.links[0],
                            "--nodes", "2", *head_args]),
                        env=env, stdout=subprocess.PIPE, stderr=err, text=True)
                    procs.append(head)
                    address = netns.read_line(head, "ADDRESS ", timeout_s=180)
                    if not address.startswith(pair.addresses[0] + ":"):
                        raise VkumdError(f"the head bound to {address}, not "
                                         f"{pair.addresses[0]}")
                    procs.append(subprocess.Popen(
                        netns.namespace_command(pair.namespaces[1], worker_command(
                            address, pair.addresses[1], 1, node_resources())),
                        env=env, stdout=wlog, stderr=subprocess.STDOUT, text=True))
                    out, _ = head.communicate(timeout=timeout_s)
                finally:
                    for proc in reversed(procs):
                        netns.end(proc)
            report = _report(out, err_path, head.returncode)
        except VkumdError as exc:
            raise VkumdError(f"{exc}\nworker node log:\n"
                             f"{worker_log.read_text(errors='replace')[-2000:]}") from None
    report["pair"] = {"namespaces": pair.namespaces, "links": pair.links,
                      "addresses": pair.addresses, "subnet": pair.subnet}
    report["leftovers"] = netns.leftovers(pair)
    return report
