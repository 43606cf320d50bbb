"""Depthwise convolution on PP-OCR's shapes: ``shaders/conv2d_depthwise.comp`` against the
direct kernel (``shaders/conv2d.comp``) in the same run.

Usage: python bench/depthwise.py [--repeats R] [--json PATH]

Each row is one depthwise layer of PP-OCRv4's recogniser (48 x 320) or detector
(640 x 640) at batch 1, float32, with bias and the hard-swish epilogue the passes give it:
its channels, input size, filter and stride. Per kernel, the median and range of R runs
(one launch each, submitted and waited for: device time plus one round trip), in turns so
that a change in the shared machine's load touches both alike, and GFLOP/s (2 flops per
tap per output). With ``LP_NUM_THREADS=0`` the times are process CPU time on one core,
comparable with ``LP_NUM_THREADS=0 python bench/ceiling.py``'s ceiling. "direct" forces the
direct kernel the depthwise one replaces (the planner's ``force``); a row whose stride the
depthwise kernel does not take says so.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import time
from typing import Any

os.environ.setdefault("VKUMD_VALIDATION", "0")

import numpy as np  # noqa: E402

import vkumd  # noqa: E402
from vkumd import ops  # noqa: E402
from vkumd.compiler.kernels import conv as conv_kernels  # noqa: E402
from vkumd.compiler.kernels import conv_route as route_module  # noqa: E402
from vkumd.framework.opset import conv as conv_op  # noqa: E402

# (model, channels, height, width, kernel, stride (y, x)).
SHAPES: tuple[tuple[str, int, int, int, int, tuple[int, int]], ...] = (
    ("rec", 64, 24, 160, 3, (1, 1)),
    ("rec", 64, 24, 160, 3, (2, 1)),
    ("rec", 128, 12, 160, 3, (1, 2)),
    ("rec", 240, 12, 80, 5, (1, 1)),
    ("rec", 480, 6, 80, 5, (2, 1)),
    ("det", 16, 320, 320, 3, (1, 1)),
    ("det", 32, 320, 320, 3, (2, 2)),
    ("det", 96, 80, 80, 3, (2, 2)),
    ("det", 192, 40, 40, 5, (1, 1)),
    ("det", 192, 40, 40, 5, (2, 2)),
)


def _clock() -> float:
    """Process CPU seconds with ``LP_NUM_THREADS=0`` (lavapipe runs each submission on one
    thread: a one-core time, as ``bench/ceiling.py`` takes its ceiling), else wall seconds."""
    return time.process_time() if os.environ.get("LP_NUM_THREADS") == "0" else \
        time.perf_counter()


def _timed(run: Any, ctx: Any) -> float:
    start = _clock()
    run()
    ctx.synchronize()
    return (_clock() - start) * 1e3


def bench_shape(ctx: Any, c: int, h: int, w: int, k: int, stride: tuple[int, int],
                repeats: int) -> dict[str, Any]:
    """Median and range (ms) per kernel for one layer, and whether they agree."""
    rng = np.random.default_rng(0)
    x = ctx.tensor(rng.standard_normal((1, c, h, w)).astype(np.float32))
    wt = ctx.tensor(rng.standard_normal((c, 1, k, k)).astype(np.float32))
    b = ctx.tensor(rng.standard_normal(c).astype(np.float32))
    pad = k // 2

    def conv() -> Any:
        return ops.conv2d(x, wt, b, stride=stride, pads=(pad,) * 4, groups=c,
                          activation="hardswish")

    fits = conv_kernels.depthwise_fits(c, (c, 1, k, k), stride, (1, 1), c)
    original = conv_op.conv_route

    def direct() -> Any:
        conv_op.conv_route = functools.partial(route_module.conv_route, force="direct")
        try:
            return conv()
        finally:
            conv_op.conv_route = original

    runs = {"depthwise": conv, "direct": direct} if fits else {"direct": direct}
    results = {name: fn().numpy() for name, fn in runs.items()}  # warm: pipelines, plans
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, fn in runs.items():
            times[name].append(_timed(fn, ctx))
    oh = (h + 2 * pad - k) // stride[0] + 1
    ow = (w + 2 * pad - k) // stride[1] + 1
    flops = 2 * c * oh * ow * k * k
    row: dict[str, Any] = {"flops": flops}
    for name, samples in times.items():
        med = statistics.median(samples)
        row[name] = {"ms": med, "min": min(samples), "max": max(samples),
                     "gflops": flops / med / 1e6}
    if fits:
        diff = np.abs(results["depthwise"] - results["direct"]).max()
        row["max_abs_diff"] = float(diff)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--json", help="write the rows here too")
    args = parser.parse_args(argv)
    ctx = vkumd.Context()
    clock = "one-core CPU" if os.environ.get("LP_NUM_THREADS") == "0" else "wall"
    print(f"device: {ctx.caps.name}; median [min-max] {clock} ms of {args.repeats} runs, "
          "GFLOP/s")
    print(f"{'layer':<34}{'depthwise':>26}{'direct':>26}")
    rows = []
    for model, c, h, w, k, stride in SHAPES:
        row = bench_shape(ctx, c, h, w, k, stride, args.repeats)
        cells = []
        for name in ("depthwise", "direct"):
            r = row.get(name)
            cells.append("not taken" if r is None else
                         f"{r['ms']:.2f} [{r['min']:.2f}-{r['max']:.2f}] {r['gflops']:.2f}")
        label = f"{model} {c}x{h}x{w} {k}x{k} s{stride[0]},{stride[1]}"
        print(f"{label:<34}{cells[0]:>26}{cells[1]:>26}", flush=True)
        rows.append({"model": model, "c": c, "h": h, "w": w, "k": k, "stride": stride, **row})
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
