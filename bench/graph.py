"""Eager against compiled (``vkumd.compile``), in the same run: one BERT encoder layer and a
chain of elementwise ops.

* ``bert``: one post-norm encoder layer (hidden 384, 12 heads, FFN 1536, batch 8, sequence
  128, float32, random weights closed over as constants), written on the tensor API;
* ``chain``: 8 elementwise ops on 4M floats (one input, scalars between).

Per workload and path: kernels launched and barriers per call (eager: the stream's counters
over one call; compiled: the recording's), host time (``time.thread_time`` of the Python
thread over the call and its ``synchronize``), CPU time (``time.process_time`` over the same:
every thread of the process, lavapipe's workers included, so on lavapipe it is the device's
work too, and unlike wall time it does not grow when other processes share the cores;
compare it with ``LP_NUM_THREADS=0``), device time (wall time over the same), and
peak memory (the pool's ``used_bytes`` high-water mark over a call, see :class:`HighWater`;
compiled: the first call, which allocates the recording). A third path, ``in place``, passes
the recording's own input tensors (the public call reads a tensor it is given again in
place too, so the two should agree). Eager
and compiled calls alternate, so drift hits both; medians, ranges (min-max) and the ratio
of medians are printed (``speed-up`` of wall times, ``cpu x`` of CPU times). Below each
workload, the time by kernel of the optimised graph run node by node under
``vkumd.profile()`` (the same launches the recording replays), with the bound it sets: when
one kind of kernel alone takes longer than the goal allows the whole call, the goal cannot
be met by fusing or scheduling, only by making that kernel faster. For the BERT layer a
second bound uses the driver's multiply-add ceiling (``bench/ceiling.py``, measured in the
same run): with every GEMM, eager and compiled, at the ceiling, eager's other kernels as
measured and every other compiled kernel free, the speed-up is at most
``(eager GEMM flops / ceiling + eager's other kernels) / (compiled GEMM flops / ceiling)``.
Goals on lavapipe: BERT compiled >= 2x faster with <= half the kernels, the chain >= 4x
faster in one kernel, arena <= 0.5 of the intermediates' sum.

Usage::

    python bench/graph.py [--repeats 7] [--only bert|chain] [--json out.json] [--plot DIR]

``--plot DIR`` writes each graph before and after the passes as DOT, and as PNG when
Graphviz's ``dot`` is installed (it says so when it is not).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("VKUMD_VALIDATION", "0")

import ceiling  # noqa: E402 - first: it cleans OpenBLAS's environment before numpy loads
import numpy as np  # noqa: E402

import vkumd  # noqa: E402
from vkumd import ops  # noqa: E402

BATCH, SEQ, HIDDEN, HEADS, FFN = 8, 128, 384, 12, 1536
CHAIN_N = 1 << 22
GOALS = {"bert": {"speedup": 2.0, "kernel_ratio": 0.5}, "chain": {"speedup": 4.0, "kernels": 1},
         "arena_ratio": 0.5}


# -- workloads -------------------------------------------------------------------------------

def bert_layer(ctx: Any, rng: np.random.Generator) -> tuple[Callable[..., Any], dict]:
    """The encoder layer as a function of ``x``, its weights closed over as device tensors."""
    def w(*shape: int, scale: float = 0.05) -> Any:
        return ctx.tensor((rng.standard_normal(shape) * scale).astype(np.float32))

    d, hd = HIDDEN, HIDDEN // HEADS
    p = {"wq": w(d, d), "wk": w(d, d), "wv": w(d, d), "bq": w(d), "bk": w(d), "bv": w(d),
         "wo": w(d, d), "bo": w(d), "g1": w(d, scale=1.0), "be1": w(d), "w1": w(d, FFN),
         "b1": w(FFN), "w2": w(FFN, d), "b2": w(d), "g2": w(d, scale=1.0), "be2": w(d)}

    def layer(x: Any) -> Any:
        b, s, _ = x.shape

        def heads(t: Any) -> Any:
            return t.reshape(b, s, HEADS, hd).permute(0, 2, 1, 3)

        q = heads(x @ p["wq"] + p["bq"])
        k = heads(x @ p["wk"] + p["bk"])
        v = heads(x @ p["wv"] + p["bv"])
        probs = (ops.matmul(q, k, trans_b=True) * (1.0 / math.sqrt(hd))).softmax()
        a = (probs @ v).permute(0, 2, 1, 3).reshape(b, s, d)
        h = (a @ p["wo"] + p["bo"] + x).layer_norm(p["g1"], p["be1"], eps=1e-12)
        f = (h @ p["w1"] + p["b1"]).gelu()
        return (f @ p["w2"] + p["b2"] + h).layer_norm(p["g2"], p["be2"], eps=1e-12)

    x = (rng.standard_normal((BATCH, SEQ, HIDDEN))).astype(np.float32)
    return layer, {"x": ctx.tensor(x)}


def chain(x: Any) -> Any:
    """8 elementwise ops; each eagerly is one pass over the 16 MiB."""
    t = x * 1.5
    t = t + 0.25
    t = t.relu()
    t = t - x
    t = t.silu()
    t = t * x
    t = t.gelu()
    return t / 3.0


# -- measuring --------------------------------------------------------------------------------

def _stats(samples: list[float]) -> dict[str, float]:
    return {"median": statistics.median(samples), "min": min(samples), "max": max(samples)}


def _counted(ctx: Any, run: Callable[[], Any]) -> tuple[int, int]:
    """Dispatches and barriers the current stream records during ``run`` (eager work)."""
    stream = ctx.current_stream()
    d0, b0 = stream.dispatches, stream.barriers
    run()
    ctx.synchronize()
    return stream.dispatches - d0, stream.barriers - b0


class HighWater:
    """The largest ``ctx.memory.used_bytes()`` seen at an allocation inside the block, less
    the bytes in use when it began. The pool keeps no peak of its own and frees are deferred
    to the fences of the work using them, so sampling at each allocation is what gives the
    true high-water mark (eager intermediates still in flight count, as they hold memory)."""

    def __init__(self, ctx: Any) -> None:
        self.pool = ctx.memory
        self.ctx = ctx
        self.start = self.peak = 0

    def __enter__(self) -> HighWater:
        self.ctx.synchronize()
        self.start = self.peak = self.pool.used_bytes()
        allocate = self.pool.allocate

        def sampled(*args: Any, **kwargs: Any) -> Any:
            made = allocate(*args, **kwargs)
            self.peak = max(self.peak, self.pool.used_bytes())
            return made

        self.pool.allocate = sampled  # an instance attribute, removed on exit
        return self

    def __exit__(self, *exc: object) -> None:
        self.ctx.synchronize()
        del self.pool.allocate

    @property
    def grown(self) -> int:
        """Bytes above the starting point at the peak."""
        return self.peak - self.start


def _peak(ctx: Any, run: Callable[[], Any]) -> int:
    with HighWater(ctx) as high:
        kept = run()
        del kept
    return high.grown


PATHS = ("eager", "compiled", "in place")
"""``compiled`` is the public call with the caller's tensors: the same ones every repeat, so
after the first calls it reads them in place (a recording over them) instead of copying them
into the recording's own tensors; ``in place`` passes those own tensors
(``CompiledGraph.input_tensors``)."""


def measure(ctx: Any, fn: Callable[..., Any], inputs: dict, repeats: int) -> dict:
    """Eager and compiled runs of ``fn`` on ``inputs``, interleaved."""
    fn(**inputs)  # pipelines built before anything is measured
    eager_peak = _peak(ctx, lambda: fn(**inputs))
    eager_kernels, eager_barriers = _counted(ctx, lambda: fn(**inputs))
    start = time.perf_counter()
    cf = vkumd.compile(fn, inputs, ctx=ctx)
    trace_s = time.perf_counter() - start
    compiled_peak = _peak(ctx, lambda: cf(**inputs))  # the first call records the bucket
    ref = fn(**inputs).numpy().astype(np.float64)
    got = cf(**inputs).numpy().astype(np.float64)
    error = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    executor = cf._compiled  # the CompiledGraph behind the function
    (bucket,) = executor.buckets()  # one static bucket
    own = executor.input_tensors(**{k: tuple(v.shape) for k, v in inputs.items()})
    for name, t in own.items():
        ops.copy(inputs[name], out=t)
    runs = {"eager": lambda: fn(**inputs), "compiled": lambda: cf(**inputs),
            "in place": lambda: cf(**own)}
    host: dict[str, list[float]] = {p: [] for p in PATHS}
    wall: dict[str, list[float]] = {p: [] for p in PATHS}
    cpu: dict[str, list[float]] = {p: [] for p in PATHS}
    for _ in range(repeats):
        for path in PATHS:
            ctx.synchronize()
            t0, c0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            out = runs[path]()
            ctx.synchronize()
            host[path].append(time.thread_time() - c0)
            cpu[path].append(time.process_time() - p0)
            wall[path].append(time.perf_counter() - t0)
            del out
    compiled = {"kernels": bucket.launches, "barriers": bucket.barriers,
                "peak_bytes": compiled_peak, "arena_bytes": bucket.arena_bytes,
                "intermediate_bytes": bucket.intermediate_bytes}
    result: dict[str, Any] = {
        "nodes": {"traced": len(cf.traced_graph.nodes), "optimised": len(cf.graph.nodes)},
        "ops": [n.op for n in cf.graph.nodes], "trace_and_passes_s": trace_s,
        "inputs": sorted(inputs),
        "relative_error": error, "summary": cf.summary(),
        "gemm_flops": {"traced": gemm_flops(cf.traced_graph), "optimised": gemm_flops(cf.graph)},
        "eager": {"kernels": eager_kernels, "barriers": eager_barriers, "peak_bytes": eager_peak},
        "compiled": dict(compiled), "in place": dict(compiled),
        "by_kernel": {"eager": by_kernel(ctx, lambda: fn(**inputs)),
                      "compiled": by_kernel(ctx, lambda: cf.run_eager(**inputs))},
    }
    result["in place"]["kernels"] = bucket.launches  # no input copy outside the recording
    # The public call copies an input in unless it reads it in place: a tensor passed again
    # is bound by a recording over it (CompiledGraph's docstring).
    bound = {n for r in executor.bucket_memory() for rec in r.recordings() for n in rec.bound}
    result["compiled"]["input_copies"] = len(set(inputs) - bound)
    for path in PATHS:
        result[path]["host_s"] = _stats(host[path])
        result[path]["cpu_s"] = _stats(cpu[path])
        result[path]["wall_s"] = _stats(wall[path])
        if path != "eager":
            ratios = [e / c for e, c in zip(wall["eager"], wall[path], strict=True)]
            result[path]["speedup"] = {
                "median": statistics.median(wall["eager"]) / statistics.median(wall[path]),
                "min": min(ratios), "max": max(ratios),
                "host": statistics.median(host["eager"]) / statistics.median(host[path]),
                "cpu": statistics.median(cpu["eager"]) / statistics.median(cpu[path])}
    return result, cf


def by_kernel(ctx: Any, run: Callable[[], Any]) -> dict[str, float]:
    """Seconds per kernel name over one ``run``, from ``vkumd.profile()``'s timestamps
    (each dispatch timed alone, so eager-style runs only)."""
    run()
    ctx.synchronize()
    with vkumd.profile() as prof:
        run()
        ctx.synchronize()
    totals: dict[str, float] = {}
    for record in prof.dispatches:
        totals[record.kernel] = totals.get(record.kernel, 0.0) + record.duration_ns / 1e9
    return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


def gemm_flops(graph: Any) -> float:
    """Multiply-adds of the graph's matmul nodes, counted as 2 flops each (static shapes)."""
    total = 0.0
    for node in graph.nodes:
        if node.op != "matmul":
            continue
        a, out = node.inputs[0], node.outputs[0]
        k = a.shape[-2] if node.attrs.get("trans_a") else a.shape[-1]
        total += 2.0 * math.prod(out.shape) * k
    return total


def ceiling_bound(r: dict, ceiling_gflops: float) -> list[str]:
    """The most any compiled graph can gain on this device, from its compute ceiling.

    Give every GEMM the driver's multiply-add ceiling, eager's (the traced graph's, attention
    products included) and the compiled graph's alike, keep eager's other kernels at their
    measured time and make every other compiled kernel free: the speed-up is then
    ``(g_eager + other) / g_compiled``, an upper bound for any GEMM this driver can run."""
    eager = r["by_kernel"]["eager"]
    other = sum(eager.values()) - eager.get("gemm", 0.0)
    rate = ceiling_gflops * 1e9
    g_eager, g_compiled = r["gemm_flops"]["traced"] / rate, r["gemm_flops"]["optimised"] / rate
    most = (g_eager + other) / g_compiled
    return [f"  ceiling bound: at this driver's multiply-add ceiling ({ceiling_gflops:.1f} "
            f"GFLOP/s, bench/ceiling.py, this run) the compiled graph's "
            f"{r['gemm_flops']['optimised'] / 1e9:.2f} GFLOP of GEMMs take at least "
            f"{g_compiled * 1e3:.1f} ms and eager's {r['gemm_flops']['traced'] / 1e9:.2f} "
            f"{g_eager * 1e3:.1f} ms; with eager's other kernels as measured "
            f"({other * 1e3:.1f} ms) and every other compiled kernel free, no compiled graph "
            f"is more than {most:.2f}x faster than eager on this device"]


def bound(name: str, r: dict) -> list[str]:
    """The profile of the compiled graph's launches against the speed-up goal."""
    eager, compiled = r["by_kernel"]["eager"], r["by_kernel"]["compiled"]
    total_e, total_c = sum(eager.values()), sum(compiled.values())
    allowed = total_e / GOALS[name]["speedup"]
    parts = ", ".join(f"{k} {v * 1e3:.1f}" for k, v in compiled.items())
    lines = [f"  {name} by kernel, run one by one (ms): eager {total_e * 1e3:.1f}; compiled "
             f"{total_c * 1e3:.1f} = {parts}"]
    top, top_s = next(iter(compiled.items()), ("none", 0.0))
    verdict = ("so the goal needs a faster " + top + " kernel, not fewer launches"
               if top_s > allowed else "within the goal's budget")
    lines.append(f"  bound {name}: {GOALS[name]['speedup']:g}x allows {allowed * 1e3:.1f} ms; "
                 f"{top} alone takes {top_s * 1e3:.1f} ms, {verdict}")
    return lines


def goals(name: str, r: dict) -> list[str]:
    """One line per goal, on the public call: met or missed, and by how much."""
    c = r["compiled"]
    checks = [("speedup", c["speedup"]["median"], ">=", GOALS[name]["speedup"])]
    if name == "bert":
        checks.append(("kernels compiled/eager", c["kernels"] / r["eager"]["kernels"], "<=",
                       GOALS["bert"]["kernel_ratio"]))
    else:
        checks.append(("kernels", c["kernels"], "<=", GOALS["chain"]["kernels"]))
    if c["intermediate_bytes"]:
        checks.append(("arena/intermediates", c["arena_bytes"] / c["intermediate_bytes"], "<=",
                       GOALS["arena_ratio"]))
    lines = []
    for what, value, op, goal in checks:
        met = value >= goal if op == ">=" else value <= goal
        by = (value / goal if op == ">=" else goal / value) if value else float("inf")
        note = "met" if met else f"MISSED (at {by:.2f} of the goal)"
        lines.append(f"  goal {name} {what} {op} {goal:g}: {value:.3g} {note}")
    return lines


def _ms(s: dict[str, float]) -> str:
    return f"{s['median'] * 1e3:8.2f} [{s['min'] * 1e3:.1f}-{s['max'] * 1e3:.1f}]"


def table(report: dict) -> str:
    """The printed table."""
    lines = [f"device: {report['device']}; {report['repeats']} alternating repeats; "
             "times in ms as median [min-max]; speed-up = eager median / path median "
             "[range of per-repeat ratios]",
             f"{'workload':<9}{'path':<10}{'kernels':>8}{'barriers':>9}{'host ms':>22}"
             f"{'cpu ms':>24}{'device ms':>24}{'peak MiB':>9}{'speed-up':>20}{'host x':>8}"
             f"{'cpu x':>8}"]
    for name, r in report["workloads"].items():
        for path in PATHS:
            p = r[path]
            s = p.get("speedup")
            ratio = (f"{s['median']:>7.2f}x [{s['min']:.2f}-{s['max']:.2f}]{s['host']:>7.2f}x"
                     f"{s['cpu']:>7.2f}x" if s else "")
            lines.append(f"{name:<9}{path:<10}{p['kernels']:>8}{p['barriers']:>9}"
                         f"{_ms(p['host_s']):>22}{_ms(p['cpu_s']):>24}{_ms(p['wall_s']):>24}"
                         f"{p['peak_bytes'] / 2**20:>9.1f}{ratio:>36}")
        c = r["compiled"]
        lines.append(f"  {name}: {r['nodes']['traced']} traced nodes -> "
                     f"{r['nodes']['optimised']} ({', '.join(r['ops'])}); arena "
                     f"{c['arena_bytes'] / 2**20:.1f} MiB for {c['intermediate_bytes'] / 2**20:.1f}"
                     f" MiB of intermediates; compiled vs eager relative error "
                     f"{r['relative_error']:.1e}; the public call copies "
                     f"{c['input_copies']} of its {len(r['inputs'])} input(s) in")
        lines.extend(goals(name, r))
        lines.extend(bound(name, r))
        if r["gemm_flops"]["optimised"] and report.get("ceiling_gflops"):
            lines.extend(ceiling_bound(r, report["ceiling_gflops"]))
    return "\n".join(lines)


def plot(directory: Path, name: str, cf: Any) -> list[str]:
    """The graph before and after the passes as DOT, and PNG when ``dot`` is installed."""
    directory.mkdir(parents=True, exist_ok=True)
    dot = shutil.which("dot")
    notes = []
    for stage, graph in (("before", cf.traced_graph), ("after", cf.graph)):
        path = directory / f"{name}-{stage}.dot"
        path.write_text(graph.to_dot())
        if dot is None:
            notes.append(f"wrote {path}")
            continue
        png = path.with_suffix(".png")
        subprocess.run([dot, "-Tpng", str(path), "-o", str(png)], check=True, timeout=120)
        notes.append(f"wrote {path} and {png}")
    if dot is None:
        notes.append("Graphviz's dot is not installed (apt-get install graphviz): DOT files "
                     "only, no PNG")
    return notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", type=Path, default=None, metavar="PATH")
    parser.add_argument("--plot", type=Path, default=None, metavar="DIR")
    parser.add_argument("--only", choices=("bert", "chain"), default=None)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    report: dict = {"repeats": args.repeats, "workloads": {}}
    with vkumd.Context() as ctx:
        report["device"] = f"{ctx.caps.name} ({ctx.caps.driver_info})"
        work = {}
        if args.only in (None, "bert"):
            work["bert"] = bert_layer(ctx, rng)
        if args.only in (None, "chain"):
            x = rng.standard_normal(CHAIN_N).astype(np.float32)
            work["chain"] = (chain, {"x": ctx.tensor(x)})
        compiled = {}
        for name, (fn, inputs) in work.items():
            report["workloads"][name], compiled[name] = measure(ctx, fn, inputs, args.repeats)
        if "bert" in work:
            report["ceiling_gflops"] = ceiling.measure(ctx, repeats=3)["gflops"]
        print(table(report))
        if args.plot is not None:
            for name, cf in compiled.items():
                for note in plot(args.plot, name, cf):
                    print(note)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
