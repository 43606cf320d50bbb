"""The head node of a Ray test or benchmark cluster, run inside a namespace of its own.

``python -m vkumd.testing.ray_head --ip ADDR [--nodes N] ...`` starts a Ray head bound to
``ADDR`` (loopback, or a veth address made by :func:`vkumd.testing.netns.veth_pair`), prints
``ADDRESS host:port`` for worker nodes to join, waits until ``--nodes`` nodes are alive, then
times, interleaved ``--repeats`` times: one in-process encoder embedding the corpus chunk by
chunk (the same chunks Ray gets), and :func:`vkumd.distributed.iter_embed` on each count of
actors in ``--actors``. It prints ``REPORT {json}``: wall and CPU seconds of every run (this
process, the actors, and the cluster: every process of this node's PID namespace plus the
actors on other nodes), the node and PID of each actor, the batches each finished, and the
largest difference from the in-process embeddings; with ``--probes`` also the time of
tiny calls to each actor against the same call in this process (:func:`probe`). Then it
shuts Ray down and stops, by PID, whatever it started.

It refuses to start unless its namespace holds only ``lo`` (and the ``--allow`` interface):
on the host Ray would bind to the machine's own address.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from typing import Any

import numpy as np

from vkumd.testing import netns

WORDS = ("river cat tea maths train night bridge book music sea walk rain city garden "
         "window light stone paper cloud field letter").split()


def corpus(count: int, seed: int = 0) -> list[str]:
    """``count`` sentences of 4 to 24 words, fixed by ``seed``."""
    rng = random.Random(seed)
    return [f"{i}: " + " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 24)))
            for i in range(count)]


def wait_for_nodes(ray: Any, count: int, timeout_s: float) -> list[str]:
    """Ids of the alive nodes once there are ``count``.

    Raises:
        SystemExit: fewer joined within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        if len(alive) >= count:
            return alive
        if time.monotonic() > deadline:
            raise SystemExit(f"only {len(alive)} of {count} Ray nodes joined in {timeout_s} s")
        time.sleep(0.5)


def single_run(encoder: Any, texts: list[str], chunk: int, batch: int
               ) -> tuple[np.ndarray, dict[str, float]]:
    """Embeddings of ``texts`` chunk by chunk in this process; wall seconds, this process's
    CPU seconds and the CPU seconds of the node's namespace (idle Ray daemons included)."""
    wall, cpu, node = time.perf_counter(), time.process_time(), netns.namespace_cpu_seconds()
    rows = [encoder.encode(texts[i:i + chunk], batch_size=batch, progress=False)
            for i in range(0, len(texts), chunk)]
    return np.concatenate(rows), {"wall_s": time.perf_counter() - wall,
                                  "cpu_s": time.process_time() - cpu,
                                  "node_cpu_s": netns.namespace_cpu_seconds() - node}


def ray_run(ray: Any, actors: list[Any], texts: list[str], chunk: int, batch: int,
            remote: list[bool]) -> tuple[np.ndarray, dict[str, Any]]:
    """Embeddings of ``texts`` over ``actors``, with wall seconds, the actors' CPU seconds, the
    CPU of this node's namespace plus that of the actors on other nodes (``remote``), and the
    batches each actor finished."""
    from vkumd.distributed import iter_embed

    cpu_before = ray.get([a.cpu_seconds.remote() for a in actors])
    wall, node = time.perf_counter(), netns.namespace_cpu_seconds()
    stream = iter_embed(texts, actors, chunk_size=chunk, batch_size=batch)
    rows = [block for _, block in stream]
    seconds, node = time.perf_counter() - wall, netns.namespace_cpu_seconds() - node
    used = [after - before for before, after in zip(
        cpu_before, ray.get([a.cpu_seconds.remote() for a in actors]), strict=True)]
    far = sum(u for u, r in zip(used, remote, strict=True) if r)
    return np.concatenate(rows), {
        "actors": len(actors), "wall_s": seconds, "per_actor": stream.stats.per_actor,
        "actor_cpu_s": sum(used), "cluster_cpu_s": node + far}


def probe(ray: Any, actor: Any, encoder: Any, calls: int) -> dict[str, list[float]]:
    """Seconds per call, alternating: an empty actor call (``ping``), one short sentence
    embedded by the actor, and the same sentence embedded in this process. Their difference
    is Ray's cost per task, free of the embedding's own noise (the work is tiny)."""
    text = ["a short probe sentence"]
    found: dict[str, list[float]] = {"ping": [], "actor_encode": [], "local_encode": []}
    for index in range(calls):
        t0 = time.perf_counter()
        ray.get(actor.ping.remote())
        t1 = time.perf_counter()
        ray.get(actor.encode.remote(index, text, 1))
        t2 = time.perf_counter()
        encoder.encode(text, batch_size=1, progress=False)
        t3 = time.perf_counter()
        found["ping"].append(t1 - t0)
        found["actor_encode"].append(t2 - t1)
        found["local_encode"].append(t3 - t2)
    return found


def measure(ray: Any, args: argparse.Namespace) -> dict[str, Any]:
    """The timed part: see the module docstring."""
    from vkumd.distributed import start_actors
    from vkumd.models import SentenceEncoder

    texts = corpus(args.sentences)
    report: dict[str, Any] = {"sentences": len(texts), "chunk": args.chunk,
                              "batch": args.batch, "chunks": -(-len(texts) // args.chunk),
                              "single": [], "runs": []}
    counts = [int(c) for c in args.actors.split(",")]
    actors = start_actors(max(counts))
    report["actor_info"] = [ray.get(a.info.remote()) for a in actors]
    here = ray.get_runtime_context().get_node_id()
    remote = [info["node"] != here for info in report["actor_info"]]
    with SentenceEncoder.from_pretrained() as encoder:
        warm = texts[:args.chunk]
        encoder.encode(warm, batch_size=args.batch, progress=False)
        ray_run(ray, actors, warm * max(counts), args.chunk, args.batch, remote)
        worst = 0.0
        for _ in range(args.repeats):
            want, single = single_run(encoder, texts, args.chunk, args.batch)
            report["single"].append(single)
            for count in counts:
                got, run = ray_run(ray, actors[:count], texts, args.chunk, args.batch,
                                   remote[:count])
                worst = max(worst, float(np.abs(got - want).max()))
                report["runs"].append(run)
        report["probes"] = [dict(probe(ray, actor, encoder, args.probes), remote=far)
                            for actor, far in zip(actors, remote, strict=True)]
    report["max_diff"] = worst
    for actor in actors:
        ray.kill(actor)
    return report


def main(argv: list[str] | None = None) -> int:
    """Run the head; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ip", default="127.0.0.1", help="the address Ray binds to")
    parser.add_argument("--allow", default=None, help="an interface besides lo")
    parser.add_argument("--nodes", type=int, default=1, help="wait for this many nodes")
    parser.add_argument("--slots", type=int, default=1, help="vulkan_gpu slots per device")
    parser.add_argument("--cpus", type=int, default=1, help="CPUs the head declares")
    parser.add_argument("--actors", default="1", help="actor counts to time, e.g. 1,2")
    parser.add_argument("--sentences", type=int, default=48)
    parser.add_argument("--chunk", type=int, default=8, help="sentences per Ray task")
    parser.add_argument("--batch", type=int, default=8, help="sentences per device batch")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--probes", type=int, default=0,
                        help="tiny calls per actor timing Ray's cost per task (see probe)")
    parser.add_argument("--join-timeout", type=float, default=180.0)
    args = parser.parse_args(argv)
    netns.refuse_outside(["lo"] + ([args.allow] if args.allow else []))
    if os.environ.get("RAY_USAGE_STATS_ENABLED") != "0":
        raise SystemExit("set RAY_USAGE_STATS_ENABLED=0")
    import ray

    from vkumd.distributed import node_resources

    started: set[int] = set()
    try:
        t0 = time.perf_counter()
        ray.init(num_cpus=args.cpus, resources=node_resources(slots_per_device=args.slots),
                 include_dashboard=False, _node_ip_address=args.ip, log_to_driver=False)
        started |= netns.descendants()
        print("ADDRESS " + ray.get_runtime_context().gcs_address, flush=True)
        nodes = wait_for_nodes(ray, args.nodes, args.join_timeout)
        report = {"ray_start_s": time.perf_counter() - t0, "nodes": nodes, "ip": args.ip}
        report.update(measure(ray, args))
        started |= netns.descendants()
    finally:
        started |= netns.descendants()
        ray.shutdown()
        netns.stop_by_pid(started)
    print("REPORT " + json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
