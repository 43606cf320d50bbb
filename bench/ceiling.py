"""The driver's own compute ceiling, measured through vkumd, beside numpy's float32 matmul.

Usage: python bench/ceiling.py [--repeats N] [--json PATH]

A benchmark-only kernel (its GLSL is below; it is not registered with vkumd) runs a loop of
multiply-adds with no loads at all: each invocation keeps ACCS independent accumulators of
VEC floats and updates each as ``acc = acc * m + a`` (m and a from push constants, so LLVM
can fold nothing), the loop unrolled by 4. A sweep over accumulator count, vector width and
workgroup size keeps the best: that is the most a kernel compiled by this driver can do with
float32 multiply-adds, whatever it loads. lavapipe splits every fma into a multiply and an
add (``lower_ffma32`` in llvmpipe's NIR options), so this is a mul+add ceiling; on CPUs with
two multiply and two add pipes that costs no peak, but the loop still needs enough
independent chains to cover the latency of both.

Beside it: numpy's float32 matmul at 1024^3 and 2048^3, and which BLAS kernel numpy uses
(threadpoolctl, where installed). ``OPENBLAS_CORETYPE`` and ``OPENBLAS_L2_SIZE`` are dropped
from this process's environment before numpy loads, so OpenBLAS picks its kernel for this
CPU. With ``LP_NUM_THREADS=0`` lavapipe runs each submission on one thread (its queue's, not
the caller's: thread CPU time of the caller measured nothing), so the script times the
process's CPU seconds (and numpy on one BLAS thread): a one-core figure that other processes
on a shared machine disturb far less than wall time.

:func:`measure` is what ``bench/gemm.py`` imports to print each GEMM as a fraction of it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

# OpenBLAS reads these when it loads: only this benchmark's process drops them.
DROPPED_ENV = {name: os.environ.pop(name) for name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
               if name in os.environ}

import numpy as np  # noqa: E402 - after the environment is cleaned

import vkumd  # noqa: E402
from vkumd.compiler.kernels import WORKGROUP  # noqa: E402
from vkumd.compiler.push import PushLayout  # noqa: E402
from vkumd.compiler.registry import Kernel  # noqa: E402
from vkumd.vk import driver_settings  # noqa: E402

FMA_GLSL = """#version 460
// Loads-free multiply-add loop (bench/ceiling.py): ACCS accumulators of VEC floats each.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x_id = 0) in;
#if VEC == 1
#define V float
#elif VEC == 2
#define V vec2
#else
#define V vec4
#endif
layout(set = 0, binding = 0) buffer Out { float v[]; } result;
layout(push_constant) uniform Params { uint iters; float m; float a; } pc;
void main() {
    V acc[ACCS];
    float seed = float(gl_GlobalInvocationID.x);
    for (uint i = 0u; i < ACCS; ++i) {
        acc[i] = V(seed + float(i));
    }
    for (uint it = 0u; it < pc.iters; ++it) {
        [[unroll]] for (uint u = 0u; u < 4u; ++u) {
            [[unroll]] for (uint i = 0u; i < ACCS; ++i) {
                acc[i] = acc[i] * pc.m + pc.a;
            }
        }
    }
    V s = V(0.0);
    for (uint i = 0u; i < ACCS; ++i) {
        s += acc[i];
    }
    result.v[gl_GlobalInvocationID.x] = dot(V(1.0), s);
}
"""
FMA_PUSH = PushLayout("iters:u32", "m:f32", "a:f32")


@dataclass(frozen=True)
class InlineKernel(Kernel):
    """A kernel whose GLSL is a string in this script, not a file under ``shaders/``."""

    glsl: str = ""

    def source_text(self) -> str:
        return self.glsl


FMA_KERNEL = InlineKernel(name="bench_fma", source="bench_fma.comp", buffers=1, push=FMA_PUSH,
                          defines={"ACCS": (), "VEC": (1, 2, 4)},
                          spec_constants={WORKGROUP: 0}, glsl=FMA_GLSL)
# The sweep: accumulators per invocation, floats per accumulator, invocations per workgroup.
SWEEP_ACCS = (4, 8, 16, 32)
SWEEP_VEC = (1, 4)
SWEEP_WORKGROUP = (8, 64)
INVOCATIONS = 4096
FLOP_PER_DISPATCH = 2e9
NUMPY_SIZES = (1024, 2048)
_SETTLE_S = 0.3


def one_thread() -> bool:
    """Whether lavapipe runs submissions on the calling thread (``LP_NUM_THREADS=0``)."""
    return os.environ.get("LP_NUM_THREADS") == "0"


def clock_name() -> str:
    return "process CPU" if one_thread() else "wall"


def median_time(run: Callable[[], object], repeats: int) -> float:
    """Median seconds of ``run()``: process CPU time with ``LP_NUM_THREADS=0``, else wall."""
    clock = time.process_time if one_thread() else time.perf_counter
    samples = []
    for _ in range(repeats):
        start = clock()
        run()
        samples.append(clock() - start)
    return statistics.median(samples)


def blas_limits() -> Any:
    """A context that holds numpy's BLAS to one thread when lavapipe runs on one."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return nullcontext()
    return threadpool_limits(1) if one_thread() else nullcontext()


def blas_info() -> str:
    """numpy's BLAS library, kernel architecture and threads (threadpoolctl), or why not."""
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown (threadpoolctl not installed)"
    with blas_limits():
        infos = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    return ", ".join(f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} "
                     f"kernel, {i.get('num_threads')} threads" for i in infos) or "none found"


def cpu_facts() -> dict:
    """CPU model, the widest AVX level in /proc/cpuinfo and lavapipe's vector width.

    The width is the user's ``LP_NATIVE_VECTOR_WIDTH``, else what vkumd picks for this CPU
    (``vkumd.vk.driver_settings``: already set once a context exists, to be picked otherwise),
    else lavapipe's default; the device's subgroup size says what it became.
    """
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name":
                    model = value.strip()
                    break
    except OSError:
        pass
    flags = driver_settings.cpu_flags()
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    name = driver_settings.LAVAPIPE_VECTOR_WIDTH
    picked = {**driver_settings.chosen(), **driver_settings.picked()}.get(name)
    width = (f"{picked} (vkumd's pick)" if picked
             else os.environ.get(name, "default"))
    return {"cpu": model, "isa": isa, "fma": "fma" in flags, "cores": os.cpu_count(),
            "lp_native_vector_width": width,
            "lp_num_threads": os.environ.get("LP_NUM_THREADS", "default")}


def fma_gflops(ctx: vkumd.Context, accs: int, vec: int, workgroup: int, repeats: int) -> float:
    """GFLOP/s of the loads-free loop at one point of the sweep (mul and add count 1 each)."""
    program = ctx.kernels.program(FMA_KERNEL.specialize({"ACCS": accs, "VEC": vec,
                                                         WORKGROUP: workgroup}))
    per_iter = INVOCATIONS * 4 * accs * vec * 2
    iters = max(1, int(FLOP_PER_DISPATCH / per_iter))
    out = ctx.empty((INVOCATIONS,), "float32")
    buffers = [(out.allocation.buffer, out.allocation.offset, out.nbytes)]
    push = FMA_PUSH.pack(iters, 0.999, 0.001)
    stream = ctx.stream()

    def run() -> None:
        stream.dispatch(program, buffers, push, (INVOCATIONS // workgroup, 1, 1), (0,))
        stream.synchronize()

    run()  # compile
    seconds = median_time(run, repeats)
    out.release()
    return per_iter * iters / seconds / 1e9


def numpy_gflops(n: int, repeats: int) -> float:
    """numpy's float32 matmul at n^3 (one BLAS thread with ``LP_NUM_THREADS=0``)."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((n, n), dtype=np.float32)
    b = rng.standard_normal((n, n), dtype=np.float32)
    with blas_limits():
        a @ b
        seconds = median_time(lambda: a @ b, repeats)
    return 2.0 * n ** 3 / seconds / 1e9


def measure(ctx: vkumd.Context, repeats: int = 5, verbose: bool = False) -> dict:
    """The best point of the sweep: ``{"gflops", "accs", "vec", "workgroup", "sweep"}``."""
    sweep = []
    for vec in SWEEP_VEC:
        for accs in SWEEP_ACCS:
            for workgroup in SWEEP_WORKGROUP:
                g = fma_gflops(ctx, accs, vec, workgroup, repeats)
                sweep.append({"accs": accs, "vec": vec, "workgroup": workgroup, "gflops": g})
                if verbose:
                    print(f"  ACCS={accs:>2} VEC={vec} workgroup={workgroup:>2}: "
                          f"{g:7.1f} GFLOP/s", flush=True)
    best = max(sweep, key=lambda r: r["gflops"])
    time.sleep(_SETTLE_S)  # lavapipe's workers spin a moment after their work
    return {**best, "sweep": sweep}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the result as JSON here")
    args = parser.parse_args()
    facts = cpu_facts()
    with vkumd.Context(validation=False) as ctx:
        print(f"device: {ctx.caps.name} ({ctx.caps.driver_info}), subgroup "
              f"{ctx.caps.subgroup_size}")
        print(f"cpu: {facts['cpu']}, {facts['isa']}, {facts['cores']} cores; "
              f"LP_NATIVE_VECTOR_WIDTH={facts['lp_native_vector_width']}, "
              f"LP_NUM_THREADS={facts['lp_num_threads']}; clock: {clock_name()}, "
              f"median of {args.repeats}")
        if DROPPED_ENV:
            print(f"dropped for numpy in this run: {', '.join(sorted(DROPPED_ENV))}")
        print("loads-free multiply-add loop (mul + add = 2 flops):")
        ceiling = measure(ctx, args.repeats, verbose=True)
    print(f"numpy BLAS: {blas_info()}")
    numpy = {n: numpy_gflops(n, args.repeats) for n in NUMPY_SIZES}
    print(f"\nceiling: {ceiling['gflops']:.1f} GFLOP/s (ACCS={ceiling['accs']}, "
          f"VEC={ceiling['vec']}, workgroup={ceiling['workgroup']})")
    for n, g in numpy.items():
        print(f"numpy float32 matmul {n}^3: {g:.1f} GFLOP/s; ceiling / numpy = "
              f"{ceiling['gflops'] / g:.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({**facts, "clock": clock_name(), "ceiling": ceiling,
                       "numpy_gflops": numpy, "blas": blas_info()}, f, indent=2)


if __name__ == "__main__":
    main()
