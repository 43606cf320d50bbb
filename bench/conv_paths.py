"""Convolution paths side by side on real shapes: implicit GEMM, im2col + GEMM, the direct
kernel (docs/vision.md, "Layouts and kernels").

Usage::

    python bench/conv_paths.py [--paths implicit,im2col,direct] [--repeats 3]
                               [--shapes r50-3x3-56,ocr-det-160,...] [--dtype float32]
                               [--layouts]

Shapes: convolutions of ResNet-50 at 224x224 and of PP-OCRv4's detector (640x640) and
recogniser (48x320), batch 1. Each path is forced through the planner's ``force`` and timed
as the best of ``--repeats`` synchronized calls after one warm-up call (which also compiles).
A path that cannot take a shape prints ``-``. ``--layouts`` also times the implicit GEMM's
kernel alone reading the input and weights in NCHW and in NHWC (``ConvGemmProblem.nhwc``;
the output NCHW in both). Validation is off.
"""

from __future__ import annotations

import argparse
import functools
import os
import time

os.environ.setdefault("VKUMD_VALIDATION", "0")

import numpy as np  # noqa: E402

import vkumd  # noqa: E402
from vkumd import ops  # noqa: E402
from vkumd.compiler.kernels import conv_route as route_module  # noqa: E402
from vkumd.compiler.kernels.conv import NO_EPILOGUE  # noqa: E402
from vkumd.compiler.kernels.conv_gemm import ConvGemmProblem, conv_gemm_plan  # noqa: E402
from vkumd.framework.opset import conv as conv_op  # noqa: E402

# name: (x shape, w shape, stride, pads (top, left, bottom, right))
SHAPES = {
    "r50-7x7-224": ((1, 3, 224, 224), (64, 3, 7, 7), (2, 2), (3, 3, 3, 3)),
    "r50-3x3-56": ((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1)),
    "r50-3x3-28": ((1, 128, 28, 28), (128, 128, 3, 3), (1, 1), (1, 1, 1, 1)),
    "r50-3x3-14": ((1, 256, 14, 14), (256, 256, 3, 3), (1, 1), (1, 1, 1, 1)),
    "r50-3x3-7": ((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1)),
    "ocr-det-stem": ((1, 3, 640, 640), (16, 3, 3, 3), (2, 2), (1, 1, 1, 1)),
    "ocr-det-80": ((1, 96, 80, 80), (24, 96, 3, 3), (1, 1), (1, 1, 1, 1)),
    "ocr-det-160": ((1, 96, 160, 160), (24, 96, 3, 3), (1, 1), (1, 1, 1, 1)),
    "ocr-rec-1x3": ((1, 480, 1, 40), (60, 480, 1, 3), (1, 1), (0, 1, 0, 1)),
}


def time_path(ctx: vkumd.Context, path: str, x: vkumd.Tensor, w: vkumd.Tensor,
              stride: tuple[int, int], pads: tuple[int, ...], repeats: int) -> float | None:
    """Best-of-``repeats`` milliseconds of one convolution forced onto ``path``."""
    forced = functools.partial(route_module.conv_route, force=path)
    original = conv_op.conv_route
    conv_op.conv_route = forced
    try:
        try:
            ops.conv2d(x, w, stride=stride, pads=pads)
        except vkumd.VkumdValueError:
            return None
        ctx.synchronize()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            ops.conv2d(x, w, stride=stride, pads=pads)
            ctx.synchronize()
            best = min(best, time.perf_counter() - start)
        return best * 1e3
    finally:
        conv_op.conv_route = original


def main() -> None:
    """Print one row per shape: milliseconds per path and GFLOP/s of the fastest."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--paths", default="implicit,im2col,direct")
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--layouts", action="store_true")
    args = parser.parse_args()
    paths = args.paths.split(",")
    ctx = vkumd.Context()
    rng = np.random.default_rng(0)
    print(f"device: {ctx.caps.name}; {args.dtype}; best of {args.repeats} (ms)")
    header = ["shape", *paths, "GFLOP/s (best)"]
    if args.layouts:
        header += ["implicit NCHW (ms)", "implicit NHWC (ms)"]
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for name in args.shapes.split(","):
        xs, ws, stride, pads = SHAPES[name]
        x_host = rng.standard_normal(xs).astype(args.dtype)
        w_host = rng.standard_normal(ws).astype(args.dtype)
        x, w = ctx.tensor(x_host), ctx.tensor(w_host)
        times = [time_path(ctx, p, x, w, stride, pads, args.repeats) for p in paths]
        out = ops.conv2d(x, w, stride=stride, pads=pads)
        flops = 2 * out.size * ws[1] * ws[2] * ws[3]
        best = min((t for t in times if t is not None), default=None)
        row = [name] + ["-" if t is None else f"{t:.1f}" for t in times]
        row.append("-" if best is None else f"{flops / best / 1e6:.1f}")
        if args.layouts:
            row += [f"{_layout_ms(ctx, x_host, w_host, out, stride, pads, nhwc, args.repeats):.1f}"
                    for nhwc in (False, True)]
        print("| " + " | ".join(row) + " |", flush=True)


def _layout_ms(ctx: vkumd.Context, x: np.ndarray, w: np.ndarray, out: vkumd.Tensor,
               stride: tuple[int, int], pads: tuple[int, ...], nhwc: bool, repeats: int
               ) -> float:
    """Best-of-``repeats`` milliseconds of the implicit GEMM (the planner's variant) reading
    its input and weights in NCHW or NHWC (the output NCHW in both)."""
    problem = ConvGemmProblem(str(x.dtype), x.shape, w.shape, tuple(out.shape[2:]), stride,
                              (1, 1), tuple(pads[:2]), 1, False, NO_EPILOGUE, nhwc=nhwc)
    plan = conv_gemm_plan(ctx.caps, problem)
    if nhwc:
        x, w = x.transpose(0, 2, 3, 1), w.transpose(0, 2, 3, 1)
    operands = (ctx.tensor(np.ascontiguousarray(x)), ctx.tensor(np.ascontiguousarray(w)),
                None, out, None)
    ctx.run(plan, operands)
    ctx.synchronize()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        ctx.run(plan, operands)
        ctx.synchronize()
        best = min(best, time.perf_counter() - start)
    return best * 1e3


if __name__ == "__main__":
    main()
