"""GEMM throughput against numpy's matmul in the same run, and the fused epilogue's cost.

Usage: python bench/gemm.py [--repeats N] [--dtypes float32,float16,bfloat16] [--large]
                            [--variant lanes|shared|coopmat] [--json PATH] [--plot PATH]
                            [--shapes MxNxK,...] [--plain]

Rows: square 512, 1024, 2048 (4096 with --large) and the transformer shapes 128x1536x384 (MLP
up-projection: M=128 tokens, N=1536, K=384), 128x384x1536 (down-projection) and 1024x384x1536
(down-projection over 1024 tokens), as M x N x K. For each row and dtype: vkumd's plain GEMM,
numpy's float32 matmul of the same shape (numpy has no fast float16/bfloat16 path, so it is the
peer for every dtype) and the ratio, and the GEMM as a fraction of the driver's own
multiply-add ceiling measured at the start of the same run (``bench/ceiling.py``); then GEMM +
bias + GELU fused in one kernel (``matmul(bias=, activation="gelu")``) against the plain GEMM,
and against the same three steps as separate kernels (matmul, then ``vkumd.ops.add`` for the
bias, then ``vkumd.ops.gelu``). Times are medians of --repeats runs, each ending in
``ctx.synchronize()``; the machine is shared, so quote ranges. With ``LP_NUM_THREADS=0`` every
time is process CPU seconds on one core, numpy on one BLAS thread (see ``bench/ceiling.py``):
far less disturbed by other processes than wall time. --plain skips the fused and unfused rows.

Notes from tuning on lavapipe 25.0.7 (LLVM 15, 8-wide subgroups) on a 2-core AVX-512 host:
every load a lane makes becomes an AVX-512 gather, gathers are slow there, and ``fma`` is split
into a multiply and an add. The lanes path therefore keeps loads per FMA low (A values handed
between lanes with subgroupBroadcast, many accumulators per lane) and reads 64-bit words where
the layout allows (2 float32 / 4 float16 values per gathered element), which measured 1.2x
(float32) to 1.6x (float16) over element loads. Packing B into contiguous panels first doubled
2048^3 (an 8 KiB row stride puts a panel's rows in few cache sets). On an 8-row tile, 16 and 32
accumulators per lane measured within noise; a 16-row tile with 128 accumulators per lane (on
the stack), K by 8, each accumulator taking all steps of an iteration in turn, measured
1.7-2.5x, and a 32-row tile with K by 4 (256 accumulators, the same 1024 multiply-adds per
iteration from half the B gathers) 1.03-1.23x more (see ``LANES_TM`` in
vkumd/compiler/kernels/gemm.py and docs/performance.md): the gathers are what binds. The
bound is the loads-free mul+add loop of bench/ceiling.py, measured at the start of each run (an
early estimate of 37 GFLOP/s was not); on one AMD EPYC core it reaches 0.75-0.83 of numpy. With
the old 8-row tile, LP_NATIVE_VECTOR_WIDTH=512 (16-wide subgroups) measured 1.5x; vkumd now
sets it on AVX-512 hosts (docs/performance.md, "Sixteen-wide subgroups"). Walking A and
B with 64-bit pointers advanced by a constant per K step (instead of indices rebuilt from k,
which lavapipe computes as vector multiplies, shifts and widenings per load) gave 1.10x on the
plain GEMM and made the fused epilogue as fast as the plain GEMM at 2048^3 (one thread, CPU
time: 14.3 against 13.0 GFLOP/s plain, 14.6 against 10.3 fused). Loads whose offset is the same
for every lane are still gathered inside loops on Mesa 25.0 (each lane in turn, with a bounds
check, even from a descriptor-bound buffer), so a layout with B read as uniform values measured
3x slower.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import ceiling  # first: it cleans OpenBLAS's environment before numpy loads
import numpy as np

import vkumd
from vkumd import ops
from vkumd.compiler.kernels.gemm_choice import GemmShape, choose_variant

SQUARE = [512, 1024, 2048]
_SETTLE_S = 0.3
TRANSFORMER = [(128, 1536, 384), (128, 384, 1536), (1024, 384, 1536)]


def _shapes(large: bool) -> list[tuple[int, int, int]]:
    shapes = [(s, s, s) for s in SQUARE] + TRANSFORMER
    if large:
        shapes.insert(len(SQUARE), (4096, 4096, 4096))
    return shapes


def _gflops(m: int, n: int, k: int, seconds: float) -> float:
    return 2.0 * m * n * k / seconds / 1e9


def bench_row(ctx: vkumd.Context, m: int, n: int, k: int, dtype: str, repeats: int,
              variant: str | None, plain_only: bool = False) -> dict:
    """Measure one shape and dtype; returns the row as a dict."""
    rng = np.random.default_rng()
    a_host = rng.standard_normal((m, k), dtype=np.float32)
    b_host = rng.standard_normal((k, n), dtype=np.float32)
    a = ctx.tensor(a_host, dtype=dtype)
    b = ctx.tensor(b_host, dtype=dtype)
    bias = ctx.tensor(rng.standard_normal(n, dtype=np.float32), dtype=dtype)
    out = ctx.empty((m, n), dtype)
    tmp = ctx.empty((m, n), dtype)

    def plain() -> None:
        ops.matmul(a, b, out=out, variant=variant)
        ctx.synchronize()

    def fused() -> None:
        ops.matmul(a, b, bias=bias, activation="gelu", out=out, variant=variant)
        ctx.synchronize()

    def unfused() -> None:
        ops.matmul(a, b, out=out, variant=variant)
        ops.add(out, bias, out=tmp)
        ops.gelu(tmp, out=out)
        ctx.synchronize()

    median_seconds = ceiling.median_time
    runs = (plain,) if plain_only else (plain, fused, unfused)
    for run in runs:  # compile and touch every page once
        run()
    # Both lavapipe's and OpenBLAS's worker threads keep spinning for a moment after their
    # work; on 2 cores that slowed whichever ran next up to 20x. So each side gets the
    # cores to itself after a pause.
    time.sleep(_SETTLE_S)
    t_plain = median_seconds(plain, repeats)
    t_fused = t_plain if plain_only else median_seconds(fused, repeats)
    t_unfused = t_plain if plain_only else median_seconds(unfused, repeats)
    time.sleep(_SETTLE_S)
    with ceiling.blas_limits():
        a_host @ b_host
        t_numpy = median_seconds(lambda: a_host @ b_host, repeats)
    time.sleep(_SETTLE_S)
    plan = choose_variant(ctx.caps, dtype, GemmShape(m, n, k), force=variant)
    row = {
        "shape": f"{m}x{n}x{k}", "m": m, "n": n, "k": k, "dtype": dtype,
        "variant": plan.name,
        "wide": [plan.variant.get("WIDE_A", 0), plan.variant.get("WIDE_B", 0)],
        "gflops": _gflops(m, n, k, t_plain),
        "numpy_gflops": _gflops(m, n, k, t_numpy),
        "fused_gflops": _gflops(m, n, k, t_fused),
        "unfused_gflops": _gflops(m, n, k, t_unfused),
    }
    row["ratio"] = row["gflops"] / row["numpy_gflops"]
    row["fused_vs_plain"] = t_plain / t_fused
    row["fused_vs_unfused"] = t_unfused / t_fused
    for t in (a, b, bias, out, tmp):
        t.release()
    return row


def plot(rows: list[dict], path: str) -> None:
    """Bar chart of GFLOP/s per shape and dtype, numpy beside each."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("--plot needs matplotlib, which is not installed; install it "
                 "(pip install matplotlib) or leave out --plot")
    labels = [f"{r['shape']}\n{r['dtype']}" for r in rows]
    x = np.arange(len(rows))
    width = 0.27
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.9), 4.5))
    ax.bar(x - width, [r["gflops"] for r in rows], width, label="vkumd matmul")
    ax.bar(x, [r["fused_gflops"] for r in rows], width, label="vkumd + bias + GELU (fused)")
    ax.bar(x + width, [r["numpy_gflops"] for r in rows], width, label="numpy float32")
    ax.set_xticks(x, labels, fontsize=7)
    ax.set_ylabel("GFLOP/s")
    ax.set_yscale("log")
    ax.legend()
    ax.set_title("GEMM throughput, same run")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtypes", default="float32,float16,bfloat16")
    parser.add_argument("--large", action="store_true", help="add 4096x4096x4096")
    parser.add_argument("--variant", choices=["lanes", "shared", "coopmat"],
                        help="force a kernel variant (default: the device's choice)")
    parser.add_argument("--json", help="write the rows as JSON here")
    parser.add_argument("--plot", help="write a PNG chart here (needs matplotlib)")
    parser.add_argument("--shapes", help="only these, e.g. 1024x1024x1024,128x384x1536")
    parser.add_argument("--plain", action="store_true", help="skip the fused/unfused rows")
    args = parser.parse_args()
    if args.plot:  # fail before the long run, not after it
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            sys.exit("--plot needs matplotlib, which is not installed; install it "
                     "(pip install matplotlib) or leave out --plot")

    rows = []
    with vkumd.Context(validation=False) as ctx:
        facts = ceiling.cpu_facts()
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info}), subgroup "
              f"{ctx.caps.subgroup_size}; cpu: {facts['cpu']}, {facts['isa']}; clock: "
              f"{ceiling.clock_name()}, median of {args.repeats}; "
              "numpy is float32 matmul in every row")
        peak = ceiling.measure(ctx, args.repeats)
        print(f"ceiling (loads-free mul+add loop, bench/ceiling.py): {peak['gflops']:.1f} "
              f"GFLOP/s; numpy BLAS: {ceiling.blas_info()}")
        header = (f"{'M x N x K':>16} {'dtype':>9} {'variant':>12} {'GFLOP/s':>8} "
                  f"{'numpy':>7} {'ratio':>6} {'/ceil':>6} {'fused':>7} {'fused/plain':>11} "
                  f"{'unfused':>8} {'fused/unfused':>13}")
        print(header)
        print("-" * len(header))
        shapes = _shapes(args.large)
        if args.shapes:
            shapes = [tuple(int(x) for x in s.split("x")) for s in args.shapes.split(",")]
        for m, n, k in shapes:
            for dtype in args.dtypes.split(","):
                row = bench_row(ctx, m, n, k, dtype, args.repeats, args.variant, args.plain)
                row["ceiling_gflops"] = peak["gflops"]
                row["of_ceiling"] = row["gflops"] / peak["gflops"]
                rows.append(row)
                print(f"{row['shape']:>16} {dtype:>9} {row['variant']:>12} "
                      f"{row['gflops']:>8.1f} {row['numpy_gflops']:>7.1f} "
                      f"{row['ratio']:>6.3f} {row['of_ceiling']:>6.3f} "
                      f"{row['fused_gflops']:>7.1f} "
                      f"{row['fused_vs_plain']:>11.3f} {row['unfused_gflops']:>8.1f} "
                      f"{row['fused_vs_unfused']:>13.2f}", flush=True)
        device = ctx.caps.name
    print("ratio: vkumd / numpy; /ceil: vkumd / the ceiling; fused/plain: plain time / fused "
          "time (1.0 = the epilogue is free); fused/unfused: "
          "separate matmul + add + gelu time / fused time")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "repeats": args.repeats, "clock": ceiling.clock_name(),
                       "ceiling": peak, "cpu": facts, "rows": rows}, f, indent=2)
    if args.plot:
        plot(rows, args.plot)


if __name__ == "__main__":
    main()
